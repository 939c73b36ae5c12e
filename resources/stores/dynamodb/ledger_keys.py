"""The DynamoDB ledger's key naming: the `sourceIdentifier` of each kind of ledger item (under
the store's `partition_prefix`) and the keys built from them (the layout is in `ledger.py`)."""

from __future__ import annotations

from resources.stores.dynamodb import codec
from resources.stores.dynamodb.ledger_items import SENTINEL_KEY


class LedgerKeys:
    """Key naming for the ledger mixins; the store provides `partition_prefix`."""

    partition_prefix: str | None

    def _ledger_sid(self, kind: str, name: str) -> str:
        return "|".join([*([self.partition_prefix] if self.partition_prefix else []), name, kind])

    def _partition_key(self, table: str, dt: str) -> dict[str, dict[str, str]]:
        return codec.key(self._ledger_sid("tablePartition", table), dt)

    def _objects_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("smallObjects", f"{table}|{dt}")

    def _ranges_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("mergeRanges", f"{table}|{dt}")

    def _range_key(self, table: str, dt: str, lower: int | None) -> dict[str, dict[str, str]]:
        return codec.key(
            self._ranges_sid(table, dt), SENTINEL_KEY if lower is None else f"{lower:019d}"
        )

    def _publications_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("publications", f"{table}|{dt}")

    def _rollup_sid(self, rollup: str, dt: str) -> str:
        return self._ledger_sid("rollupKeys", f"{rollup}|{dt}")

    def _schema_sid(self, stream: str) -> str:
        return self._ledger_sid("schemaVersions", stream)

    def _record_key(self, sid: str, key: str) -> dict[str, dict[str, str]]:
        return codec.key(f"{sid}|commit", key)
