"""Writing one small table object: a part's rows of one date, as a Spark task writes them
(`split_task`), with the stream's dictionary-encoded columns and its schema version."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.schema.parquet_meta import version_metadata


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
