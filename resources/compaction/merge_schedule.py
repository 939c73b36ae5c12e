"""`MergeSchedule`: which table partitions close now, which merge jobs are due, which are held.

What the merge sensor and `leasehold run` ask before requesting merges; store reads and the
idempotent close only, so a tick stays within Dagster's sensor budget (one query of the table's
partition rows and one of its job leases, however many dates the table has).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from resources.compaction.closing import due_to_close
from resources.coordination.items import ItemType, PartitionStatus
from resources.ledger.model import TablePartition
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)


class MergeSchedule:
    def __init__(self, store: CoordinationStore, config: StreamConfig, table: str) -> None:
        self.store = store
        self.config = config
        self.table = table
        self.job_sid = store.source_identifier(table, ItemType.MERGE_JOB)

    def partitions(self) -> list[TablePartition]:
        return self.store.table_partitions(self.table)

    def close_due(self, partitions: Sequence[TablePartition]) -> list[TablePartition]:
        """Close every open partition whose day (plus grace) has ended; the partitions as
        stored after closing. Idempotent: two closers racing is harmless."""
        closed = []
        for partition in due_to_close(partitions, self.config, self.store.now_ms()):
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

    def due(self, partitions: Sequence[TablePartition]) -> list[TablePartition]:
        """Partitions whose pending merge job is due now, oldest due first."""
        now = self.store.now_ms()
        due = [p for p in partitions if p.merge_due_at_ms is not None and p.merge_due_at_ms <= now]
        return sorted(due, key=lambda p: (p.merge_due_at_ms or 0, p.dt))

    def running(self) -> set[str]:
        """Dates whose merge job lease a live merge holds (ownership not yet expired): asking
        for them again would only find them busy. An expired one is a dead merge: due again."""
        now = self.store.now_ms()
        return {
            item.partition_key
            for item in self.store.iter_items(self.job_sid)
            if item.status is PartitionStatus.ASSIGNED
            and (item.ownership_timeout_ms or 0) > now
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
