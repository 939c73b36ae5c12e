"""`MergeSchedule`: which table partitions close now, which merge jobs are due, which are held.

What the merge sensor and `leasehold run` ask before requesting merges; store reads and the
idempotent close only, so a tick stays within Dagster's sensor budget (one query of the table's
partition rows and one of its job leases, however many dates the table has; closing adds a
read of discovery's global state and one bounded query of the stream's pending source
partitions, only while some partition waits to close).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from resources.compaction.closing import ClosingError, closes_at_ms, due_to_close, ingestion_pending
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import ItemType, PartitionStatus, iso_utc
from resources.coordination.lease import LeaseTiming
from resources.coordination.supplier import caught_up_ms
from resources.ledger.model import TablePartition
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

PENDING_READ = 100
"""Pending source partitions one closing decision reads at most. UNASSIGNED and ASSIGNED ones
come first and decide at once; only CLOSED ones are looked at one by one, and a stream with
more unreadable objects than this waiting on a retry is treated as pending (closing waits)."""


class MergeSchedule:
    """Which table partitions close now, which merge jobs are due and which are held, read from the
    store."""

    def __init__(
        self,
        store: CoordinationStore,
        config: StreamConfig,
        table: str,
        backoff: ReopenBackoff | None = None,
    ) -> None:
        """`backoff`: the reopen policy source partitions are closed with (the coordination
        resource's timing), which bounds how long a retry holds closing back."""
        self.store = store
        self.config = config
        self.table = table
        self.job_sid = store.source_identifier(table, ItemType.MERGE_JOB)
        self.backoff = backoff or LeaseTiming().reopen_backoff

    def partitions(self) -> list[TablePartition]:
        return self.store.table_partitions(self.table)

    def ingestion_pending(self, now_ms: int) -> bool:
        """Whether a source partition of the stream holds closing back
        (`closing.retry_holds_closing`): one bounded query by status, O(pending items)."""
        sid = self.store.source_identifier(self.config.name)
        items = self.store.pending_partitions(sid, PENDING_READ)
        holder = ingestion_pending(items, now_ms, self.config.merge.close_wait_max_s, self.backoff)
        if holder is not None:
            log.info(
                "%s: closing waits for %s (%s%s)",
                self.table,
                holder.partition_key,
                holder.status.value,
                f", retry at {iso_utc(holder.reopen_at_ms)}" if holder.reopen_at_ms else "",
            )
            return True
        if len(items) >= PENDING_READ:
            log.warning(
                "%s: closing waits: %d or more source partitions are waiting on a retry",
                self.table,
                PENDING_READ,
            )
            return True
        return False

    def close_due(self, partitions: Sequence[TablePartition]) -> list[TablePartition]:
        """Close every open partition whose day (plus grace) has ended, once ingestion has
        caught up (`closing.due_to_close`); the partitions as stored after closing.
        Idempotent: two closers racing is harmless. The store is asked about ingestion only
        when some open partition's time has come (`due_to_close` with nothing pending and
        discovery caught up now says which)."""
        now = self.store.now_ms()
        if not due_to_close(partitions, self.config, now, caught_up_ms=now, pending=False):
            return []
        caught_up = caught_up_ms(self.store, self.config.name)
        pending = caught_up is not None and self.ingestion_pending(now)
        closed = []
        for partition in due_to_close(
            partitions, self.config, now, caught_up_ms=caught_up, pending=pending
        ):
            stored = self.store.close_partition(self.table, partition.dt)
            if stored is not None:
                log.info(
                    "%s dt=%s closed: last live object %s",
                    self.table,
                    stored.dt,
                    stored.last_live_object_id,
                )
                closed.append(stored)
        return closed

    def due(
        self, partitions: Sequence[TablePartition], closed_now: bool = False
    ) -> list[TablePartition]:
        """Partitions whose pending merge job is due now, oldest due first. With `closed_now`,
        also every closed partition with a pending job, whenever it is due: `leasehold run`
        ends with what it committed published, and until a merge covers them a closed
        partition's delayed objects are not (an open one's are, on its live manifest)."""
        now = self.store.now_ms()
        due = [
            p
            for p in partitions
            if p.merge_due_at_ms is not None
            and (p.merge_due_at_ms <= now or (closed_now and p.closed))
        ]
        return sorted(due, key=lambda p: (p.merge_due_at_ms or 0, p.dt))

    def next_due(self, partitions: Sequence[TablePartition]) -> str:
        """When something is next due, for a tick that found nothing due: the earliest pending
        merge job and the earliest closing of an open partition (which makes its merge due)."""
        jobs = [(p.merge_due_at_ms, p.dt) for p in partitions if p.merge_due_at_ms is not None]
        closings = []
        for p in partitions:
            if not p.closed:
                try:
                    closes_at = closes_at_ms(
                        p.dt, self.config.timezone, self.config.merge.close_grace_s
                    )
                except ClosingError:
                    continue  # logged where closing is decided (`due_to_close`)
                closings.append((closes_at, p.dt))
        parts = []
        if jobs:
            at, dt = min(jobs)
            parts.append(f"next merge due {iso_utc(at)} (dt={dt})")
        if closings:
            at, dt = min(closings)
            parts.append(f"next closing {iso_utc(at)} (dt={dt}), once ingestion caught up")
        return "; ".join(parts) or "no merge pending and no open partition"

    def running(self) -> set[str]:
        """Dates whose merge job lease a live merge holds (ownership not yet expired): asking
        for them again would only find them busy. An expired one is a dead merge: due again."""
        now = self.store.now_ms()
        return {
            item.partition_key
            for item in self.store.iter_items(self.job_sid)
            if item.status is PartitionStatus.ASSIGNED and (item.ownership_timeout_ms or 0) > now
        }

    def refresh(self) -> tuple[list[TablePartition], list[TablePartition]]:
        """(every partition after closing the due ones, those closed now)."""
        partitions = self.partitions()
        closed = self.close_due(partitions)
        if closed:
            by_dt = {p.dt: p for p in partitions}
            by_dt.update({p.dt: p for p in closed})
            partitions = sorted(by_dt.values(), key=lambda p: p.dt)
        return partitions, closed


@dataclass(frozen=True)
class MergeRunPlan:
    """One merge run: a range of the table's date partitions (positional, in the order Dagster
    holds them) and the due dates in it."""

    first: str
    last: str
    dts: tuple[str, ...]


def plan_merge_runs(
    order: Sequence[str], wanted: Sequence[str], per_run: int
) -> list[MergeRunPlan]:
    """Cut `wanted` (dates in `order`) into runs of at most `per_run` dates each, each run the
    range from its first to its last date: one run merges many table partitions. Dates between
    them that are not wanted are in the range too; a run merges only what is due when it gets
    there."""
    position = {dt: i for i, dt in enumerate(order)}
    ordered = sorted((dt for dt in set(wanted) if dt in position), key=position.__getitem__)
    return [
        MergeRunPlan(chunk[0], chunk[-1], tuple(chunk))
        for chunk in (ordered[i : i + per_run] for i in range(0, len(ordered), per_run))
    ]
