"""The `Ledger` interface: the commit protocol of docs/architecture.md and what readers may read.

Each store backend implements it beside `LeaseStore`, on the same connection, because a commit
writes the ledger and the lease item in one transaction.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from resources.coordination.items import NOT_GIVEN, LeaseToken
from resources.ledger.merge import MergeCommit, MergeCommitResult, MergeRange
from resources.ledger.model import (
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
)
from resources.ledger.publication import Publication


class Ledger(ABC):
    """Which small objects make up each table partition, registered by fenced commits.

    Implemented by each store beside `LeaseStore`, so its errors are the store's: "the store
    errors" in a method's "Raises" are `StoreUnavailableError` (not reached, or throttled,
    within the bounded retry: a write may or may not have landed, so read before retrying)
    and `StoreRefusedError` (refused in a way no retry changes). A refused condition writes
    nothing: each write below is one transaction or one conditional write."""

    @abstractmethod
    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
        merge_after_s: Mapping[str, float] | None = None,
        delayed_merge_after_s: Mapping[str, float] | None = None,
    ) -> CommitResult:
        """In ONE transaction, conditional on `token` still holding: register `objects` in the
        ledger (dense per-table-partition ids assigned here), save progress, and mark the
        partition COMPLETED with a TTL-free commit record (or, with `complete=False`, keep the
        lease for the next chunk, ownership extended by `timeout_s`). For each table named in
        `merge_after_s`, a table partition that got objects gets its merge job due that many
        seconds from now — or, when it is closed (the objects are delayed),
        `delayed_merge_after_s[table]` seconds from now (default: the same) — unless a pending
        job is due earlier already: later commits ride along (`commit_merge_due`). The
        transaction decides which, since only it knows whether the partition is closed.
        Returns the lease item as written and the objects as registered (with their ids).
        Raises `PartitionNotOwnedError` (fenced: nothing written), `AlreadyCommittedError`
        (the source partition has a commit record already: nothing written),
        `CommitTooLargeError` (more objects than one transaction holds: checked before any
        write), and the store errors."""

    @abstractmethod
    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        """The commit record of a source partition (the epoch that committed it and the ids
        of its objects), None if it was never committed with one. Strongly consistent.
        Read-only. Raises the store errors."""

    @abstractmethod
    def ledger_objects(
        self, table: str, dt: str | None = None, *, after: int = 0
    ) -> list[RegisteredObject]:
        """Committed small objects, by (dt, id): what readers may read, and nothing else. With
        `after`, only ids above it (one key range: a reader of what is new pays for that).
        Read-only. Raises the store errors."""

    @abstractmethod
    def table_partitions(self, table: str) -> list[TablePartition]:
        """Every partition of `table` that has a row (something was committed to it), by
        dt. Read-only. Raises the store errors."""

    @abstractmethod
    def table_partition(self, table: str, dt: str) -> TablePartition | None:
        """One table partition's row, strongly consistent; None if nothing was committed to it.
        Read-only. Raises the store errors."""

    @abstractmethod
    def merge_ranges(self, table: str, dt: str) -> list[MergeRange]:
        """The partition's chain, sentinel first, by `upper`; empty if it was never merged.
        Read-only. Raises the store errors."""

    @abstractmethod
    def close_partition(self, table: str, dt: str) -> TablePartition | None:
        """Close the table partition, idempotently: if it is open, `last_live_object_id` becomes
        the last committed id and its merge job is due now, in one conditional write, so a
        racing ingestion commit lands either before it (live) or after it (delayed). A closed
        partition is left as it is. Returns the partition as stored (None if it has no row).
        Raises the store errors."""

    @abstractmethod
    def commit_merge(self, token: LeaseToken, merge: MergeCommit) -> MergeCommitResult:
        """In ONE transaction, conditional on `token` (the partition's merge job lease, type
        `ItemType.MERGE_JOB`, key = dt) still holding and on the chain (`check_merge`, against
        the stored ranges and `next_object_id`): write the range (the sentinel too on the first
        merge; the open range replaced when rewritten), set `desired_manifest_version` and
        `merged_upper` to its `upper`, set `merge_due_at_ms` to `next_merge_due` of what is
        still unmerged at that moment, and hand the job lease back (UNASSIGNED: the next merge
        acquires it with a new epoch). With `merged=None` only the last two happen. Returns
        what was written. Raises `PartitionNotOwnedError` (fenced: nothing written),
        `MergeChainError` (the range does not fit the stored chain: nothing written), and
        the store errors."""

    @abstractmethod
    def record_publication(self, publication: Publication) -> Publication:
        """In ONE conditional write (or transaction): if `publication` passes
        `check_publication` against the partition as stored, make it current — the partition's
        `current_manifest_version` (`publication.manifest_version`), `switched`,
        `published_upper` and `publication_seq` — and keep it as a history record. Assigns
        `seq` (the partition's `publication_seq + 1`) and `published_at_ms` (now); returns the
        record as stored. Raises `StalePublicationError` (nothing written) when the partition
        already has this version or a newer one, and the store errors."""

    @abstractmethod
    def publications(self, table: str, dt: str) -> list[Publication]:
        """The partition's publication records still kept, by `seq` (the last is current);
        empty if it was never published. Read-only. Raises the store errors."""

    @abstractmethod
    def forget_publications(self, table: str, dt: str, before_seq: int) -> int:
        """Delete the history records with `seq < before_seq` (never the current one): garbage
        collection calls it once their files are deleted. Returns how many were deleted.
        Idempotent. Raises the store errors."""
