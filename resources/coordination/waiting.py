"""The units of a stream that wait — not COMPLETED, not taken by this run — and when each kind
is retried: what `leasehold run` says instead of "nothing new" when it ingested nothing.

Read through the status index (`LeaseStore.pending_partitions`), never item by item: an idle
run pays for the units that wait, not for the history of those done.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from resources.coordination.items import PartitionStatus, iso_utc
from resources.coordination.lease_store import LeaseStore

WAITING_READ = 1000
"""Units not COMPLETED read at most; beyond it the counts say "at least"."""


@dataclass(frozen=True)
class WaitingUnits:
    """Per status, the units that wait and the earliest time one of them is free again."""

    now_ms: int
    closed: int = 0
    """CLOSED after a failed read, until their `reOpenAt` (the backoff)."""
    reopens_ms: int | None = None
    held: int = 0
    """ASSIGNED to an owner (another run, or a killed run's until its lease expires)."""
    held_until_ms: int | None = None
    unassigned: int = 0
    """UNASSIGNED and taken by no run of this invocation (not one of its Dagster partitions
    yet, or covered by a run queued elsewhere)."""
    capped: bool = False
    """`WAITING_READ` units were read: there may be more."""

    @property
    def count(self) -> int:
        return self.closed + self.held + self.unassigned

    def describe(self) -> str:
        """`1 unit CLOSED after a failed read reopens at <time> (in 4 min); ...; leasehold
        status lists them`: what waits, per status, and the earliest time one is free."""
        parts = []
        if self.closed:
            what = _units(self.closed, "CLOSED after a failed read", "CLOSED after failed reads")
            parts.append(f"{what} reopens at {self._when(self.reopens_ms)}")
        if self.held:
            what = _units(
                self.held, "held by another owner's lease", "held by other owners' leases"
            )
            parts.append(f"{what} until {self._when(self.held_until_ms)}")
        if self.unassigned:
            noun = "unit" if self.unassigned == 1 else "units"
            parts.append(f"{self.unassigned:,} {noun} UNASSIGNED that no run took yet")
        more = f" (the first {WAITING_READ:,} read)" if self.capped else ""
        return "; ".join(parts) + f"{more}; leasehold status lists them"

    def _when(self, millis: int | None) -> str:
        if millis is None:
            return "-"
        return f"{iso_utc(millis)} ({_from_now(millis - self.now_ms)})"


def _units(n: int, one: str, many: str) -> str:
    """`1 unit <one>`, or `3 units <many>, the first`: what the time after it is of."""
    return f"1 unit {one}" if n == 1 else f"{n:,} units {many}, the first"


def _from_now(delta_ms: int) -> str:
    """`in 40 s`, `in 4 min`, `in 3 h`, `in 2 days`; `passed` for a time gone by."""
    seconds = delta_ms / 1000
    if seconds <= 0:
        return "passed"
    for unit, size, up_to in (("s", 1, 90), ("min", 60, 90 * 60), ("h", 3600, 48 * 3600)):
        if seconds < up_to:
            return f"in {max(1, round(seconds / size))} {unit}"
    return f"in {round(seconds / 86400)} days"


def waiting_units(store: LeaseStore, stream: str, limit: int = WAITING_READ) -> WaitingUnits:
    """The stream's units that wait. One `pending_partitions` read: a range of the status
    index per status (UNASSIGNED, ASSIGNED, CLOSED), `limit` items at most — O(units that
    wait), on DynamoDB one to three GSI queries (eventually consistent: a unit that changed
    status a moment ago may show in its old one). Read-only. Raises the store errors."""
    items = store.pending_partitions(store.source_identifier(stream), limit)
    now = store.now_ms()
    closed = [i for i in items if i.status is PartitionStatus.CLOSED]
    held = [i for i in items if i.status is PartitionStatus.ASSIGNED]
    return WaitingUnits(
        now,
        closed=len(closed),
        reopens_ms=_earliest(i.reopen_at_ms for i in closed),
        held=len(held),
        held_until_ms=_earliest(i.ownership_timeout_ms for i in held),
        unassigned=sum(i.status is PartitionStatus.UNASSIGNED for i in items),
        capped=len(items) >= limit,
    )


def _earliest(times: Iterable[int | None]) -> int | None:
    found = [t for t in times if t is not None]
    return min(found) if found else None
