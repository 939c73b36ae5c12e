"""CSV records for `record_parser`: each record of `csv_records.CsvRecords` typed as today's
read types its staged JSON (`csv_records.stage_csv`, `read_plan.csv_plan`).

A staged field is a JSON literal where its text is one for its column's type, else a string;
Spark's typed parse takes the literal, and a string it refuses goes through the text parse's
`try_cast`, which gives the literal's value too: so each field's value is Spark's cast of its
text, an empty field null, and a record is refused for the first column (in the schema's
order) whose text does not cast. The header's names outside the schema are fields of type
string (`field_types`: CSV holds text).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from resources.ingestion.csv_records import CsvRecords
from resources.ingestion.field_scan import FieldSeen
from resources.ingestion.record_lines import (
    MISSING_EVENT_TIME,
    MISSING_RECORD_ID,
    Piece,
    typed_table,
)
from resources.ingestion.record_values import CASTS, timestamp_of, wrong_type
from resources.streams import StreamConfig


def csv_piece(records: CsvRecords, config: StreamConfig) -> Piece:
    """Each CSV record typed by Spark's casts of its fields' texts (what the JSON path makes
    of the staged record: a literal where it is one, else the text `try_cast`), checked; the
    header's names outside the schema noted as fields of type string."""
    header = records.header
    known = set(config.column_names)
    at = {name: j for j, name in enumerate(header)}
    specs = [(c.name, c.type, at.get(c.name), CASTS[c.type]) for c in config.columns]
    extras = [(j, name) for j, name in enumerate(header) if name not in known]
    event = config.column_names.index(config.event_time)
    string_event = config.columns[event].type == "string"
    rid = config.column_names.index(config.record_id) if config.record_id else None
    values: list[list[Any]] = [[] for _ in specs]
    piece = Piece(pa.table({}), np.zeros(0, np.int64))
    numbers: list[int] = []
    for row in records:
        if row.values is None:
            piece.bad.append((row.line, row.error or "", row.raw))
            continue
        _note_csv_fields(piece, row.values, extras, row.line)
        typed, reason = _csv_typed(row.values, specs)
        if reason is None:
            when = typed[event]
            if string_event and when is not None:
                when = timestamp_of(when)
            if when is None:
                reason = MISSING_EVENT_TIME
            elif rid is not None and typed[rid] is None:
                reason = MISSING_RECORD_ID
        if reason is not None:
            piece.bad.append((row.line, reason, row.raw))
            continue
        numbers.append(row.line)
        for column, value in zip(values, typed, strict=True):
            column.append(value)
    piece.table = typed_table(values, config)
    piece.line_index = np.array(numbers, dtype=np.int64)
    return piece


def _csv_typed(
    fields: list[str], specs: list[tuple[str, str, int | None, Any]]
) -> tuple[list[Any], str | None]:
    """(a record's values, None) or (partial values, why it is refused: the first column whose
    text does not cast)."""
    typed: list[Any] = []
    for name, typ, j, cast in specs:
        text = fields[j] if j is not None else ""
        if not text:
            typed.append(None)
            continue
        value = cast(text)
        if value is None:
            return typed, wrong_type(name, typ)
        typed.append(value)
    return typed, None


def _note_csv_fields(
    piece: Piece, fields: list[str], extras: list[tuple[int, str]], line: int
) -> None:
    unknown = False
    for j, name in extras:
        if fields[j]:
            unknown = True
            seen = piece.fields.get(name)
            if seen is None:
                seen = piece.fields[name] = FieldSeen(type="string", first_line=line)
            seen.records += 1
    piece.records_with_unknown += unknown
