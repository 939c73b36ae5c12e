"""`leasehold table history` and `table read --as-of`: an Iceberg table's retained snapshots,
and a date read as one of them served it (docs/concepts/table-formats.md). A `manifests` table
keeps no history: these say so and exit 1.
"""

from __future__ import annotations

import argparse
import datetime
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING

from resources.catalog.target import PublicationTarget, TableSnapshot
from resources.errors import LeaseholdError

if TYPE_CHECKING:
    from resources.catalog.iceberg.target import IcebergTarget

LEASEHOLD_SUMMARY = "leasehold.publications"
"""The summary key the publisher writes: `dt:seq,...` of the publications a snapshot holds."""


def iceberg_target(target: PublicationTarget) -> IcebergTarget:
    """`target` as the Iceberg target it must be. Raises `LeaseholdError` for a `manifests`
    table (Hive partitions keep no snapshots)."""
    from resources.catalog.iceberg.target import IcebergTarget  # pyiceberg: only when needed

    if not isinstance(target, IcebergTarget):
        raise LeaseholdError(
            f"a {target.table_format!r} table keeps no snapshot history: time travel needs "
            "`table_format: iceberg` (docs/concepts/table-formats.md)"
        )
    return target


def as_of_arg(value: str) -> int | datetime.datetime:
    """argparse type of `--as-of`: a snapshot id (digits, as `table history` prints them) or
    an ISO 8601 moment (`2026-01-02T10:00:00Z`; without an offset, UTC)."""
    if value.isdigit():
        return int(value)
    try:
        moment = datetime.datetime.fromisoformat(value)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither a snapshot id nor an ISO 8601 time (2026-01-02T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo else moment.replace(tzinfo=datetime.timezone.utc)


def snapshot_for(
    target: IcebergTarget, table: str, as_of: int | datetime.datetime
) -> TableSnapshot:
    """The retained snapshot `as_of` names (an id) or the one current at that moment. Raises
    `LeaseholdError` naming what the table retains when there is none."""
    retained = target.snapshots(table)
    if isinstance(as_of, int):
        found = next((s for s in retained if s.snapshot_id == as_of), None)
    else:
        found = target.snapshot_as_of(table, int(as_of.timestamp() * 1000))
    if found is None:
        span = (
            f"it retains {len(retained)} snapshots, {_when(retained[0])} to {_when(retained[-1])}"
            if retained
            else "it has no snapshot yet"
        )
        raise LeaseholdError(f"table {table} has no snapshot as of {as_of} ({span})")
    return found


def _when(snapshot: TableSnapshot) -> str:
    moment = datetime.datetime.fromtimestamp(snapshot.committed_at_ms / 1000, datetime.timezone.utc)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


def history_json(snapshot: TableSnapshot) -> dict[str, object]:
    return {
        "snapshot_id": snapshot.snapshot_id,
        "committed_at": _when(snapshot),
        "operation": snapshot.operation,
        "dates": dict(snapshot.seqs),
        "added_files": int(snapshot.summary.get("added-data-files", 0)),
        "deleted_files": int(snapshot.summary.get("deleted-data-files", 0)),
        "total_records": int(snapshot.summary.get("total-records", 0)),
    }


def history_text(table: str, snapshots: Sequence[TableSnapshot], where: str) -> str:
    """One line per retained snapshot, oldest first: id, time, operation, files added and
    removed, rows in the table, the dates it switched with their publication seq."""
    if not snapshots:
        return f"table {table}: no snapshot yet ({where})"
    lines = [f"table {table}: {len(snapshots)} snapshots retained, oldest first ({where})"]
    for s in snapshots:
        d = history_json(s)
        dates = ", ".join(f"{dt} seq {seq}" for dt, seq in sorted(s.seqs.items())) or "-"
        lines.append(
            f"  {s.snapshot_id:>20}  {d['committed_at']}  {s.operation:<9}  "
            f"+{d['added_files']} -{d['deleted_files']} files  {d['total_records']:,} rows  "
            f"{dates}"
        )
    return "\n".join(lines)


def print_history(target: PublicationTarget, table: str, where: str, as_json: bool) -> int:
    snapshots = iceberg_target(target).snapshots(table)
    if as_json:
        print(json.dumps([history_json(s) for s in snapshots], indent=2))
    else:
        print(history_text(table, snapshots, where))
    return 0
