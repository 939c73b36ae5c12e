"""`SourceCleaner`: one pass of source clean-up for one stream, bounded, resumable, idempotent.

A pass holds the stream's `cleanup` global-state lease (one pass at a time per stream: a
second one finds it held and does nothing), reads the COMPLETED work units after its cursor in
completion order, page by page (`completed_between`: a pass costs what completed since the
last, never the history), re-reads each unit (strongly consistent), lets `plan_cleanup` decide
which may go, removes their objects (`SourceRemover`) and saves its counts and cursor after
each unit in one fenced write that also extends the lease. Killed at any moment, it leaves the
cursor before every unit not finished: the next pass redoes that unit, which is harmless.
A dry run reads the same way, without the lease, and changes nothing.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace

from resources.cleanup.planner import Step, plan_cleanup
from resources.cleanup.published import PublishedRows
from resources.cleanup.remover import Removed, SourceRemover
from resources.coordination.cleanup_state import CLEANUP_STATE, CleanupState
from resources.coordination.health import INDEX_LAG_MS
from resources.coordination.items import (
    LeaseItem,
    LeaseToken,
    PartitionStatus,
    to_millis,
    whole_priority_groups,
)
from resources.errors import LeaseholdError
from resources.objects.base import ObjectStore
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

PAGE_UNITS = 100
"""Completed units read per status-index query (each with its object list, up to ~40 KB)."""


@dataclass(frozen=True)
class DueObject:
    """An object a pass removed, or a dry run would: what `--dry-run` lists."""

    key: str
    unit: str
    why: str


@dataclass
class CleanupReport:
    """What one pass did (or, dry, would do) for one stream."""

    stream: str
    mode: str
    dry_run: bool = False
    busy: bool = False
    """Another pass holds the stream's clean-up lease: this one did nothing."""
    units: int = 0
    """Units whose objects went (or would)."""
    passed_over: int = 0
    """Units kept for good: dead letters, units without a commit record."""
    removed: Removed = field(default_factory=Removed)
    due: list[DueObject] = field(default_factory=list)
    waiting: tuple[str, str] | None = None
    """(unit, why) of the unit the pass stopped before: its rows are not published yet."""
    full: bool = False
    """The pass stopped at its object bound; the next one goes on."""
    state: CleanupState = field(default_factory=CleanupState)
    """The stream's clean-up state after the pass (totals since clean-up first ran)."""

    def describe(self) -> str:
        """One line: what the pass did, and where it stopped."""
        if self.busy:
            return f"{self.stream}: another clean-up pass is running; nothing done"
        r = self.removed
        verb = "would remove" if self.dry_run else f"{self.mode}d" if self.mode else "removed"
        count = len(self.due) if self.dry_run else r.archived + r.deleted
        line = f"{self.stream}: {verb} {count} source objects of {self.units} work units"
        if not self.dry_run:
            line += f" ({r.bytes} bytes; {r.gone} already gone)"
            if r.changed:
                line += (
                    f"; {r.changed} kept: changed since they were ingested, never removed "
                    f"({r.kept[0]}{' and more' if r.changed > 1 else ''}; leasehold changes "
                    f"ls {self.stream})"
                )
        if self.waiting is not None:
            line += f"; waiting at unit {self.waiting[0]!r}: {self.waiting[1]}"
        elif self.full:
            line += "; stopped at the per-pass bound (LEASEHOLD_CLEANUP_OBJECTS_PER_PASS)"
        return line


class SourceCleaner:
    """Source clean-up of one stream (its `source_cleanup` section) on one store."""

    def __init__(
        self,
        config: StreamConfig,
        store: CoordinationStore,
        source: ObjectStore,
        archive: ObjectStore | None,
        *,
        objects_per_pass: int,
        owner: str,
        timeout_s: float,
    ) -> None:
        self.config = config
        self.stream = config.name
        self.store = store
        self.sid = store.source_identifier(config.name)
        self.settings = config.source_cleanup
        self.remover = (
            SourceRemover(self.settings.mode, source, archive) if self.settings.enabled else None
        )
        self.objects_per_pass = objects_per_pass
        self.owner = owner
        self.timeout_s = timeout_s

    def run_pass(self, *, dry_run: bool = False) -> CleanupReport:
        """One pass: remove (or, with `dry_run`, list) what may go, up to the per-pass bound,
        saving progress after each unit. Returns what it did; a stream whose clean-up is off
        gets an empty report. Raises the store errors, `PartitionNotOwnedError` when the lease
        was taken over mid-pass (another pass goes on from the last unit saved), and the
        object store's errors (`ObjectStoreError`, `OSError`): the unit being removed is
        redone by the next pass."""
        report = CleanupReport(self.stream, self.settings.mode, dry_run=dry_run)
        if self.remover is None:
            return report
        if dry_run:
            state = CleanupState.from_json(self.store.read_global_state(self.stream, CLEANUP_STATE))
            report.state = self._walk(state, report, None)
            return report
        lease = self.store.acquire_global_state(
            self.stream, CLEANUP_STATE, self.owner, self.timeout_s
        )
        if lease is None:
            report.busy = True
            report.state = CleanupState.from_json(
                self.store.read_global_state(self.stream, CLEANUP_STATE)
            )
            return report
        token = lease.token
        try:
            state = self._walk(CleanupState.from_json(lease.progress or {}), report, token)
        except BaseException:
            self._release(token)
            raise
        state = replace(state, passes=state.passes + 1, last_pass_ms=self.store.now_ms())
        self.store.release_global_state(token, state.to_json())
        report.state = state
        return report

    def _release(self, token: LeaseToken) -> None:
        """Hand the lease back after a failure, keeping the state last saved."""
        try:
            self.store.release_global_state(token)
        except LeaseholdError:
            log.warning("%s: could not hand the clean-up lease back", self.stream, exc_info=True)

    def _walk(
        self, state: CleanupState, report: CleanupReport, token: LeaseToken | None
    ) -> CleanupState:
        """Page by page from the cursor until a unit waits, the bound is reached or nothing
        completed before the cut-off is left."""
        now = self.store.now_ms()
        cutoff = now - to_millis(self.settings.after_s)
        # DynamoDB's status index may not hold an item completed in the last moments yet: a
        # cursor moved past a later one would skip it for good.
        lag = INDEX_LAG_MS if self.store.backend == "dynamodb" else 0
        read_before = min(cutoff, now - lag)
        verdicts = PublishedRows(self.store, self.config.name)
        budget, after = self.objects_per_pass, state.cursor
        while budget > 0:
            page, more = self._page(after, read_before)
            plan = plan_cleanup(
                [self._current(i) for i in page], verdicts.verdict, cutoff_ms=cutoff, limit=budget
            )
            for step in plan.steps:
                state = self._do(step, state, report, token)
            report.waiting, report.full = plan.waiting, plan.full
            budget -= plan.objects
            if plan.stopped or not more:
                break
            after = page[-1].priority
        return state

    def _page(self, after: str | None, before_ms: int) -> tuple[list[LeaseItem], bool]:
        """(the next page's whole priority groups, whether more may follow): a page that is
        one group of equal priorities is read again, bigger, until the group ends in it."""
        limit = PAGE_UNITS
        while True:
            read = self.store.completed_between(self.sid, after, before_ms, limit)
            page = whole_priority_groups(read, limit)
            if len(read) < limit or page[-1].priority != read[-1].priority:
                return page, len(read) == limit
            limit *= 2

    def _current(self, item: LeaseItem) -> LeaseItem:
        """The item as stored now (the index may lag). One that changed since the index read
        it — re-driven, or gone — is passed over: if it completes again, it does so with a new
        priority, after the cursor."""
        current = self.store.get(self.sid, item.partition_key)
        if current is None or current.priority != item.priority:
            return replace(item, status=PartitionStatus.CLOSED)
        return current

    def _do(
        self, step: Step, state: CleanupState, report: CleanupReport, token: LeaseToken | None
    ) -> CleanupState:
        """One step: its objects removed (listed, when dry), the state advanced and saved."""
        if not step.removes:
            report.passed_over += 1
            log.info("%s: unit %r passed over: %s", self.stream, step.unit, step.why)
        else:
            report.units += 1
        if token is None:
            report.due.extend(DueObject(o.key, step.unit, step.why) for o in step.objects)
            return replace(state, cursor=step.cursor or state.cursor)
        assert self.remover is not None
        removed = self.remover.remove(step.objects) if step.removes else Removed()
        report.removed += removed
        state = state.added(removed.archived, removed.deleted, removed.gone, removed.bytes)
        state = replace(state, cursor=step.cursor or state.cursor)
        self.store.update_global_state(token, state.to_json(), self.timeout_s)
        return state
