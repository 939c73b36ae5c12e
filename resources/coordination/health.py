"""Lease health: is anything stuck, waiting with no run coming, or dead-lettered?

What the `lease_health` asset checks report; runnable without Dagster (and in CI).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.coordination.items import (
    LeaseItem,
    PartitionStatus,
    priority_at,
    to_millis,
    whole_priority_groups,
)
from resources.coordination.lease_store import LeaseStore


@dataclass
class LeaseHealthReport:
    """What the lease health checks found: stuck leases, waiting work no run is coming for, dead
    letters."""

    stuck: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)
    dead_letter_keys: list[str] = field(default_factory=list)
    completed_upto: str | None = None
    """Every item completed up to this priority was read: where the next pass may start."""

    @property
    def healthy(self) -> bool:
        return not self.stuck and not self.waiting and not self.dead_letters

    def metadata(self) -> dict[str, Any]:
        found = self.stuck + self.waiting + self.dead_letters
        return {
            "stuck_leases": len(self.stuck),
            "waiting_unassigned": len(self.waiting),
            "dead_letters": len(self.dead_letters),
            "details": "\n".join(f"- {x}" for x in found) or "none",
        }


MAX_PENDING_READ = 1_000_000
"""Items not COMPLETED an incremental pass reads at most (they are what the report lists)."""

COMPLETED_PAGE = 1000
"""COMPLETED items read per status-index query when following completions."""

INDEX_LAG_MS = 60_000
"""How far behind now a reader following completions says it has read everything: DynamoDB's
status index is eventually consistent, so an item completed in the last moments may not be in
it yet. A pass reads up to now and remembers now minus this: the next pass reads the last
minute again (re-reading a few is harmless, missing one is not)."""


def completed_since(
    store: LeaseStore, source_identifier: str, after: str | None, before_ms: int
) -> Iterator[LeaseItem]:
    """COMPLETED items whose completion priority is after `after` and before `before_ms`, in
    that order, every one of them: paged by whole groups of equal priorities
    (`whole_priority_groups`)."""
    while True:
        read = store.completed_between(source_identifier, after, before_ms, COMPLETED_PAGE)
        page = whole_priority_groups(read, COMPLETED_PAGE)
        yield from page
        if len(read) < COMPLETED_PAGE:
            return
        after = page[-1].priority


def lease_health_report(
    store: LeaseStore,
    stream: str | None,
    ownership_timeout_s: float,
    unassigned_retry_after_s: float,
    completed_upto: str | None = None,
    dead_letters: Sequence[str] = (),
) -> LeaseHealthReport:
    """Stuck: ASSIGNED and expired for more than twice the ownership timeout (nobody is picking
    it up). Waiting: UNASSIGNED for longer than the discovery sensor waits before it asks for
    a run again — no run took it in that time. Dead letters: partitions that will never be
    ingested without a human.

    Given `completed_upto` (the completion priority up to which an earlier pass read every
    COMPLETED item) and the dead letters it found, only what can have changed is read: the
    items not COMPLETED, by status (O(pending)), the remembered dead letters again (one whose
    item is gone is no longer reported) and the items completed since — not one item per
    work unit of history. Without it every item is read. The report says how far it read."""
    now = store.now_ms()
    stuck_before = now - to_millis(2 * ownership_timeout_s)
    waiting_before = priority_at(now - to_millis(unassigned_retry_after_s))
    report = LeaseHealthReport(completed_upto=priority_at(now - INDEX_LAG_MS))
    sid = None if stream is None else store.source_identifier(stream)
    if completed_upto is None or sid is None:
        items: Iterable[LeaseItem] = store.iter_items(sid)
    else:
        known = set(dead_letters)
        remembered = (store.get(sid, key) for key in dead_letters)
        items = itertools.chain(
            store.pending_partitions(sid, MAX_PENDING_READ),
            (i for i in remembered if i is not None and i.status is PartitionStatus.COMPLETED),
            (
                i
                for i in completed_since(store, sid, completed_upto, now + 1)
                if i.partition_key not in known
            ),
        )
    for item in items:
        where = f"{item.source_identifier} / {item.partition_key}"
        if (
            item.status is PartitionStatus.ASSIGNED
            and item.ownership_timeout_ms is not None
            and item.ownership_timeout_ms < stuck_before
        ):
            report.stuck.append(f"{where} (held by {item.owner})")
        if item.status is PartitionStatus.UNASSIGNED and item.priority < waiting_before:
            report.waiting.append(f"{where} (UNASSIGNED, no run took it)")
        if item.dead_letter_reason is not None:
            report.dead_letters.append(f"{where}: {item.dead_letter_reason}")
            report.dead_letter_keys.append(item.partition_key)
    return report
