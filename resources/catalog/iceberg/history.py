"""An Iceberg table's history as leasehold reads it: its retained snapshots (with the dates
and seqs each switched, from its summary), the one current at a moment, and a date's files or
the table's rows at any retained snapshot (time travel, through pyiceberg's scan)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, EqualTo, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from resources.catalog.base import PARTITION_KEY, CatalogError
from resources.catalog.iceberg.files import partition_dt
from resources.catalog.iceberg.switching import seqs
from resources.catalog.target import PartitionFile, TableSnapshot


def table_snapshot(snapshot: Snapshot) -> TableSnapshot:
    summary = dict(snapshot.summary.additional_properties) if snapshot.summary else {}
    operation = snapshot.summary.operation.value if snapshot.summary else ""
    return TableSnapshot(
        snapshot.snapshot_id, snapshot.timestamp_ms, operation, seqs(summary), summary
    )


def snapshots(table: Table) -> list[TableSnapshot]:
    """Every retained snapshot, oldest first."""
    ordered = sorted(table.metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number))
    return [table_snapshot(s) for s in ordered]


def snapshot_as_of(table: Table, timestamp_ms: int) -> TableSnapshot | None:
    """The snapshot current at `timestamp_ms` (the snapshot log), None before the first."""
    found = table.snapshot_as_of_timestamp(timestamp_ms, inclusive=True)
    return None if found is None else table_snapshot(found)


def _snapshot_id(table: Table, snapshot_id: int | None) -> int | None:
    if snapshot_id is not None and table.metadata.snapshot_by_id(snapshot_id) is None:
        raise CatalogError(f"table {table.name()} holds no snapshot {snapshot_id}")
    return snapshot_id


def _dt_filter(dt: str | None) -> BooleanExpression:
    if dt is None:
        return AlwaysTrue()
    return EqualTo(term=Reference(PARTITION_KEY), value=literal(date.fromisoformat(dt).isoformat()))


def data_files(table: Table, dt: str, snapshot_id: int | None) -> list[PartitionFile]:
    """The files of date `dt` at the snapshot (default: current), by URL."""
    sid = _snapshot_id(table, snapshot_id)
    if sid is None and table.metadata.current_snapshot() is None:
        return []
    scan = table.scan(row_filter=_dt_filter(dt), snapshot_id=sid)
    files = [
        PartitionFile(t.file.file_path, t.file.file_size_in_bytes, t.file.record_count)
        for t in scan.plan_files()
    ]
    return sorted(files, key=lambda f: f.url)


def files_by_date(table: Table, snapshot_id: int | None) -> dict[str, list[PartitionFile]]:
    """dt -> the files of that date at the snapshot (default: current), by URL: one scan
    plan for every date."""
    sid = _snapshot_id(table, snapshot_id)
    if sid is None and table.metadata.current_snapshot() is None:
        return {}
    out: dict[str, list[PartitionFile]] = {}
    for t in table.scan(snapshot_id=sid).plan_files():
        dt = partition_dt(t.file.partition[0])
        out.setdefault(dt, []).append(
            PartitionFile(t.file.file_path, t.file.file_size_in_bytes, t.file.record_count)
        )
    return {dt: sorted(files, key=lambda f: f.url) for dt, files in sorted(out.items())}


def read(
    table: Table, dt: str | None, snapshot_id: int | None, columns: Sequence[str] | None
) -> pa.Table:
    """The rows (of `dt` when given) at the snapshot (default: current) with `columns`."""
    sid = _snapshot_id(table, snapshot_id)
    if not columns:
        return table.scan(row_filter=_dt_filter(dt), snapshot_id=sid).to_arrow()
    # pyiceberg 0.12 filters the rows it read by the filter's columns: `dt` must be read too.
    selected = tuple(dict.fromkeys([*columns, PARTITION_KEY]))
    scan = table.scan(row_filter=_dt_filter(dt), selected_fields=selected, snapshot_id=sid)
    return scan.to_arrow().select(list(columns))
