"""Source-coordination counters with Data Prepper's metric names.

Counted in process (free), persisted in batches by `LeaseStore.flush_metrics`, so the per-
partition path pays no extra store call and `leasehold status` still sees every process's counts.
The ingestion runner flushes after each chunk's commits, so a killed run loses at most the counts
of one chunk; the discovery sensor after each tick; the store when it is closed.
"""

from __future__ import annotations

import logging
import threading
from collections import defaultdict
from typing import Protocol

from resources.coordination.errors import LeaseStoreError

log = logging.getLogger(__name__)

PARTITIONS_CREATED = "partitionsCreatedCount"
PARTITIONS_ACQUIRED = "partitionsAcquired"
PARTITIONS_COMPLETED = "partitionsCompleted"
PARTITIONS_CLOSED = "partitionsClosed"
NO_PARTITIONS_ACQUIRED = "noPartitionsAcquired"
PARTITION_NOT_FOUND = "partitionNotFoundErrors"
PARTITION_NOT_OWNED = "partitionNotOwnedErrors"
PARTITIONS_REDRIVEN = "partitionsRedriven"
"""Ours, not Data Prepper's (it has no re-drive): dead letters an operator put back."""


def update_errors(action: str) -> str:
    """Data Prepper prefixes `partitionUpdateErrors` with the action (`saveState...`)."""
    return f"{action}PartitionUpdateErrors"


class CoordinatorMetrics:
    """A process's store operation counters, kept in memory and added to the store in batches."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))

    def incr(self, source_identifier: str, name: str, amount: int = 1) -> None:
        if amount:
            with self._lock:
                self._pending[source_identifier][name] += amount

    def pending(self) -> dict[str, dict[str, int]]:
        with self._lock:
            return {sid: dict(m) for sid, m in self._pending.items()}

    def drain(self) -> dict[str, dict[str, int]]:
        with self._lock:
            out = {sid: dict(m) for sid, m in self._pending.items() if m}
            self._pending.clear()
            return out

    def restore(self, deltas: dict[str, dict[str, int]]) -> None:
        """Put back deltas whose flush failed, so a store outage loses no counts."""
        for sid, metrics in deltas.items():
            for name, amount in metrics.items():
                self.incr(sid, name, amount)


class _Flushes(Protocol):
    def flush_metrics(self) -> None: ...


def flush_or_keep(store: _Flushes) -> bool:
    """Flush `store`'s metrics where work already succeeded: a store that can't take them is
    logged, not raised — `flush_metrics` keeps the counts for the next flush (at the latest
    when the store is closed), and counters must not fail the work they count."""
    try:
        store.flush_metrics()
    except LeaseStoreError as exc:
        log.warning("coordination metrics not flushed, kept for the next flush: %s", exc)
        return False
    return True
