"""What `leasehold status` and the coordination-status asset show, and how it is rendered.

Pure: summaries are built by `LeaseStore.status()`; rendering needs no store and no Dagster.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from resources.coordination.items import LeaseItem, PartitionStatus, iso_utc

CLOSED_SHOWN = 20
"""CLOSED partitions listed one per line, soonest reopen first; the rest are only counted."""


@dataclass(frozen=True)
class StatusSummary:
    """What `leasehold status` prints for one source identifier."""

    source_identifier: str
    counts: dict[str, int]
    oldest_expired: LeaseItem | None
    dead_letters: list[LeaseItem]
    metrics: dict[str, int]
    closed: list[LeaseItem] = field(default_factory=list)
    """The first `CLOSED_SHOWN` CLOSED items by `reOpenAt`: when the backoff lets each be
    retried, and how often it failed (`closedCount`) — what an operator asks of a stuck one."""
    closed_due: int = 0
    """CLOSED items whose `reOpenAt` passed: waiting only for the sensor's retry run."""


def _failed_reads(item: LeaseItem) -> str | None:
    """Why a CLOSED unit's last read failed, object by object (the ingestion runner keeps it in
    the unit's progress; the item format has no field for it)."""
    progress = item.progress if isinstance(item.progress, dict) else {}
    return progress.get("failed") or None


def _item_json(item: LeaseItem | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {
        "sourcePartitionKey": item.partition_key,
        "partitionOwner": item.owner,
        "partitionOwnershipTimeout": iso_utc(item.ownership_timeout_ms),
        "sourcePartitionStatus": item.status.value,
        "closedCount": item.closed_count,
        "reOpenAt": iso_utc(item.reopen_at_ms),
        "epoch": item.epoch,
        "deadLetterReason": item.dead_letter_reason,
        "failedReads": _failed_reads(item),
    }


def status_json(summaries: Sequence[StatusSummary]) -> list[dict[str, Any]]:
    return [
        {
            "sourceIdentifier": s.source_identifier,
            "counts": s.counts,
            "oldestExpiredLease": _item_json(s.oldest_expired),
            "closed": {
                "count": s.counts.get("CLOSED", 0),
                "due": s.closed_due,
                "soonest": [_item_json(c) for c in s.closed],
            },
            "deadLetters": [_item_json(d) for d in s.dead_letters],
            "metrics": s.metrics,
        }
        for s in summaries
    ]


def status_text(summaries: Sequence[StatusSummary]) -> str:
    if not summaries:
        return "no source identifiers in the store yet"
    statuses = ["UNASSIGNED", "ASSIGNED", "CLOSED", "COMPLETED", "DEAD_LETTERED"]
    width = max(len("sourceIdentifier"), *(len(s.source_identifier) for s in summaries))
    lines = [
        f"{'sourceIdentifier':<{width}}  " + "  ".join(f"{h:>13}" for h in statuses),
    ]
    for s in summaries:
        counts = "  ".join(f"{s.counts.get(h, 0):>13}" for h in statuses)
        lines.append(f"{s.source_identifier:<{width}}  {counts}")
    for s in summaries:
        if s.oldest_expired is not None:
            o = s.oldest_expired
            lines.append(
                f"\n{s.source_identifier}: oldest expired lease {o.partition_key!r} held by "
                f"{o.owner} since expiry at {iso_utc(o.ownership_timeout_ms)}"
            )
        closed = s.counts.get("CLOSED", 0)
        if closed:
            lines.append(
                f"{s.source_identifier}: {closed} CLOSED ({s.closed_due} due for a retry run), "
                "soonest reopen first:"
            )
        for c in s.closed:
            failed = _failed_reads(c)
            why = f": {failed}" if failed else ""
            lines.append(
                f"{s.source_identifier}: CLOSED {c.partition_key!r} after {c.closed_count} "
                f"failed reads, reopens at {iso_utc(c.reopen_at_ms)}{why}"
            )
        if closed > len(s.closed):
            lines.append(f"{s.source_identifier}: ... and {closed - len(s.closed)} more CLOSED")
        for d in s.dead_letters:
            lines.append(
                f"{s.source_identifier}: dead-lettered {d.partition_key!r} after "
                f"{d.closed_count} closes: {d.dead_letter_reason}"
            )
        if s.metrics:
            rendered = ", ".join(f"{k}={v}" for k, v in s.metrics.items())
            lines.append(f"{s.source_identifier}: metrics {rendered}")
    return "\n".join(lines)


def summarize(
    sid: str,
    items: Iterable[LeaseItem],
    now: int,
    metrics: dict[str, int],
    with_progress: Callable[[list[LeaseItem]], list[LeaseItem]],
) -> StatusSummary:
    """One source identifier's summary from its items (read without their progress): counts
    per status, the oldest expired lease, and the dead-lettered and CLOSED items shown one by
    one, read again with their progress by `with_progress`."""
    counts = {s.value: 0 for s in PartitionStatus}
    oldest: LeaseItem | None = None
    dead: list[LeaseItem] = []
    closed: list[LeaseItem] = []
    for item in items:
        counts[item.status.value] += 1
        if item.dead_letter_reason is not None:
            dead.append(item)
        if item.status is PartitionStatus.CLOSED:
            closed.append(item)
        if (
            item.status is PartitionStatus.ASSIGNED
            and item.ownership_timeout_ms is not None
            and item.ownership_timeout_ms < now
            # `oldest` is only ever an item whose ownership_timeout_ms is not None
            and (oldest is None or item.ownership_timeout_ms < oldest.ownership_timeout_ms)  # type: ignore[operator]
        ):
            oldest = item
    counts["DEAD_LETTERED"] = len(dead)
    shown = heapq.nsmallest(CLOSED_SHOWN, closed, key=_reopen_order)
    return StatusSummary(
        sid,
        counts,
        oldest,
        with_progress(dead),
        metrics,
        closed=with_progress(shown),
        closed_due=sum(1 for c in closed if c.is_available(now)),
    )


def _reopen_order(item: LeaseItem) -> tuple[int, str]:
    return (item.reopen_at_ms or 0, item.partition_key)


class StoreStatus:
    """The status half of `LeaseStore`, which provides the reads it summarizes."""

    if TYPE_CHECKING:  # provided by LeaseStore (resources/coordination/lease_store.py)

        def now_ms(self) -> int: ...
        def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None: ...
        def read_metrics(self) -> dict[str, dict[str, int]]: ...
        def source_identifiers(self) -> list[str]: ...
        def iter_items(
            self, source_identifier: str | None = None, *, progress: bool = True
        ) -> Iterator[LeaseItem]: ...

    def _with_progress(self, items: list[LeaseItem]) -> list[LeaseItem]:
        """The items status shows one by one, read again with their progress (which objects
        of a unit failed, and why): a few, where counting read every item without it."""
        fresh = [self.get(i.source_identifier, i.partition_key) for i in items]
        return [f if f is not None else i for f, i in zip(fresh, items, strict=True)]

    def status(self) -> list[StatusSummary]:
        """One summary per source identifier (and per one that only has metrics): counts per
        status, the oldest expired lease, dead letters and the closed items due first, and
        the persisted metrics. Counts read every item without its progress (O(units) small
        reads); only the items shown one by one are read whole. Read-only. Raises the store
        errors."""
        now = self.now_ms()
        metrics = self.read_metrics()
        sids = sorted(set(self.source_identifiers()) | set(metrics))
        return [
            summarize(
                sid,
                self.iter_items(sid, progress=False),
                now,
                dict(sorted(metrics.get(sid, {}).items())),
                self._with_progress,
            )
            for sid in sids
        ]
