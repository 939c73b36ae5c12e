"""What ingesting one work unit came to (`PartitionOutcome`), as the runner reports it to its
caller (the Dagster asset, `leasehold run`, the discovery sensor)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from resources.coordination.items import LeaseItem
from resources.ingestion.unit_progress import QUARANTINE_SUFFIX, TABLE_PARTITIONS

COMMITTED = "committed"
ALREADY_COMPLETE = "already_complete"
UNKNOWN_PARTITION = "unknown_partition"
"""No lease item for the key: not created by discovery (added by hand), or expired."""
LOST_LEASE = "lost_lease"
UNREADABLE = "unreadable"
FAILED = "failed"


@dataclass
class PartitionOutcome:
    """What ingesting one source partition came to: its outcome, counts and reasons."""

    source_key: str
    outcome: str
    epoch: int | None = None
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    small_objects: int = 0
    bytes: int = 0
    table_partitions: list[str] = field(default_factory=list)
    message: str = ""
    schema_version: int = 0
    """The stream's schema version this attempt's table objects were written with (0: none
    written)."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this attempt added to the stream's schema."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields left out of the table (`schema_evolution: ignore`), records holding each."""

    @property
    def ok(self) -> bool:
        return self.outcome in (COMMITTED, ALREADY_COMPLETE)

    def metadata(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "already_complete": self.outcome == ALREADY_COMPLETE,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "small_objects": self.small_objects,
            "bytes": self.bytes,
            "table_partitions": ", ".join(self.table_partitions),
            "lease_epoch": self.epoch if self.epoch is not None else -1,
            "message": self.message,
            "schema_version": self.schema_version,
            "new_columns": ", ".join(self.new_columns),
            "unknown_fields": ", ".join(f"{k}: {n}" for k, n in sorted(self.unknown_fields.items()))
            or "none",
        }


def committed_outcome(item: LeaseItem, outcome: str, message: str) -> PartitionOutcome:
    """A COMPLETED item's outcome as its commit saved it (the counts are the commit's
    progress state), for a partition whose commit Dagster has to be told about again. Objects,
    bytes and dates are 0 / empty for a unit committed before its progress kept them."""
    progress = item.progress or {}
    where = [p.rsplit("|", 1) for p in progress.get(TABLE_PARTITIONS, [])]
    quarantine = {t for t, _ in where if t.endswith(QUARANTINE_SUFFIX)}
    return PartitionOutcome(
        item.partition_key,
        outcome,
        item.epoch,
        rows_read=int(progress.get("rows_read", 0)),
        rows_written=int(progress.get("rows_written", 0)),
        rows_quarantined=int(progress.get("rows_quarantined", 0)),
        small_objects=int(progress.get("small_objects", 0)),
        bytes=int(progress.get("bytes", 0)),
        table_partitions=sorted({dt for t, dt in where if t not in quarantine}),
        message=message,
    )
