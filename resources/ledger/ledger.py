"""The `Ledger` interface: the commit protocol of ARCHITECTURE §5 and what readers may read.

Each store backend implements it beside `LeaseStore`, on the same connection, because a commit
writes the ledger and the lease item in one transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from resources.coordination.items import NOT_GIVEN, LeaseToken
from resources.ledger.model import (
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
)


class Ledger(ABC):
    """Which small objects make up each table partition, registered by fenced commits."""

    @abstractmethod
    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
    ) -> CommitResult:
        """In ONE transaction, conditional on `token` still holding: register `objects` in the
        ledger (dense per-table-partition ids assigned here), save progress, and mark the
        partition COMPLETED with a TTL-free commit record (or, with `complete=False`, keep the
        lease for the next chunk, ownership extended by `timeout_s`). Raises
        `PartitionNotOwnedError` (fenced: nothing written) or `AlreadyCommittedError`."""

    @abstractmethod
    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None: ...

    @abstractmethod
    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        """Committed small objects, by (dt, id): what readers may read, and nothing else."""

    @abstractmethod
    def table_partitions(self, table: str) -> list[TablePartition]: ...
