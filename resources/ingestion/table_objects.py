"""Cutting a read's Arrow rows into small table objects: one Parquet object per (source, date).

The rows come to the driver as Arrow, each object's rows together and in their order; they are
grouped by (source, date) here, with numpy and zero-copy slices, and each group is written with
pyarrow as one small object (bad rows, which have no date, are handed back for quarantine).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import date, timedelta
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.ingestion.batch_results import StagedFile
from resources.schema.parquet_meta import version_metadata
from resources.streams import StreamConfig

EPOCH = date(1970, 1, 1)


def dictionary_columns(config: StreamConfig) -> list[str]:
    """The columns a table object dictionary-encodes. Dictionary pages pay off for repeated
    strings; a record id never repeats, and numbers and times rarely do in an event stream:
    hashing them costs CPU and makes the object bigger (BENCHMARKS.md, "Writing one table
    object")."""
    return [c.name for c in config.columns if c.type == "string" and c.name != config.record_id]


def runs_by_source_and_date(
    tables: Iterator[pa.Table],
) -> Iterator[tuple[int, str | None, pa.Table]]:
    """(src, date or None for bad rows, rows) for each (src, dt) of each table, its rows in
    their order in the object. A table's rows are put in (src, dt) order first: a stable sort,
    nearly free where Spark already handed a source's rows over together (timsort finds runs),
    then one zero-copy slice per group. Tables are grouped on their own, so an object too big
    for one table may give several objects for a date."""
    for table in tables:
        if table.num_rows == 0:
            continue
        src = table.column("src").to_numpy().astype(np.int64)
        dated = pc.is_valid(table.column("dt")).to_numpy(zero_copy_only=False)
        days = pc.fill_null(table.column("dt").cast(pa.int32()), 0).to_numpy()
        # src < 10**INPUT_DIGITS < 2**24; bad rows (no date) first within a source
        key = (src << 33) | (dated.astype(np.int64) << 32) | (days.astype(np.int64) + 2**31)
        if (key[1:] < key[:-1]).any():
            order = np.argsort(key, kind="stable")
            key, table = key[order], table.take(pa.array(order))
        starts = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), len(key)]
        src, dated, days = key >> 33, (key >> 32) & 1, (key & 0xFFFFFFFF) - 2**31
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            dt = (EPOCH + timedelta(days=int(days[begin]))).isoformat() if dated[begin] else None
            yield int(src[begin]), dt, table.slice(begin, end - begin)


def write_table_object(
    rows: pa.Table,
    dt: str,
    target: Path,
    columns: list[str],
    dictionary: list[str],
    schema_version: int = 1,
) -> StagedFile:
    """One small table object at `target`: the stream's `columns` of one source's rows for
    `dt`, dictionary-encoding only the `dictionary` columns, its schema version in its
    metadata."""
    table = rows.select(columns)
    table = table.replace_schema_metadata(version_metadata(schema_version))
    pq.write_table(table, target, use_dictionary=dictionary or False)
    return StagedFile(dt, target, rows.num_rows, target.stat().st_size, schema_version)
