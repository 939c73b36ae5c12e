"""A schema version's columns as Arrow, and table objects read by column name against them.

Objects of one table partition hold the columns of the version they were written with: an
older one lacks the columns added since. Whatever reads several of them together (the merge,
the checks, a rollup's partials) reads each by name against one list of columns — the latest
version's, or the few it needs — with a column an object lacks as nulls of the column's type,
never by position and never by the first object's schema (`conform`, `read_by_name`).

The Arrow types are the ones Spark's `toArrow` gives for the `streams.yaml` type names, so a
small object written by the reader and a table conformed here have the same schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.errors import LeaseholdError
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import version_metadata

ARROW_TYPES: dict[str, pa.DataType] = {
    "string": pa.string(),
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "boolean": pa.bool_(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "date": pa.date32(),
}
"""streams.yaml column types -> the Arrow type of their values in table objects."""


class RetypedColumnError(LeaseholdError, ValueError):
    """An object holds a column with another type than the schema gives it (never cast)."""


def arrow_type(type_name: str) -> pa.DataType:
    """The Arrow type of a `streams.yaml` column type. Raises `KeyError` for an unknown one."""
    return ARROW_TYPES[type_name]


def arrow_schema(columns: Sequence[ColumnSpec], version: int | None = None) -> pa.Schema:
    """`columns` as an Arrow schema (every field nullable), in their order; with `version`,
    carrying it as key-value metadata (`parquet_meta.version_metadata`)."""
    schema = pa.schema([pa.field(c.name, arrow_type(c.type)) for c in columns])
    return schema if version is None else schema.with_metadata(version_metadata(version))


def _strings(t: pa.DataType) -> bool:
    return bool(pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t))


def same_type(held: pa.DataType, wanted: pa.DataType) -> bool:
    """Whether values of `held` are values of `wanted` as they are: the same type, or both
    text (string, large string, string view: one Parquet type), or a dictionary of it."""
    if pa.types.is_dictionary(held):
        held = held.value_type
    return held == wanted or (_strings(held) and _strings(wanted))


def retyped(schema: pa.Schema, columns: Sequence[ColumnSpec]) -> list[str]:
    """The names of `columns` that `schema` holds with another type (`same_type`); a column
    it lacks is not retyped (it reads as nulls)."""
    held = {f.name: f.type for f in schema}
    return [
        c.name
        for c in columns
        if c.name in held and not same_type(held[c.name], arrow_type(c.type))
    ]


def conform(table: pa.Table, columns: Sequence[ColumnSpec]) -> pa.Table:
    """`table` as `columns` say, by name: their order and types, a column `table` lacks all
    null, the columns it holds that `columns` do not name left out. Never casts a value:
    raises `RetypedColumnError` when `table` holds one of `columns` with another type (a text
    column as another text type is the same type)."""
    target = arrow_schema(columns)
    bad = retyped(table.schema, columns)
    if bad:
        held = {f.name: f.type for f in table.schema}
        raise RetypedColumnError(
            "held with another type than the schema's: "
            + ", ".join(f"{n} ({held[n]}, not {target.field(n).type})" for n in bad)
        )
    names = set(table.column_names)
    arrays = []
    for field in target:
        if field.name in names:
            column = table.column(field.name)
            arrays.append(column if column.type == field.type else column.cast(field.type))
        else:
            arrays.append(pa.nulls(table.num_rows, field.type))
    return pa.Table.from_arrays(arrays, schema=target)


def read_by_name(source: Any, columns: Sequence[ColumnSpec]) -> pa.Table:
    """A Parquet object's rows as `columns` (`conform`), reading only the ones it holds.
    `source`: a local path or a file-like object (`pq.ParquetFile` takes both).
    Raises `RetypedColumnError` as `conform` does, `OSError`/`pa.ArrowInvalid` when it
    cannot be read."""
    with pq.ParquetFile(source) as file:
        held = set(file.schema_arrow.names)
        table = file.read(columns=[c.name for c in columns if c.name in held])
    return conform(table, columns)
