"""The streams and row order of `record_parser`'s differential test (its expected reads are
tests/ingestion/record_parser_goldens.json)."""

from __future__ import annotations

import pyarrow as pa

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


def sorted_rows(table: pa.Table) -> pa.Table:
    """`table` sorted by every column (nulls first), so two reads compare as sets of rows."""
    return table.sort_by([(n, "ascending", "at_start") for n in table.column_names])
