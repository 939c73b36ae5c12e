"""Committing one work unit's staged files (step 3 of `runner`): plan what to publish (what an
interrupted attempt committed of the same objects is skipped), publish, commit in
transaction-sized batches fenced by the lease, map a refusal to its outcome, fill the outcome;
and closing a unit that could not be read. Part of `IngestionRunner`."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from functools import partial
from typing import Any

from resources.coordination.errors import LeaseStoreError
from resources.coordination.items import LeaseItem, LeaseToken, iso_utc
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.ingestion.batch_results import ReadBatch, SourceBatchResult, StagedFile
from resources.ingestion.outcomes import (
    ALREADY_COMPLETE,
    COMMITTED,
    FAILED,
    LOST_LEASE,
    UNREADABLE,
    PartitionOutcome,
)
from resources.ingestion.replacement import (
    ReplacementMarkers,
    ReplacementTooLargeError,
    ReplacementWaitError,
)
from resources.ingestion.unit_progress import (
    FAILED_READS,
    PARTIAL,
    QUARANTINE_PART,
    add_counts,
    commit_batches,
    failures,
    quarantine_table,
)
from resources.ingestion.work_units import DONE, done_objects, replaced_by
from resources.ledger.model import AlreadyCommittedError, SmallObject
from resources.stores.base import CoordinationStore

# The runner's logger: what a unit's ingestion logs is found under one name, as before the split.
log = logging.getLogger("resources.ingestion.runner")

Planned = tuple[StagedFile, str, str]
"""An object to commit: (the object, its table, its `table|partition` slot)."""


class UnitCommits:
    """The commit half of `IngestionRunner`."""

    # Set by `IngestionRunner.__init__`.
    stream: str
    table: str
    store: CoordinationStore
    timing: LeaseTiming
    read_batch: ReadBatch
    commit_every_bytes: int | None
    clock: Callable[[], datetime]
    on_step: Callable[[str, str], None]
    merge_after_s: dict[str, float]
    delayed_merge_after_s: dict[str, float]
    replacements: ReplacementMarkers | None

    def _not_ingested(
        self, outcome: PartitionOutcome, exc: BaseException | None = None
    ) -> PartitionOutcome:
        """Log a partition this run does not ingest, where that is decided; the caller gets the
        same message in its outcome. `exc` adds a traceback: for errors leasehold does not
        expect."""
        log.warning(
            "%s: %r not ingested (%s): %s",
            self.stream,
            outcome.source_key,
            outcome.outcome,
            outcome.message,
            exc_info=exc,
        )
        return outcome

    def _close_unreadable(
        self,
        lease: Lease,
        key: str,
        reason: str,
        exc: BaseException | None = None,
        committed: PartitionOutcome | None = None,
    ) -> PartitionOutcome:
        """CLOSE the unit (reopened with backoff, dead-lettered after the last try). With
        `committed`: what this attempt committed of the unit's other objects first."""
        # Kept with the unit's progress, so `leasehold status` can say which object failed.
        progress = dict(lease.progress) if isinstance(lease.progress, dict) else {}
        progress[FAILED_READS] = reason
        try:
            item = lease.close(reason=reason, progress=progress)
        except LeaseStoreError as lost:
            outcome = PartitionOutcome(key, LOST_LEASE, lease.epoch, message=str(lost))
            return self._not_ingested(outcome, exc)
        if item.dead_letter_reason is not None:
            message = f"dead-lettered after {item.closed_count} failed reads: {reason}"
        else:
            message = (
                f"unreadable (closed {item.closed_count} times, will retry at "
                f"{iso_utc(item.reopen_at_ms)}): {reason}"
            )
        outcome = committed or PartitionOutcome(key, UNREADABLE, lease.epoch)
        outcome.outcome, outcome.epoch = UNREADABLE, lease.epoch
        if committed is not None:
            message = (
                f"its readable objects committed ({committed.rows_written} rows in all); {message}"
            )
        outcome.message = message
        return self._not_ingested(outcome, exc)

    def _commit(
        self,
        lease: Lease,
        key: str,
        result: SourceBatchResult,
        reading: list[str],
        attempt: str,
        final: bool = True,
        reached: dict[str, Any] | None = None,
    ) -> PartitionOutcome:
        """Commit what was read of a unit (all of it, or — `final=False` — one chunk of a
        large object, whose progress `reached` is saved in the same transaction)."""
        if result.unreadable is not None:
            return self._close_unreadable(lease, key, result.unreadable)
        outcome = PartitionOutcome(key, COMMITTED, lease.epoch)
        outcome.schema_version = result.schema_version if result.table_files else 0
        outcome.new_columns = list(result.new_columns)
        outcome.unknown_fields = dict(result.unknown_fields)
        if lease.lost:
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the lease: {lease.lost_reason}"
            return self._not_ingested(outcome)
        progress = dict(lease.progress) if isinstance(lease.progress, dict) else {}
        progress.pop(FAILED_READS, None)
        partial = progress.get(PARTIAL)
        if partial and result.failed:
            # Part of these objects' partitions is committed: the rest must come from all of
            # them, or a later retry of the missing one would repeat its committed rows.
            return self._close_unreadable(lease, key, failures(result.failed))
        already: dict[str, int] = dict(partial["committed"]) if partial else {}
        objects = [(self._object(f, table), slot) for f, table, slot in self._plan(result, already)]
        replaced = replaced_by(progress)
        if replaced is not None:
            try:
                objects = self._with_markers(key, replaced, objects)
            except (ReplacementWaitError, ReplacementTooLargeError) as exc:
                return self._close_unreadable(lease, key, str(exc))
        self.on_step("published", key)
        try:
            committed = self._commit_batches(
                lease, progress, already, objects, result, reading, attempt, final, reached
            )
        except (LeaseLostError, AlreadyCommittedError, LeaseStoreError) as exc:
            return self._refused(outcome, key, exc)
        self.on_step("committed", key)
        self._fill(outcome, committed, progress, [o for o, _ in objects])
        if result.failed:
            # The others are in; this unit is retried for the objects that failed.
            return self._close_unreadable(lease, key, failures(result.failed), committed=outcome)
        return outcome

    def _with_markers(
        self, key: str, replaced: tuple[str, str], objects: list[tuple[SmallObject, str]]
    ) -> list[tuple[SmallObject, str]]:
        """A replacement unit's objects and its retraction markers (`replacement`), to commit
        in one transaction."""
        if self.replacements is None:
            raise ReplacementWaitError("this runner cannot write retraction markers")
        slots = {id(o): slot for o, slot in objects}
        every = self.replacements.with_markers(key, replaced, [o for o, _ in objects])
        return [(o, slots.get(id(o), f"{o.table}|{o.dt}")) for o in every]

    def _plan(self, result: SourceBatchResult, already: dict[str, int]) -> list[Planned]:
        """The objects to commit, table then quarantine, in order."""
        written = [(f, self.table, f.dt) for f in result.table_files] + [
            (f, quarantine_table(self.stream), QUARANTINE_PART) for f in result.quarantine_files
        ]
        # What an interrupted attempt committed of the same objects is skipped: they were
        # re-read, and a re-read gives the same objects per partition, in the same order
        # (`split_plan` cuts a unit the same way whatever else its chunk holds).
        seen: dict[str, int] = {}
        todo = []
        for f, table, part in written:
            slot = f"{table}|{part}"
            seen[slot] = seen.get(slot, 0) + 1
            if seen[slot] > already.get(slot, 0):
                todo.append((f, table, slot))
        return todo

    def _commit_batches(
        self,
        lease: Lease,
        progress: dict[str, Any],
        already: dict[str, int],
        objects: list[tuple[SmallObject, str]],
        result: SourceBatchResult,
        reading: list[str],
        attempt: str,
        final: bool,
        reached: dict[str, Any] | None,
    ) -> LeaseItem:
        """One fenced transaction per batch (`commit_batches`), each saving the unit's progress;
        the last one completes the unit (unless objects failed or more chunks follow)."""
        batches = commit_batches(objects)
        committed: LeaseItem | None = None
        for i, batch in enumerate(batches):
            last = i == len(batches) - 1
            add_counts(progress, [o for o, _ in batch], self.table)
            progress["attempt"] = attempt
            for _, slot in batch:
                already[slot] = already.get(slot, 0) + 1
            if last:
                progress.pop(PARTIAL, None)
                progress.update(reached or {})
                if result.failed:
                    done = done_objects(progress) | (set(reading) - set(result.failed))
                    progress[DONE] = sorted(done)
            else:
                progress[PARTIAL] = {"objects": reading, "committed": sorted(already.items())}
            complete = last and final and not result.failed
            state = json.dumps(progress)
            write = partial(self._commit_batch, [o for o, _ in batch], state, complete)
            committed = lease.commit(write, final=complete)
        assert committed is not None  # `commit_batches` gives at least one batch
        return committed

    def _commit_batch(
        self, objects: list[SmallObject], state: str, complete: bool, token: LeaseToken
    ) -> LeaseItem:
        """One batch's transaction, fenced by `token`: the objects, the progress, maybe
        COMPLETED."""
        return self.store.commit(
            token,
            objects,
            progress_state=state,
            complete=complete,
            timeout_s=self.timing.ownership_timeout_s,
            merge_after_s=self.merge_after_s,
            delayed_merge_after_s=self.delayed_merge_after_s,
        ).item

    def _refused(self, outcome: PartitionOutcome, key: str, exc: Exception) -> PartitionOutcome:
        """The outcome of a commit the store refused, or that it may not have taken."""
        if isinstance(exc, LeaseLostError):
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the lease: {exc}"
            return self._not_ingested(outcome)
        if isinstance(exc, AlreadyCommittedError):
            log.info("%s: %r already committed: %s", self.stream, key, exc)
            outcome.outcome, outcome.message = ALREADY_COMPLETE, str(exc)
            return outcome
        # Store down: unknown whether it landed; a retry knows.
        outcome.outcome = FAILED
        outcome.message = f"commit failed: {exc}; retried at the next discovery tick"
        return self._not_ingested(outcome)

    def _fill(
        self,
        outcome: PartitionOutcome,
        committed: LeaseItem,
        progress: dict[str, Any],
        objects: list[SmallObject],
    ) -> None:
        """The outcome of a unit committed: the unit's totals, this attempt's table objects."""
        outcome.epoch = committed.epoch
        outcome.rows_read = int(progress.get("rows_read", 0))
        outcome.rows_written = int(progress.get("rows_written", 0))
        outcome.rows_quarantined = int(progress.get("rows_quarantined", 0))
        table_objects = [o for o in objects if o.table == self.table]
        outcome.small_objects = len(table_objects)
        outcome.bytes = sum(o.content_length for o in table_objects)
        outcome.table_partitions = sorted({o.dt for o in table_objects})

    def _object(self, written: StagedFile, table: str) -> SmallObject:
        return SmallObject(
            table,
            written.dt,
            written.url,
            written.content_length,
            written.row_count,
            schema_version=written.schema_version,
            sources=written.sources,
        )
