"""A work unit's progress as its commits keep it in the lease item (the fields a takeover,
`leasehold status` and the checks read), the quarantine's table name, the names of published
objects, and the cutting of a unit's objects into transactions."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from resources.ingestion.work_units import done_objects, unit_objects
from resources.ledger.model import SmallObject, fits_one_commit

QUARANTINE_SUFFIX = ".quarantine"


def quarantine_table(stream: str) -> str:
    return f"{stream}{QUARANTINE_SUFFIX}"


def object_name(attempt_id: str, source_key: str, n: int, suffix: str) -> str:
    """Unique per attempt, source and object: two attempts can never overwrite each other's
    objects, and one source may yield several objects for a date (one per Spark task)."""
    digest = hashlib.sha256(source_key.encode()).hexdigest()[:16]
    return f"{attempt_id}-{digest}-{n}{suffix}"


PARTIAL = "partial"
"""Progress field of a unit committing in several transactions: the objects being committed
and how many staged files of each table partition (`table|dt`) are in already."""
FAILED_READS = "failed"
"""Progress field of a CLOSED unit: which of its objects could not be read, and why."""
CHUNK = "chunk"
"""Progress field of a large object read in chunks: where the next chunk starts (`offset`,
`line`), committed with the chunk before it."""
TABLE_PARTITIONS = "table_partitions"
"""Progress field: the `table|dt` partitions (of the table and of its quarantine) a unit's
commits wrote to."""
QUARANTINE_PART = "*"
"""The quarantine's partition slot: its date is the commit's day, which a retry may not share."""


def to_read(progress: Any, key: str) -> list[str]:
    """The objects of a unit this attempt reads: those an interrupted multi-transaction commit
    was committing, the same set again (its committed partitions came from exactly those),
    else every object not done by an earlier attempt."""
    partial = progress.get(PARTIAL) if isinstance(progress, dict) else None
    if partial:
        return list(partial["objects"])
    done = done_objects(progress)
    return [o.key for o in unit_objects(key, progress) if o.key not in done]


def failures(failed: dict[str, str]) -> str:
    """Which objects of a unit were not ingested (unreadable, or refused by `schema_evolution:
    fail`), and why: what status shows."""
    shown = "; ".join(f"{key}: {why}" for key, why in list(failed.items())[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return f"{len(failed)} object(s) not ingested: {shown}{more}"


def add_counts(progress: dict[str, Any], objects: Sequence[SmallObject], table: str) -> None:
    """Add one transaction's rows to the unit's totals: the totals always equal what the
    ledger holds for the unit, whatever failed between transactions.

    Also where they are (`TABLE_PARTITIONS`), so a check can read the unit's rows back from
    those partitions alone, and the table's objects and bytes, so a commit recorded without
    its run (`committed_outcome`) says what the run would have. A unit that began committing
    before the list was kept never gets one (it would miss its first transactions): checks
    read such a unit's rows from the whole table."""
    if TABLE_PARTITIONS in progress or "rows_read" not in progress:
        where = {f"{o.table}|{o.dt}" for o in objects}
        progress[TABLE_PARTITIONS] = sorted(set(progress.get(TABLE_PARTITIONS, [])) | where)
    mine = [o for o in objects if o.table == table]
    written = sum(o.row_count for o in mine)
    quarantined = sum(o.row_count for o in objects if o.table != table)
    progress["rows_written"] = int(progress.get("rows_written", 0)) + written
    progress["rows_quarantined"] = int(progress.get("rows_quarantined", 0)) + quarantined
    progress["rows_read"] = progress["rows_written"] + progress["rows_quarantined"]
    progress["small_objects"] = int(progress.get("small_objects", 0)) + len(mine)
    progress["bytes"] = int(progress.get("bytes", 0)) + sum(o.content_length for o in mine)


def commit_batches(
    objects: Sequence[tuple[SmallObject, str]],
) -> list[list[tuple[SmallObject, str]]]:
    """Objects in transaction-sized batches (`fits_one_commit`), whole table partitions together
    where they fit, in order; at least one batch (a unit with nothing to write still commits)."""
    batches: list[list[tuple[SmallObject, str]]] = [[]]
    for obj in objects:
        if not fits_one_commit([o for o, _ in batches[-1]] + [obj[0]]):
            batches.append([])
        batches[-1].append(obj)
    return batches
