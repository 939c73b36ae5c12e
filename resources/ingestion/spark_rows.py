"""The rows of a Spark read of staged source objects (`source_rows`) and how the reader gets
them off Spark and counts them: reads grouped by size, staged input names, local Parquet for a
big object, the counts from the staged files. Moved out of `source_reader` as it was."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion.batch_results import SourceBatchResult
from resources.ingestion.read_plan import ReadPlan, json_schema
from resources.ingestion.source_files import INPUT_DIGITS
from resources.streams import StreamConfig


def source_rows(spark: Any, config: StreamConfig, plan: ReadPlan, inputs: Path | list[Path]) -> Any:
    """(src, dt, columns..., _reason, _raw) of every object under `inputs` (a directory, or a
    list of staged objects): a table row has its date (in the table's time zone) and no reason;
    a bad row has a reason, its text if known, and no date. Unsorted: `runs_by_source_and_date`
    groups them. Public so that `leasehold init` tries an inferred stream on its sample with
    exactly the runtime's reading. A CSV stream's rows also have `_line`, a bad row's line
    number in its object."""
    paths = [str(p) for p in inputs] if isinstance(inputs, list) else str(inputs)
    if plan.records is None:
        schema, options = json_schema(config)
        lines = spark.read.schema(schema).options(**options).json(paths)
    else:
        lines = spark.read.text(paths)
    lines = lines.select(*plan.lines)
    if plan.keep is not None:
        lines = lines.where(plan.keep)
    if plan.records is not None:
        lines = lines.select(*plan.records)
    rows = lines.select(*plan.parsed).select(*plan.checked).select(*plan.rows)
    if plan.final is not None:  # CSV
        rows = rows.withColumns(plan.final).drop(*plan.dropped)
    return rows


def through_parquet(rows: Any, directory: Path) -> Iterator[pa.Table]:
    """The rows by way of local Parquet (written now, by this thread's Spark job), then one
    Spark task's output at a time: memory stays bounded by what one task writes, however big an
    object is. Cast to the types `toArrow` gives (Spark writes timestamps as INT96, which
    pyarrow reads as naive nanoseconds), so objects are alike whichever way they came."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(rows.schema, timezone="UTC")
    rows.write.parquet(str(directory))
    parts = sorted(directory.glob("part-*.parquet"))
    return (pq.read_table(part).cast(schema) for part in parts)


def group_reads(sizes: dict[int, int], max_read_bytes: int) -> Iterator[list[int]]:
    """Consecutive objects, as many per read as fit in `max_read_bytes` (at least one)."""
    read: list[int] = []
    read_bytes = 0
    for i, size in sizes.items():
        if read and read_bytes + size > max_read_bytes:
            yield read
            read, read_bytes = [], 0
        read.append(i)
        read_bytes += size
    if read:
        yield read


def input_name(i: int, path: Path, csv: bool) -> str:
    """A staged input's name: its batch index (rows map back by it), `.gz` kept for Spark (a
    CSV object is staged as uncompressed JSON lines)."""
    gz = ".gz" if path.name.endswith(".gz") and not csv else ""
    return f"{i:0{INPUT_DIGITS}d}.txt{gz}"


def typed(config: StreamConfig) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in config.columns]


def counted(
    results: dict[str, SourceBatchResult], writes: list[Future[None]]
) -> dict[str, SourceBatchResult]:
    """Once every write is done (the first failure is raised): rows read = written +
    quarantined, from the staged files themselves."""
    for write in writes:
        write.result()
    for result in results.values():
        if result.failed and not result.table_files and not result.quarantine_files:
            reasons = list(result.failed.items())
            result.unreadable = (
                reasons[0][1]
                if len(reasons) == 1
                else "; ".join(f"{key}: {why}" for key, why in reasons)
            )
        if result.unreadable is None:
            result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
            written = sum(f.row_count for f in result.table_files)
            result.rows_read = written + result.rows_quarantined
    return results


def digest(group: str) -> str:
    """A file-name-safe stand-in for a unit's key (keys may hold any character)."""
    return hashlib.sha256(group.encode()).hexdigest()[:16]
