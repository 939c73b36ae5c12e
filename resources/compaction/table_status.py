"""What `leasehold status` shows of a table's partitions: open or closed, merged, what is due,
and which version readers are served (the ledger's current publication: `seq`, live or switched
to merged objects, the ids it covers up to).

Pure rendering over ledger reads: one query of the table's partition rows, nothing per date.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resources.coordination.items import iso_utc
from resources.ledger.model import TablePartition
from resources.ledger.publication import publication_due

SHOWN = 20
"""Partitions listed one per line (those with something unmerged or unpublished first, newest
date first)."""


def table_status_json(table: str, partitions: Sequence[TablePartition]) -> dict[str, Any]:
    return {
        "table": table,
        "partitions": len(partitions),
        "closed": sum(p.closed for p in partitions),
        "smallObjects": sum(p.next_object_id - 1 for p in partitions),
        "unmerged": sum(p.unmerged for p in partitions),
        "pendingMergeJobs": sum(p.merge_due_at_ms is not None for p in partitions),
        "published": sum(p.publication_seq > 0 for p in partitions),
        "switched": sum(p.switched for p in partitions),
        "byDate": [
            {
                "dt": p.dt,
                "smallObjects": p.next_object_id - 1,
                "mergedUpper": p.merged_upper,
                "unmerged": p.unmerged,
                "lastLiveObjectId": p.last_live_object_id,
                "desiredManifestVersion": p.desired_manifest_version,
                "mergeDueAt": iso_utc(p.merge_due_at_ms) if p.merge_due_at_ms else None,
                "publication": _publication_json(p),
                "publicationDue": publication_due(p),
            }
            for p in partitions
        ],
    }


def _publication_json(p: TablePartition) -> dict[str, Any] | None:
    """The partition's current publication, None if it was never published."""
    if p.publication_seq == 0:
        return None
    return {
        "seq": p.publication_seq,
        "switched": p.switched,
        "upper": p.published_upper,
        "currentManifestVersion": p.current_manifest_version,
    }


def _publication_text(p: TablePartition) -> str:
    due = publication_due(p)
    then = f", publication as {due} due" if due else ""
    if p.publication_seq == 0:
        return f"not published{then}"
    kind = "merged" if p.switched else "live"
    return f"published seq {p.publication_seq} ({kind} up to {p.published_upper}){then}"


def table_status_text(table: str, partitions: Sequence[TablePartition]) -> str:
    if not partitions:
        return f"table {table}: no table partitions yet"
    summary = table_status_json(table, partitions)
    lines = [
        f"table {table}: {summary['partitions']} table partitions ({summary['closed']} closed), "
        f"{summary['smallObjects']} small objects, {summary['unmerged']} not merged yet, "
        f"{summary['pendingMergeJobs']} merge jobs pending, {summary['published']} published "
        f"({summary['switched']} switched to merged objects)"
    ]
    newest_first = sorted(partitions, key=lambda p: p.dt, reverse=True)
    shown = sorted(newest_first, key=lambda p: p.unmerged == 0 and publication_due(p) is None)[
        :SHOWN
    ]
    for p in shown:
        state = "closed" if p.closed else "open"
        due = f", merge due {iso_utc(p.merge_due_at_ms)}" if p.merge_due_at_ms else ""
        delayed = (
            f", {p.next_object_id - 1 - p.last_live_object_id} delayed"
            if p.last_live_object_id is not None and p.next_object_id - 1 > p.last_live_object_id
            else ""
        )
        lines.append(
            f"  dt={p.dt} {state}: {p.next_object_id - 1} small objects{delayed}, merged up to "
            f"{p.merged_upper} ({p.unmerged} not merged){due}; {_publication_text(p)}"
        )
    if len(partitions) > SHOWN:
        lines.append(f"  ... and {len(partitions) - SHOWN} more")
    return "\n".join(lines)
