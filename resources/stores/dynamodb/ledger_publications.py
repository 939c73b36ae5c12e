"""The DynamoDB ledger's publications: recording one (the partition's current publication and
the history record as one transaction, with the lease's update when fenced), the history read
and forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.errors import LeaseholdError
from resources.ledger.publication import Publication
from resources.stores.base import forget_bound, stamped_publication
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.ledger_access import LedgerAccess
from resources.stores.dynamodb.ledger_items import (
    partition_from,
    publication_from,
    publication_item,
)


class DynamoDbPublications(LedgerAccess):
    """Publication records."""

    def _record_publications(
        self,
        publications: Sequence[Publication],
        token: LeaseToken | None,
        lease_change: Transition | None,
    ) -> tuple[list[Publication] | None, LeaseItem | None]:
        """Read each partition (strongly consistent), `stamped_publication` on it, then one
        `TransactWriteItems`: per publication the partition's current publication,
        conditional on the `publicationSeq` as read (so of two racing publishers only one can
        move it), and the history record, conditional on being new; fenced, the lease's update
        too (its guard as the condition, `_fenced_transact`). A failed guard is the lease lost,
        whatever else failed; any other cancellation means another publisher got there first:
        read again — the check refuses ours if a partition now has our version or a newer one,
        else the next attempt records them with the next `seq`s. A fenced publication the check
        refuses is told first if its lease is lost, as a transaction deciding the guard first
        would."""
        for _ in range(self.retry.max_attempts * 2):
            read = [
                self._get_raw("record_publication", self._partition_key(p.table, p.dt))
                for p in publications
            ]
            try:
                stored = [
                    stamped_publication(
                        None if raw is None else partition_from(p.table, raw), p, self.now_ms()
                    )
                    for p, raw in zip(publications, read, strict=True)
                ]
            except LeaseholdError:
                lost = self._lease_lost(token, lease_change)
                if lost is not None:
                    return None, lost  # fenced first: a zombie is told it lost its lease
                raise
            writes = []
            for raw, record in zip(read, stored, strict=True):
                assert raw is not None  # stamped_publication refuses a missing partition
                writes += [
                    {"Update": self._published_partition_update(raw, record)},
                    {"Put": self._publication_put(record)},
                ]
            if token is None or lease_change is None:
                reasons = self._transact("record_publication", writes)
            else:
                outcome = self._fenced_transact(token, lease_change, writes)
                if outcome.lost:
                    return None, outcome.current
                reasons = outcome.reasons
            if reasons is None:
                return stored, None
            _check_history(stored, reasons)
        where = ", ".join(f"{p.table} dt={p.dt}" for p in publications)
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: record_publication of {where} kept losing the "
            "race with other publishers"
        )

    def _lease_lost(
        self, token: LeaseToken | None, lease_change: Transition | None
    ) -> LeaseItem | None:
        """The lease item as stored when `lease_change`'s guard no longer holds; else None."""
        if token is None or lease_change is None:
            return None
        current = self.get(token.source_identifier, token.partition_key)
        return None if lease_change.guard.holds(current) else current

    def _published_partition_update(
        self, raw: dict[str, Any], stored: Publication
    ) -> dict[str, Any]:
        """Only the publication's attributes: an ingestion or merge commit landing meanwhile
        neither cancels this nor is cancelled by it (what `check_publication` read of them —
        the committed ids and the chain's end — only ever grows)."""
        values = {
            ":cmv": codec.n(stored.manifest_version),
            ":switched": {"BOOL": stored.switched},
            ":upper": codec.n(stored.upper),
            ":seq": codec.n(stored.seq),
        }
        if "publicationSeq" in raw:
            condition = "publicationSeq = :read"
            values[":read"] = raw["publicationSeq"]
        else:
            condition = "attribute_exists(nextObjectId) AND attribute_not_exists(publicationSeq)"
        return {
            "TableName": self.table_name,
            "Key": {ATTR["sid"]: raw[ATTR["sid"]], ATTR["key"]: raw[ATTR["key"]]},
            "UpdateExpression": (
                "SET currentManifestVersion = :cmv, #switched = :switched, "
                "publishedUpper = :upper, publicationSeq = :seq"
            ),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#switched": "switched"},
            "ExpressionAttributeValues": values,
        }

    def _publication_put(self, p: Publication) -> dict[str, Any]:
        key = codec.key(self._publications_sid(p.table, p.dt), f"{p.seq:019d}")
        return self._new_item_put(key, publication_item(p))

    def publications(self, table: str, dt: str) -> list[Publication]:
        """One Query of the partition's history items (their keys sort by `seq`)."""
        raws = self._query_all("publications", self._publications_sid(table, dt))
        return sorted((publication_from(table, dt, raw) for raw in raws), key=lambda p: p.seq)

    def forget_publications(self, table: str, dt: str, before_seq: int) -> int:
        """The records below `forget_bound` (never the current one, as just read strongly
        consistent) found by one key-range Query, then deleted in batches. Only garbage
        collection forgets, and new records only get higher `seq`s, so nothing races it."""
        bound = forget_bound(self.table_partition(table, dt), before_seq)
        if bound <= 1:
            return 0
        sid = self._publications_sid(table, dt)

        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#sid = :sid AND #key < :bound",
                ExpressionAttributeNames={"#sid": ATTR["sid"], "#key": ATTR["key"]},
                ExpressionAttributeValues={
                    ":sid": codec.s(sid),
                    ":bound": codec.s(f"{bound:019d}"),
                },
                ProjectionExpression="#sid, #key",
                ConsistentRead=True,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        keys = self._call("forget_publications", query)
        self.dynamodb.batch_delete("forget_publications", keys)
        return len(keys)


def _check_history(stored: Sequence[Publication], reasons: Sequence[str]) -> None:
    """Raise when a cancelled transaction found a partition as read but its next history record
    already there (the writes are each publication's update, then its put)."""
    for i, record in enumerate(stored):
        if reasons[2 * i] != "ConditionalCheckFailed" and reasons[2 * i + 1] == (
            "ConditionalCheckFailed"
        ):
            # The row was as read, yet its next record exists: nothing else writes one.
            raise LeaseholdError(
                f"{record.table} dt={record.dt}: publication record {record.seq} exists although "
                f"the partition's current one is {record.seq - 1}; the ledger needs repair"
            )
