"""`CoordinationStore`: leases and the ledger in one store, and the commits they share.

A commit (ARCHITECTURE §5) writes the ledger and the lease item in one transaction, so one
store implements both interfaces. What a commit decides is here, once: the size check, the
lease transition (COMPLETED, or renewed for chunked work), the ids (`assign_ids`), the metrics
and what a refusal means. A backend only writes it all as one transaction (`_commit`). A merge
commit is the same shape: the job lease's give-up transition, its metrics and refusal are
here; the backend's `_commit_merge` writes the range, the partition and the lease together.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from resources.coordination import metrics as m
from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import NOT_GIVEN, LeaseItem, LeaseToken
from resources.coordination.lease_store import LeaseStore
from resources.coordination.transitions import Transition
from resources.ledger.ledger import Ledger
from resources.ledger.merge import MergeCommit, MergeCommitResult
from resources.ledger.model import (
    CommitResult,
    SmallObject,
    check_commit_size,
    group_by_partition,
)

TablePartitionObjects = dict[tuple[str, str], list[SmallObject]]


class CoordinationStore(LeaseStore, Ledger, ABC):
    @abstractmethod
    def _commit(
        self,
        token: LeaseToken,
        groups: TablePartitionObjects,
        lease_change: Transition,
        record: bool,
        merge_due_at_ms: Mapping[str, int],
    ) -> tuple[CommitResult | None, LeaseItem | None]:
        """In ONE transaction, if `lease_change`'s guard holds: register the objects with ids
        from `assign_ids`, write a commit record when `record` (raising `AlreadyCommittedError`
        if there is one), set `merge_due_at_ms[table]` on each of that table's partitions in
        `groups` that has none, and apply `lease_change`. `(result, None)`, or `(None, the
        lease item as stored)` when the guard refused: then nothing was written."""

    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
        merge_after_s: Mapping[str, float] | None = None,
    ) -> CommitResult:
        objects = list(objects)
        now = self.now_ms()
        due = {t: now + int(round(s * 1000)) for t, s in (merge_after_s or {}).items()}
        check_commit_size(objects)
        if complete:
            change = self.completion(token, progress_state)
        else:
            change = self.renewal(token, timeout_s, progress_state)
        try:
            result, current = self._commit(
                token, group_by_partition(objects), change, complete, due
            )
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(change.action))
            raise
        if result is None:
            raise self._refused(token, change, current)
        if complete:
            self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return result

    @abstractmethod
    def _commit_merge(
        self, token: LeaseToken, merge: MergeCommit, lease_change: Transition
    ) -> tuple[MergeCommitResult | None, LeaseItem | None]:
        """In ONE transaction, if `lease_change`'s guard holds: `check_merge` against the stored
        chain and `next_object_id` (raising `MergeChainError`, nothing written), write the range
        (and the sentinel on the first merge), the partition's `merged_upper`,
        `desired_manifest_version` and `merge_due_at_ms` (`next_merge_due` of what the
        transaction sees), and apply `lease_change`. `(result, None)`, or `(None, the lease item
        as stored)` when the guard refused: then nothing was written. The guard is decided
        before the chain, so a fenced merge is told it lost its lease, whatever the chain."""

    def commit_merge(self, token: LeaseToken, merge: MergeCommit) -> MergeCommitResult:
        change = self.giving_up(token)
        try:
            result, current = self._commit_merge(token, merge, change)
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(change.action))
            raise
        if result is None:
            raise self._refused(token, change, current)
        return result
