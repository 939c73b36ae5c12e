"""How the reader follows a stream's schema as it reads (`schema_evolution`): the columns of
fields found, the objects to read again, rows brought to a version's columns, what `fail` says.
Moved out of `source_reader` as it was."""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc

from resources.ingestion.field_scan import ObjectFields
from resources.ingestion.read_plan import wrong_type
from resources.schema.arrow import arrow_type
from resources.schema.columns import ColumnSpec
from resources.schema.field_types import widen
from resources.streams import StreamConfig


def refused_fields(config: StreamConfig, fields: ObjectFields) -> str:
    """What `fail` says of an object: the fields, where each was first seen, the setting."""
    named = ", ".join(
        f"{name} ({seen.type}, first at line {seen.first_line})"
        for name, seen in sorted(fields.fields.items(), key=lambda f: f[1].first_line)
    )
    return (
        f"fields not in the schema: {named}; `schema_evolution: fail` keeps the object out — "
        f"set schema_evolution to add (or rescue, ignore) for stream {config.name} in "
        "streams.yaml to take it in"
    )


def as_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` with `schema`'s columns, by name: a column they lack (one a newer version added)
    as nulls of its type."""
    return pa.Table.from_arrays(
        [
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(len(rows), f.type)
            for f in schema
        ],
        schema=schema,
    )


def with_columns(config: StreamConfig, columns: list[ColumnSpec]) -> StreamConfig:
    """`config` also reading `columns` (not recorded: its version number stays)."""
    return replace(config, columns=(*config.columns, *columns)) if columns else config


def columns_of(found: dict[int, ObjectFields], config: StreamConfig) -> list[ColumnSpec]:
    """The columns of the fields in `found`, each typed by its values in every object."""
    types: dict[str, str | None] = {}
    for fields in found.values():
        for name, seen in fields.fields.items():
            types[name] = widen(types.get(name), seen.type)
    return [ColumnSpec(n, t or "string") for n, t in types.items() if n not in config.column_names]


def non_numbers(table: pa.Table, reading: StreamConfig, config: StreamConfig) -> set[int]:
    """Objects with NaN or an infinity in a double column read but not recorded: Spark reads
    the strings "NaN" and "Infinity" into a double column, so such a value may have been text
    — only the object's scan can say which type the field asks for."""
    suspects: set[int] = set()
    for column in _guessed(reading, config):
        if column.type != "double":
            continue
        values = table.column(column.name)
        odd = pc.fill_null(pc.or_(pc.is_nan(values), pc.is_inf(values)), False)
        suspects.update(table.column("src").filter(odd).to_pylist())
    return suspects


def mistyped(table: pa.Table, reading: StreamConfig, config: StreamConfig) -> set[int]:
    """Objects with a line rejected for the type of a column read but not recorded: the type
    read was a guess from a first record, so only the object's scan can say which type the
    field asks for (the line's text alone would clear the object)."""
    guessed = _guessed(reading, config)
    if not guessed:
        return set()
    reasons = pa.array([wrong_type(c.name, c.type) for c in guessed])
    odd = pc.fill_null(pc.is_in(table.column("_reason"), reasons), False)
    return set(table.column("src").filter(odd).to_pylist())


def _guessed(reading: StreamConfig, config: StreamConfig) -> list[ColumnSpec]:
    """The columns `reading` reads that `config` (the recorded version) does not hold."""
    recorded = set(config.column_names)
    return [c for c in reading.columns if c.name not in recorded]


def read_again(
    reading: StreamConfig, config: StreamConfig, found: dict[int, ObjectFields], table: pa.Table
) -> list[int]:
    """The objects whose rows, read with `reading`, are not what `config` (the version now
    recorded) reads: each one holding a field that `reading` did not read with its recorded
    type — as found, or (read, so cleared by the proof) as its rows show."""
    read_as = {c.name: c.type for c in reading.columns}
    recorded = {c.name: c.type for c in config.columns}
    retyped = {n for n, t in recorded.items() if n in read_as and read_as[n] != t}
    again = {
        i
        for i, fields in found.items()
        if any(read_as.get(name) != recorded.get(name) for name in fields.fields)
    }
    src = table.column("src")
    for name in retyped:
        again.update(src.filter(pc.is_valid(table.column(name))).to_pylist())
    return sorted(again)


def with_nulls(table: pa.Table, config: StreamConfig) -> pa.Table:
    """`table` with every column of `config`, one it lacks (another run's, that none of these
    objects holds) as nulls."""
    for column in config.columns:
        if column.name not in table.column_names:
            table = table.append_column(
                column.name, pa.nulls(table.num_rows, arrow_type(column.type))
            )
    return table
