"""The lines of a JSON-lines object as Spark's line reader cuts them, and the exact (slow) path
of `record_parser`: one line at a time, parsed as Spark's JSON reader parses it.

A line is cut at \\n, \\r\\n or \\r; a UTF-8 byte-order mark before the first is left out;
a line holding only spaces or tabs is no record. A line is parsed as Jackson does with Spark's
options: one root value, whatever follows it ignored; single-quoted names and strings taken;
bare NaN and Infinity taken; a repeated name keeps its last value. A root object is one
record, a root array one per element (an array holding anything but objects is one malformed
record; an array whose objects the typed parse refuses, one malformed record per element);
any other root value is malformed. A line that is not valid UTF-8 is rejected as such.
"""

from __future__ import annotations

import json
import json.decoder
import json.scanner
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from resources.ingestion.field_scan import FieldSeen
from resources.ingestion.record_values import (
    LONG_MAX,
    LONG_MIN,
    Nested,
    Number,
    cast_value,
    typed_value,
    wrong_type,
)
from resources.schema.arrow import arrow_type
from resources.schema.field_types import widen
from resources.streams import StreamConfig

__all__ = [
    "MISSING_EVENT_TIME",
    "MISSING_RECORD_ID",
    "Lines",
    "Nested",
    "Number",
    "Piece",
    "parsed_records",
    "python_piece",
    "typed_table",
]

BOM = b"\xef\xbb\xbf"
MALFORMED = "invalid JSON (truncated or malformed)"
MISSING_EVENT_TIME = "missing event time"
MISSING_RECORD_ID = "missing record id"
INVALID_UTF8 = "invalid UTF-8"
_WS = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder(parse_float=Number, parse_int=Number, parse_constant=Number)
# json's C scanner, private API: typeshed types it for a `JSONDecoder`, not our subclass.
_SCAN: Any = json.scanner.make_scanner(_DECODER)  # type: ignore[arg-type]
# typeshed does not declare `scanstring`, which json exports from its C module.
_SCANSTRING: Any = json.decoder.scanstring  # type: ignore[attr-defined]


class Lines:
    """An object's bytes cut into lines: `starts`/`ends` (numpy, end without the line break)
    into `data` (\\r line breaks made \\n, the byte-order mark left out); `bom`: whether the
    first line had one."""

    def __init__(self, data: bytes) -> None:
        self.bom = data.startswith(BOM)
        if self.bom:
            data = data[len(BOM) :]
        if b"\r" in data:
            parts = data.splitlines()
            data = b"\n".join(parts) + (b"\n" if parts else b"")
        self.data = data
        view = np.frombuffer(data, dtype=np.uint8)
        breaks = np.flatnonzero(view == 0x0A)
        self.starts = np.concatenate([[0], breaks + 1]).astype(np.int64)
        self.ends = np.concatenate([breaks, [len(data)]]).astype(np.int64)
        if len(data) == 0 or data.endswith(b"\n"):
            self.starts, self.ends = self.starts[:-1], self.ends[:-1]
        self.count = len(self.starts)
        self.valid = data.isascii() or _decodes(data)

    def raw(self, i: int) -> bytes:
        return self.data[self.starts[i] : self.ends[i]]

    def text(self, i: int) -> str:
        """Line `i` as valid text (invalid UTF-8 as U+FFFD, as Spark's `make_valid_utf8`)."""
        return self.raw(i).decode("utf-8", "replace")

    def line_valid(self, i: int) -> bool:
        return self.valid or _decodes(self.raw(i))


def _ws_end(text: str, at: int) -> int:
    """Where the whitespace from `at` ends."""
    found = _WS.match(text, at)
    assert found is not None  # `\s*` matches at any position
    return found.end()


def _decodes(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


@dataclass
class Piece:
    """Consecutive results of some lines: `table` the records that parsed, typed (before the
    checks), `line_index` each one's line (0-based in the data); `bad` the (line index, reason,
    raw) of the lines rejected; `fields` outside the schema, first lines as line indexes."""

    table: pa.Table
    line_index: np.ndarray
    bad: list[tuple[int, str, str]] = field(default_factory=list)
    fields: dict[str, FieldSeen] = field(default_factory=dict)
    records_with_unknown: int = 0
    unconverted: bool = False
    """pyarrow's rows: timestamps and dates still as their text."""


def python_piece(
    lines: Lines, indexes: list[int], config: StreamConfig, note_fields: bool = True
) -> Piece:
    """The exact path over lines `indexes` (in order): each line parsed and typed in Python;
    the fields outside the schema noted unless `note_fields` is False (pyarrow counted them)."""
    names = config.column_names
    types = [c.type for c in config.columns]
    values: list[list[Any]] = [[] for _ in names]
    rows: list[int] = []
    piece = Piece(pa.table({}), np.zeros(0, np.int64))
    known = set(names)
    for i in indexes:
        raw = lines.raw(i)
        if not raw.strip(b" \t"):
            continue
        if not lines.line_valid(i):
            piece.bad.append((i, INVALID_UTF8, lines.text(i)))
            continue
        records = parsed_records(raw.decode("utf-8"))
        if records is None:
            piece.bad.append((i, MALFORMED, lines.text(i)))
            continue
        for record in records if note_fields else ():
            _note_fields(piece, record, known, i)
        outcome = typed_records(records, names, types)
        if isinstance(outcome, str):
            count = 1 if outcome == MALFORMED and not records else max(len(records), 1)
            piece.bad.extend([(i, outcome, lines.text(i))] * count)
            continue
        for row in outcome:
            rows.append(i)
            for column, value in zip(values, row, strict=True):
                column.append(value)
    piece.table = typed_table(values, config)
    piece.line_index = np.array(rows, dtype=np.int64)
    return piece


def typed_table(values: list[list[Any]], config: StreamConfig) -> pa.Table:
    """The config's columns of `values` (timestamps as microseconds, dates as days)."""
    arrays = []
    for column, spec in zip(values, config.columns, strict=True):
        typ = arrow_type(spec.type)
        if spec.type == "timestamp":
            arrays.append(pa.array(column, pa.int64()).cast(typ))
        elif spec.type == "date":
            arrays.append(pa.array(column, pa.int32()).cast(typ))
        else:
            arrays.append(pa.array(column, typ))
    return pa.Table.from_arrays(arrays, names=config.column_names)


def typed_records(
    records: list[dict[str, Any]], names: list[str], types: list[str]
) -> list[list[Any]] | str:
    """Each record's values as Spark's read types them, or why the line is rejected: the
    typed parse first; a record it refuses makes the whole line go through the text parse,
    which names the first column (in the schema's order) whose text does not cast."""
    rows: list[list[Any]] = []
    for record in records:
        row = []
        for name, typ in zip(names, types, strict=True):
            ok, value = typed_value(record.get(name), typ)
            if not ok:
                return _text_parsed(records, names, types, rows)
            row.append(value)
        rows.append(row)
    return rows


def _text_parsed(
    records: list[dict[str, Any]], names: list[str], types: list[str], rows: list[list[Any]]
) -> list[list[Any]] | str:
    """The text parse of a line the typed parse refused: an array line is malformed to it (one
    record per element); an object line's columns are each cast from their text."""
    if len(records) != 1 or getattr(records, "array", False):
        return MALFORMED
    (record,) = records
    row = []
    for name, typ in zip(names, types, strict=True):
        ok, value = cast_value(record.get(name), typ)
        if not ok:
            return wrong_type(name, typ)
        row.append(value)
    return [row]


class _Records(list[dict[str, Any]]):
    """The records of an array line (one per element)."""

    array = True


def parsed_records(text: str, first_wins: bool = False) -> list[dict[str, Any]] | None:
    """The records of one line (module docstring), or None when it is malformed; each
    record's values: `Number` (a number's text), `Nested` (an object's or array's text), str,
    bool or None. A repeated name keeps its last value (`first_wins`: its first, as a map
    parsed by `from_json` is looked up)."""
    if not first_wins:
        quick = _plain_records(text)
        if quick is not None:
            return quick
    start = _ws_end(text, 0)
    if text.startswith("\ufeff", start):
        return None
    try:
        if text.startswith("{", start) or text.startswith("'", start):
            record, _ = _object(text, start, first_wins)
            return [record]
        if text.startswith("[", start):
            value, _ = _SCAN(text, start)
            if not all(isinstance(e, dict) for e in value):
                return None if value else []
            return _Records(_members(text, start, first_wins))
    except (ValueError, StopIteration, RecursionError, IndexError):
        return None
    return None


def _plain_records(text: str) -> list[dict[str, Any]] | None:
    """`parsed_records` by `json`'s C decoder, for a line it reads as Jackson does: one object
    or an array of objects, no nested value (whose text it does not keep), nothing after the
    root value; None for any other line (the walker decides)."""
    try:
        value = _DECODER.decode(text)
    except (ValueError, RecursionError):
        return None
    escaped = "\\u" in text  # a lone surrogate can only come from an escape
    if isinstance(value, dict):
        return [value] if _flat(value, escaped) else None
    if isinstance(value, list) and all(isinstance(e, dict) and _flat(e, escaped) for e in value):
        return _Records(value)
    return None


def _flat(record: dict[str, Any], escaped: bool) -> bool:
    """Whether `record` holds no nested value; its strings made Java's when `escaped`."""
    for name, value in list(record.items()):
        if isinstance(value, (dict, list)):
            return False
        if escaped:
            del record[name]
            record[_java_string(name)] = _java_string(value) if isinstance(value, str) else value
    return True


def _members(text: str, start: int, first_wins: bool) -> list[dict[str, Any]]:
    """The objects of the array at `start`, each parsed by `_object` (their values' texts)."""
    records = []
    at = _ws_end(text, start + 1)
    while text[at] != "]":
        record, at = _object(text, at, first_wins)
        records.append(record)
        at = _ws_end(text, at)
        if text[at] == ",":
            at = _ws_end(text, at + 1)
        elif text[at] != "]":
            raise ValueError("expected , or ]")
    return records


def _object(text: str, at: int, first_wins: bool = False) -> tuple[dict[str, Any], int]:
    """The object at `at` (its `{`): name -> value (a nested value as `Nested` text, a number
    as `Number`), the last of a repeated name; and where it ends."""
    if text[at] != "{":
        raise ValueError("expected {")
    record: dict[str, Any] = {}
    at = _ws_end(text, at + 1)
    if text[at] == "}":
        return record, at + 1
    while True:
        name, at = _string(text, at)
        at = _ws_end(text, at)
        if text[at] != ":":
            raise ValueError("expected :")
        at = _ws_end(text, at + 1)
        if text[at] == "'":
            value, end = _string(text, at)
        else:
            value, end = _SCAN(text, at)
            if isinstance(value, (dict, list)):
                value = Nested(text[at:end])
            elif isinstance(value, str):
                value = _java_string(value)
        name = _java_string(name)
        if not first_wins or name not in record:
            record[name] = value
        at = _ws_end(text, end)
        if text[at] == "}":
            return record, at + 1
        if text[at] != ",":
            raise ValueError("expected , or }")
        at = _ws_end(text, at + 1)


def _string(text: str, at: int) -> tuple[str, int]:
    """The string at `at`, double- or single-quoted (Spark's reader allows both)."""
    if text[at] == '"':
        found: tuple[str, int] = _SCANSTRING(text, at + 1, True)
        return found
    if text[at] != "'":
        raise ValueError("expected a name")
    end = at + 1
    while text[end] != "'":
        end += 2 if text[end] == "\\" else 1
    body = text[at + 1 : end].replace("\\'", "'").replace('"', '\\"')
    value, _ = _SCANSTRING(f'"{body}"', 1, True)
    return value, end + 1


def _java_string(value: str) -> str:
    """A decoded string as Java's UTF-8 encoding writes it: a lone surrogate as `?`."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "replace").decode("utf-8")
    return value


def _note_fields(piece: Piece, record: dict[str, Any], known: set[str], line: int) -> None:
    """Count `record`'s non-null fields outside `known` (as `field_scan` does)."""
    unknown = False
    for name, value in record.items():
        if name in known or value is None:
            continue
        unknown = True
        seen = piece.fields.get(name)
        if seen is None:
            seen = piece.fields[name] = FieldSeen(first_line=line)
        seen.records += 1
        seen.type = widen(seen.type, _json_type(value))
    piece.records_with_unknown += unknown


def _json_type(value: Any) -> str:
    """`field_types.json_value_type` of a value parsed here."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, Number):
        if re.fullmatch(r"-?[0-9]+", value):
            return "long" if LONG_MIN <= int(value) <= LONG_MAX else "double"
        return "double"
    return "string"
