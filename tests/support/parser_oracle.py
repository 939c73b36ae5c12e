"""Today's Spark read as the oracle of `record_parser`: objects read by a real `SourceReader`,
their table rows and quarantine read back from the staged Parquet files."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion.source_reader import SourceReader
from resources.schema.columns import ColumnSpec
from resources.schema.modes import RESCUE, RESCUED
from resources.streams import StreamConfig


def stream(
    columns: dict[str, str],
    *,
    fmt: str = "jsonl",
    event_time: str = "event_time",
    record_id: str | None = None,
    timezone: str = "UTC",
    mode: str = "ignore",
) -> StreamConfig:
    """A stream of `columns` (rescue: `_rescued` appended, as the store records it)."""
    specs = [ColumnSpec(n, t) for n, t in columns.items()]
    if mode == RESCUE:
        specs.append(ColumnSpec(RESCUED, "string"))
    return StreamConfig(
        name="s",
        source="file:///src",
        format=fmt,
        columns=tuple(specs),
        event_time=event_time,
        table="file:///lake/s",
        quarantine="file:///lake/s_quarantine",
        timezone=timezone,
        record_id=record_id,
        schema_evolution=mode,
    )


@dataclass
class SparkRead:
    """One object as today's reader read it."""

    rows: pa.Table | None
    """Its table rows (the config's columns plus `dt`), sorted by every column: the staged
    files are cut by date, so the object's order across dates is not kept."""
    bad: list[tuple[int | None, str, str | None]]
    """(line, reason, raw) of its quarantined records, in the object's order."""
    failed: str | None
    unknown: dict[str, int]
    """Fields outside the schema left out, by name: records holding each."""


def spark_reads(
    spark: Any,
    config: StreamConfig,
    objects: dict[str, bytes],
    work: Path,
    offsets: dict[str, int] | None = None,
) -> dict[str, SparkRead]:
    """Each of `objects` (key -> bytes, written as a file named by its key) read by one
    `SourceReader.read` of them all (`offsets`: a chunk's line shift, as the runner gives)."""
    src = work / "src"
    src.mkdir(parents=True)
    files = {}
    for key, data in objects.items():
        path = src / key
        path.write_bytes(data)
        files[key] = path
    results = SourceReader(spark, config).read(files, work / "stage", "t", line_offsets=offsets)
    reads = {}
    for key in objects:
        result = results[key]
        tables = []
        for staged in result.table_files:
            table = plain_strings(pq.read_table(staged.local_path))
            day = date.fromisoformat(staged.dt)
            tables.append(table.append_column("dt", pa.array([day] * len(table), pa.date32())))
        rows = sorted_rows(pa.concat_tables(tables)) if tables else None
        bad = []
        for staged in result.quarantine_files:
            for r in pq.read_table(staged.local_path).to_pylist():
                bad.append((r["line"], r["reason"], r["raw"]))
        reads[key] = SparkRead(rows, bad, result.failed.get(key), dict(result.unknown_fields))
    return reads


def sorted_rows(table: pa.Table) -> pa.Table:
    """`table` sorted by every column (nulls first), so two reads compare as sets of rows."""
    return table.sort_by([(n, "ascending") for n in table.column_names], null_placement="at_start")


def plain_strings(table: pa.Table) -> pa.Table:
    """`table` with dictionary-encoded columns decoded (Parquet keeps the encoding)."""
    return pa.table(
        {
            name: column.cast(column.type.value_type)
            if pa.types.is_dictionary(column.type)
            else column
            for name, column in zip(table.column_names, table.columns, strict=True)
        }
    )
