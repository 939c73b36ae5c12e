"""Writing one small table object: a part's rows of one date, as a Spark task writes them
(`split_task`), with the stream's dictionary-encoded columns and its schema version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.schema.parquet_meta import version_metadata
from resources.streams import StreamConfig


def dictionary_columns(config: StreamConfig) -> list[str]:
    """The columns a table object dictionary-encodes. Dictionary pages pay off for repeated
    strings; a record id never repeats, and numbers and times rarely do in an event stream:
    hashing them costs CPU and makes the object bigger (BENCHMARKS.md, "Writing one table
    object")."""
    return [c.name for c in config.columns if c.type == "string" and c.name != config.record_id]


def write_table_object(
    rows: pa.Table,
    target: Path,
    columns: list[str],
    dictionary: list[str],
    schema_version: int = 1,
) -> int:
    """One small table object at `target`: the stream's `columns` of one part's rows for
    one date, dictionary-encoding only the `dictionary` columns, its schema version in its
    metadata. Returns its size in bytes."""
    table = rows.select(columns)
    table = table.replace_schema_metadata(version_metadata(schema_version))
    pq.write_table(table, target, use_dictionary=dictionary or False)
    return target.stat().st_size
