"""What `leasehold status` and the coordination-status asset show, and how it is rendered.

Pure: summaries are built by `LeaseStore.status()`; rendering needs no store and no Dagster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from resources.coordination.items import LeaseItem


@dataclass(frozen=True)
class StatusSummary:
    """What `leasehold status` prints for one source identifier."""

    source_identifier: str
    counts: dict[str, int]
    oldest_expired: LeaseItem | None
    dead_letters: list[LeaseItem]
    metrics: dict[str, int]


def _when(millis: int | None) -> str:
    if millis is None:
        return "-"
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _item_json(item: LeaseItem | None) -> dict[str, Any] | None:
    if item is None:
        return None
    return {
        "sourcePartitionKey": item.partition_key,
        "partitionOwner": item.owner,
        "partitionOwnershipTimeout": _when(item.ownership_timeout_ms),
        "sourcePartitionStatus": item.status.value,
        "closedCount": item.closed_count,
        "epoch": item.epoch,
        "deadLetterReason": item.dead_letter_reason,
    }


def status_json(summaries: Sequence[StatusSummary]) -> list[dict[str, Any]]:
    return [
        {
            "sourceIdentifier": s.source_identifier,
            "counts": s.counts,
            "oldestExpiredLease": _item_json(s.oldest_expired),
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
                f"{o.owner} since expiry at {_when(o.ownership_timeout_ms)}"
            )
        for d in s.dead_letters:
            lines.append(
                f"{s.source_identifier}: dead-lettered {d.partition_key!r} after "
                f"{d.closed_count} closes: {d.dead_letter_reason}"
            )
        if s.metrics:
            rendered = ", ".join(f"{k}={v}" for k, v in s.metrics.items())
            lines.append(f"{s.source_identifier}: metrics {rendered}")
    return "\n".join(lines)
