"""Lease health: is anything stuck, waiting with no run coming, or dead-lettered?

What the `lease_health` asset checks report; runnable without Dagster (and in CI).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resources.coordination.items import PartitionStatus, priority_at, to_millis
from resources.coordination.lease_store import LeaseStore


@dataclass
class LeaseHealthReport:
    stuck: list[str] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)
    dead_letters: list[str] = field(default_factory=list)

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


def lease_health_report(
    store: LeaseStore,
    stream: str | None,
    ownership_timeout_s: float,
    unassigned_retry_after_s: float,
) -> LeaseHealthReport:
    """Stuck: ASSIGNED and expired for more than twice the ownership timeout (nobody is picking
    it up). Waiting: UNASSIGNED for longer than the discovery sensor waits before it asks for
    a run again — no run took it in that time. Dead letters: partitions that will never be
    ingested without a human."""
    now = store.now_ms()
    stuck_before = now - to_millis(2 * ownership_timeout_s)
    waiting_before = priority_at(now - to_millis(unassigned_retry_after_s))
    report = LeaseHealthReport()
    items = store.iter_items(None if stream is None else store.source_identifier(stream))
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
    return report
