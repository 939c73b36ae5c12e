"""Where a stream's schema versions live: one record per (stream, version), never changed.

A version is written only into an empty slot (the store's condition: on DynamoDB
`attribute_not_exists`, on SQLite the primary key), so of two writers racing for version n+1
one lands and the other is told (`SchemaVersionTakenError`), reads again and decides anew: both
sets of columns land, in some order. What to write is decided once, in
`CoordinationStore.record_schema` (the rule is `resources.schema.versions.next_version`); a
backend only reads versions and puts one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from resources.errors import LeaseholdError
from resources.schema.versions import SchemaVersion


class SchemaVersionTakenError(LeaseholdError):
    """Another writer recorded this version number first: nothing was written; read again."""


class SchemaRegistry(ABC):
    """Where a stream's schema versions are read and written, implemented by each store
    beside the ledger (`CoordinationStore.record_schema` decides what to write). Its errors
    are the store's: `LeaseStoreError`s, `StoreUnavailableError` when not reached within the
    bounded retry and `StoreRefusedError` when refused for good."""

    @abstractmethod
    def schema_versions(self, stream: str) -> list[SchemaVersion]:
        """Every recorded version of `stream`'s schema, oldest first, strongly consistent (a
        version written before this call began is in it). Empty when none was ever recorded.
        Raises `LeaseStoreError` (or a subclass) when the store cannot be read."""

    @abstractmethod
    def _put_schema_version(self, stream: str, version: SchemaVersion) -> None:
        """Write `version` if the stream has no record of that version number.
        Raises `SchemaVersionTakenError` when it has one (nothing written), `LeaseStoreError`
        when the store cannot be written."""
