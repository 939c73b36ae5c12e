"""Parse a JSON-lines or CSV source object's bytes (or a chunk of one cut at line ends) into
the rows and quarantine records today's Spark read (`read_plan`, `source_rows`, `quarantine`)
makes of them, with pyarrow and plain Python only: what a Spark task can run inside
`mapInArrow` without Spark expressions.

JSON lines, fast path: runs of lines that can only be records (`{` first, `}` last, valid
UTF-8) are read by `pyarrow.json.read_json` in one block, with the declared types (timestamps
and dates as text, converted here by Spark's rules: pyarrow's own parsing differs) and
`unexpected_field_behavior="infer"`, which also names the fields outside the schema and their
kinds. Where pyarrow refuses a run (a malformed line, a quoted number, a nested value in a
string column...) or its rows could differ from Spark's (a row count other than the lines':
two objects on a line; a time Spark reads otherwise), the lines at fault take the exact path
(`record_lines`: `json`'s C scanner keeping each number's text, then Spark's value rules,
`record_values`) and the rest is read again by pyarrow: the row pyarrow's error names, else
found by halving the run; where lines at fault are dense (a number in a string column on
every line: Spark's typed parse keeps its text, pyarrow refuses it), the rest of the run goes
to the exact path at once, at a few MB/s. A line pyarrow must never see (`null` crashes its
reader, an array it refuses, leading blanks) takes the exact path directly. CSV
(`record_csv`): `csv_records`' own record splitting, then the same rules over each field's
text. Rescue (`record_rescue`): the exact path only (in Spark too, the slow mode).

What differs from today's Spark read, as far as known (the differential test,
tests/ingestion/test_record_parser.py, holds the cases that agree):
- A nested value with single-quoted strings (Spark's reader takes them; single quotes around
  a record's own names and values are handled) is quarantined here as invalid JSON.
- Nesting deeper than Jackson's limit (1,000) or Python's recursion limit: Spark refuses the
  line as invalid JSON; here the limit is Python's (close to it, not equal).
- A time alone ("10:00:00") is on today's date, as Spark has it; two readers running on
  either side of midnight give different dates.
- Time zones named in a timestamp's text or in `timezone` come from Python's tz database,
  Spark's from Java's: a zone whose rules the two versions disagree on gives other instants.
- Rescue: a double in `_rescued` or a string column is printed as Java 19+ prints it
  (shortest digits); Java 17 prints a few values with more digits.
- Quarantine line numbers follow `quarantine.line_numbers` (the k-th bad record with a text
  gets the k-th line holding it, so the second bad record of one array line gets the next
  line with the same text or none; none for a first line after a byte-order mark), except
  that lines whose texts agree only once invalid UTF-8 is replaced are not matched together.
- A line holding a `null` makes today's reader crash when `field_scan.scan_fields` passes the
  object to pyarrow (a segmentation fault in pyarrow 26); here it is quarantined as Spark's
  JSON reader does ("invalid JSON").
"""

from __future__ import annotations

import io
import logging
import re
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from resources.ingestion.csv_records import CsvFormat, CsvHeaderError, CsvRecords
from resources.ingestion.field_scan import FieldSeen, ObjectFields, arrow_json_type
from resources.ingestion.record_csv import csv_piece
from resources.ingestion.record_lines import (
    MISSING_EVENT_TIME,
    MISSING_RECORD_ID,
    Lines,
    Piece,
    python_piece,
    typed_table,
)
from resources.ingestion.record_values import date_of, timestamp_of
from resources.schema.arrow import arrow_type
from resources.schema.field_types import widen
from resources.schema.modes import RESCUE
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

__all__ = ["CsvHeaderError", "ParsedRecords", "parse_csv", "parse_json_lines"]

SMALL_BLOCK = 16
"""Lines of a block pyarrow refused below which its lines take the exact path one by one."""
DENSE = 8
"""Records per line at fault below which a run of lines stops going to pyarrow."""
MAX_DEPTH = 1000
"""Jackson's nesting limit: a line nested deeper is malformed to Spark (pyarrow reads it)."""
ROW_IN_ERROR = re.compile(r" in row (\d+)$")
"""Where pyarrow says a parse error is: the row (of the block read as one) at fault."""
BAD_SCHEMA = pa.schema([("line", pa.int64()), ("reason", pa.string()), ("raw", pa.string())])


@dataclass
class ParsedRecords:
    """What one object (or chunk) holds, as today's Spark read would stage it."""

    rows: pa.Table
    """Good records in source order: the config's columns with their Arrow types, and `dt`."""
    bad: pa.Table
    """(line, reason, raw) of each quarantined record, in source order."""
    fields: ObjectFields = field(default_factory=ObjectFields)
    """Fields outside the config's columns, as `field_scan` reports them (none under rescue)."""
    lines: int = 0
    """Lines the data held."""


ZONED = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-](0\d|1[0-7]):[0-5]\d|[+-]18:00)$"
NAIVE = r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}:\d{2}(\.\d{1,6})?$"
PLAIN_DATE = r"^\d{4}-\d{2}-\d{2}$"
"""Texts pyarrow's casts read as Spark does (checked against `record_values`); any other
text is converted in Python."""
UTC = pa.timestamp("us", tz="UTC")


def parse_json_lines(data: bytes, config: StreamConfig, first_line: int = 1) -> ParsedRecords:
    """The rows, quarantine records and fields outside the schema of JSON-lines `data` (whole
    lines of an object; its first line is the object's line `first_line`), as today's Spark
    read gives them (module docstring: how, and what differs)."""
    if config.schema_evolution == RESCUE:
        from resources.ingestion.record_rescue import rescue_pieces

        lines = Lines(data)
        pieces = rescue_pieces(lines, config)
        lines.bom = False  # the rescue read's text keeps the mark: the search finds line 1
        return _finished(pieces, config, first_line, lines, lines.count)
    lines = Lines(data)
    return _finished(_json_pieces(lines, config), config, first_line, lines, lines.count)


def _json_pieces(lines: Lines, config: StreamConfig) -> list[Piece]:
    """Every line's results, in line order: runs of lines pyarrow may read (`_line_kinds`)
    through `_arrow_run`, the others through the exact path."""
    kinds = _line_kinds(lines)
    schema = pa.schema(
        [
            pa.field(c.name, pa.string() if c.type in ("timestamp", "date") else arrow_type(c.type))
            for c in config.columns
        ]
    )
    pieces: list[Piece] = []
    exact = np.flatnonzero(kinds == 2)
    begin = 0
    for stop in [*exact.tolist(), lines.count]:
        if stop > begin and (kinds[begin:stop] == 1).any():
            pieces.extend(_arrow_run(lines, begin, stop, config, schema, kinds))
        if stop < lines.count:
            pieces.append(python_piece(lines, [stop], config))
        begin = stop + 1
    read = [p for p in pieces if p.unconverted]
    if not read:
        return pieces
    return [*(p for p in pieces if not p.unconverted), *_converted(lines, read, config)]


def _line_kinds(lines: Lines) -> np.ndarray:
    """Per line: 0 empty, 1 for pyarrow (`{` first, `}` last, valid UTF-8, not possibly nested
    deeper than `MAX_DEPTH`), 2 the exact path (anything else: pyarrow crashes on a `null`
    line, refuses arrays, skips no blank, reads what Jackson finds too deep)."""
    view = np.frombuffer(lines.data, dtype=np.uint8)
    kinds = np.full(lines.count, 2, dtype=np.int8)
    if lines.count == 0:
        return kinds
    empty = lines.starts == lines.ends
    last = np.maximum(lines.ends - 1, 0)
    first = view[np.minimum(lines.starts, max(len(view) - 1, 0))]
    kinds[(first == ord("{")) & (view[last] == ord("}")) & ~empty] = 1
    kinds[empty] = 0
    if not lines.valid:
        for i in np.flatnonzero(kinds == 1).tolist():
            if not lines.line_valid(i):
                kinds[i] = 2
    for i in np.flatnonzero((lines.ends - lines.starts > 2 * MAX_DEPTH) & (kinds == 1)).tolist():
        raw = lines.raw(i)  # nesting pyarrow takes and Jackson refuses needs a long line
        if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH:
            kinds[i] = 2
    return kinds


def _arrow_run(
    lines: Lines, begin: int, stop: int, config: StreamConfig, schema: pa.Schema, kinds: np.ndarray
) -> list[Piece]:
    """Lines `begin`..`stop` (records and empty lines only) by pyarrow, in one block; when it
    refuses them, the row its error names (and the one before: a line with text after its
    object shifts the count by one) takes the exact path, the lines before it are read again
    and reading resumes after it; pyarrow stops at its first error, so that costs about one
    more read of the data however many lines are at fault. Lines at fault closer together than
    `DENSE` (on average, past the first few) all take the exact path from there on; an error
    naming no row is found by halving (`_halved`)."""
    pieces: list[Piece] = []
    exact: list[int] = []
    first, faults = begin, 0
    while begin < stop:
        records = np.flatnonzero(kinds[begin:stop] == 1) + begin
        if not len(records):
            break
        read = _read_block(lines, begin, stop, records, config, schema)
        if isinstance(read, Piece):
            pieces.append(read)
            break
        found = ROW_IN_ERROR.search(str(read))
        row = int(found.group(1)) if found else -1
        if len(records) <= SMALL_BLOCK or not 0 <= row <= len(records):
            pieces += _halved(lines, begin, stop, config, schema, kinds)
            break
        faults += 1
        if faults > DENSE and (int(records[min(row, len(records) - 1)]) - first) < faults * DENSE:
            exact += records.tolist()
            break
        low, high = max(row - 1, 0), min(row + 1, len(records))
        cut = int(records[low])
        if cut > begin:
            pieces += _halved(lines, begin, cut, config, schema, kinds)
        exact += records[low:high].tolist()
        begin = int(records[high - 1]) + 1
    if exact:
        pieces.append(python_piece(lines, exact, config))
    return pieces


def _halved(
    lines: Lines, begin: int, stop: int, config: StreamConfig, schema: pa.Schema, kinds: np.ndarray
) -> list[Piece]:
    """Lines `begin`..`stop` by pyarrow; a block it refuses is halved until its lines are
    few, which take the exact path."""
    records = np.flatnonzero(kinds[begin:stop] == 1) + begin
    if not len(records):
        return []
    read = _read_block(lines, begin, stop, records, config, schema)
    if isinstance(read, Piece):
        return [read]
    if len(records) <= SMALL_BLOCK:
        return [python_piece(lines, records.tolist(), config)]
    middle = int(records[len(records) // 2])
    return [
        *_halved(lines, begin, middle, config, schema, kinds),
        *_halved(lines, middle, stop, config, schema, kinds),
    ]


def _read_block(
    lines: Lines,
    begin: int,
    stop: int,
    records: np.ndarray,
    config: StreamConfig,
    schema: pa.Schema,
) -> Piece | Exception:
    """pyarrow's rows of lines `begin`..`stop` as an unconverted piece (the fields outside the
    schema noted), or why they are not Spark's: pyarrow's error, or a row count other than
    the records'."""
    start, end = int(lines.starts[begin]), int(lines.ends[stop - 1])
    try:
        table = pj.read_json(
            pa.BufferReader(pa.py_buffer(lines.data).slice(start, end - start)),
            read_options=pj.ReadOptions(use_threads=False, block_size=end - start + 1),
            parse_options=pj.ParseOptions(
                explicit_schema=schema, unexpected_field_behavior="infer"
            ),
        )
    except pa.ArrowInvalid as exc:
        log.debug("lines %d..%d: %s", begin, stop, exc)
        refused: Exception = exc
        return refused
    if table.num_rows != len(records):
        return ValueError(f"{table.num_rows} rows from {len(records)} lines")
    piece = Piece(table.select(config.column_names), records, unconverted=True)
    noted: Piece = _with_fields(piece, table.drop_columns(config.column_names), records)
    return noted


def _converted(lines: Lines, read: list[Piece], config: StreamConfig) -> list[Piece]:
    """pyarrow's pieces as one, their times converted by Spark's rules at once; a row whose
    time Spark's typed parse would refuse goes through the exact path (its whole line parsed
    again, its fields already counted)."""
    table = pa.concat_tables([p.table for p in read])
    records = np.concatenate([p.line_index for p in read])
    found = _merged_fields(read, 0)
    columns = []
    redo = np.zeros(table.num_rows, dtype=bool)
    for c in config.columns:
        column = table.column(c.name)
        if c.type in ("timestamp", "date"):
            column, failed = converted_times(column, c.type)
            redo |= failed
        columns.append(column)
    typed = pa.Table.from_arrays(columns, names=config.column_names)
    piece = Piece(
        typed, records, fields=found.fields, records_with_unknown=found.records_with_unknown
    )
    if not redo.any():
        return [piece]
    piece.table, piece.line_index = typed.filter(pa.array(~redo)), records[~redo]
    return [piece, python_piece(lines, records[redo].tolist(), config, note_fields=False)]


def _with_fields(piece: Piece, extras: pa.Table, records: np.ndarray) -> Piece:
    """`piece` with the fields of `extras` (pyarrow's columns outside the schema) noted."""
    holding = None
    for name in extras.column_names:
        column = extras.column(name)
        count = len(column) - column.null_count
        if count == 0:
            continue
        present = pc.is_valid(column)
        first = int(np.argmax(present.to_numpy(zero_copy_only=False)))
        piece.fields[name] = FieldSeen(
            records=count, type=arrow_json_type(column.type), first_line=int(records[first])
        )
        holding = present if holding is None else pc.or_(holding, present)
    if holding is not None:
        piece.records_with_unknown = int(pc.sum(pc.cast(holding, pa.int64())).as_py() or 0)
    return piece


def converted_times(column: pa.ChunkedArray, type_name: str) -> tuple[pa.Array, np.ndarray]:
    """(the timestamps or dates of text `column` as Spark reads them, a mask of the texts it
    does not read): pyarrow's casts for the plain ISO forms, `record_values` for the rest."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    target = arrow_type(type_name)
    if type_name == "timestamp":
        zoned = pc.fill_null(pc.match_substring_regex(column, ZONED), False)
        if pc.all(zoned).as_py():  # the usual column: every time with its zone, cast at once
            naive = pa.array(np.zeros(len(column), dtype=bool))
        else:
            naive = pc.fill_null(pc.match_substring_regex(column, NAIVE), False)
        fast = pc.or_(zoned, naive)
        casts = [(zoned, UTC), (naive, pa.timestamp("us"))]
    else:
        fast = pc.fill_null(pc.match_substring_regex(column, PLAIN_DATE), False)
        casts = [(fast, target)]
    out = pa.nulls(len(column), target)
    try:
        for mask, typ in casts:
            if pc.all(mask).as_py():
                out = pc.cast(column, typ).cast(target)
            elif pc.any(mask).as_py():
                part = pc.cast(pc.if_else(mask, column, pa.scalar(None, column.type)), typ)
                out = pc.if_else(mask, part.cast(target), out)
    except pa.ArrowInvalid as exc:  # an impossible date among them: Python reads each
        log.debug("times through Python: %s", exc)
        fast = pa.array(np.zeros(len(column), dtype=bool))
        out = pa.nulls(len(column), target)
    slow = pc.and_(pc.is_valid(column), pc.invert(fast))
    if pc.any(slow).as_py():
        out = _python_times(column, slow, out, type_name)
    failed = pc.and_(pc.is_valid(column), pc.is_null(out))
    return out, failed.to_numpy(zero_copy_only=False)


def _python_times(column: pa.Array, slow: pa.Array, out: pa.Array, type_name: str) -> pa.Array:
    parse = timestamp_of if type_name == "timestamp" else date_of
    plain = pa.int64() if type_name == "timestamp" else pa.int32()
    values = out.cast(plain).to_pylist()
    texts = column.to_pylist()
    for i in np.flatnonzero(slow.to_numpy(zero_copy_only=False)).tolist():
        values[i] = parse(texts[i])
    return pa.array(values, plain).cast(arrow_type(type_name))


def _finished(
    pieces: list[Piece], config: StreamConfig, first_line: int, lines: Lines | None, count: int
) -> ParsedRecords:
    """The pieces' results together, in line order: the checks (event time, record id) and
    the date of each good row, the bad records numbered (JSON: as `quarantine.line_numbers`
    finds them; CSV, `lines` None: each piece's line indexes are the object's numbers)."""
    tables = [p.table for p in pieces if p.table.num_rows]
    table = (
        pa.concat_tables(tables) if tables else typed_table([[] for _ in config.columns], config)
    )
    index = np.concatenate([p.line_index for p in pieces]) if pieces else np.zeros(0, np.int64)
    if len(index) > 1 and (np.diff(index) < 0).any():
        order = np.argsort(index, kind="stable")
        table, index = table.take(pa.array(order)), index[order]
    event = table.column(config.event_time)
    if not pa.types.is_timestamp(event.type):
        event = converted_times(event, "timestamp")[0]
    missing = pc.is_null(event)
    reasons = pc.if_else(missing, pa.scalar(MISSING_EVENT_TIME), pa.scalar(None, pa.string()))
    if config.record_id:
        no_id = pc.and_(pc.invert(missing), pc.is_null(table.column(config.record_id)))
        reasons = pc.if_else(no_id, pa.scalar(MISSING_RECORD_ID), reasons)
    failing = pc.is_valid(reasons)
    bad = [entry for p in pieces for entry in p.bad]
    if pc.any(failing).as_py():
        assert lines is not None, "CSV rows are checked as they are typed"
        at = index[failing.to_numpy(zero_copy_only=False)].tolist()
        texts = reasons.filter(failing).to_pylist()
        bad += [(i, why, lines.text(i)) for i, why in zip(at, texts, strict=True)]
        keep = pc.invert(failing)
        table, event = table.filter(keep), pc.filter(event, keep)
    bad.sort(key=lambda entry: entry[0])
    local = event.cast(pa.timestamp("us", tz=config.timezone))
    rows = table.append_column("dt", pc.cast(pc.local_timestamp(local), pa.date32()))
    return ParsedRecords(
        rows=rows,
        bad=_bad_table(bad, first_line, lines),
        fields=_merged_fields(pieces, 0 if lines is None else first_line),
        lines=count,
    )


def _bad_table(bad: list[tuple[int, str, str]], first_line: int, lines: Lines | None) -> pa.Table:
    """(line, reason, raw) of `bad`. JSON: today's reader finds a bad record's line by its
    text (`quarantine.line_numbers`): the k-th record with a text gets the k-th line holding it
    (none past the last; none for the first line after a byte-order mark, whose text the
    search does not match), which is each record's own line but where a line holds several."""
    if lines is None:
        numbers: list[int | None] = [i for i, _, _ in bad]
    else:
        holding: dict[str, list[int]] = {}
        for i, _, raw in bad:
            seen = holding.setdefault(raw, [])
            if not (lines.bom and i == 0) and (not seen or seen[-1] != i):
                seen.append(i)
        taken: dict[str, int] = {}
        numbers = []
        for _, _, raw in bad:
            k = taken.get(raw, 0)
            taken[raw] = k + 1
            found = holding[raw]
            numbers.append(found[k] + first_line if k < len(found) else None)
    return pa.table(
        [
            pa.array(numbers, pa.int64()),
            pa.array([why for _, why, _ in bad], pa.string()),
            pa.array([raw for _, _, raw in bad], pa.string()),
        ],
        schema=BAD_SCHEMA,
    )


def _merged_fields(pieces: list[Piece], shift: int) -> ObjectFields:
    """The pieces' fields outside the schema as one object's: counts summed, types widened,
    the first line the earliest (shifted to the object's numbering)."""
    merged = ObjectFields()
    for piece in pieces:
        merged.records_with_unknown += piece.records_with_unknown
        for name, seen in piece.fields.items():
            into = merged.fields.get(name)
            if into is None:
                merged.fields[name] = FieldSeen(seen.records, seen.type, seen.first_line + shift)
                continue
            into.records += seen.records
            into.type = widen(into.type, seen.type)
            into.first_line = min(into.first_line, seen.first_line + shift)
    return merged


def parse_csv(
    data: bytes, config: StreamConfig, first_line: int = 1, header: bytes | None = None
) -> ParsedRecords:
    """The rows, quarantine records and fields outside the schema of CSV `data`, as today's
    reader stages (`csv_records.stage_csv`) and reads them. `data` is whole records; with
    `header` (a chunk after an object's first: its header line(s) as written), `first_line`
    is the object's line of the chunk's first line; without, `data` starts with the header
    when the stream has one. Raises `CsvHeaderError` (today's `failed` message) when the
    header names no usable columns."""
    fmt = CsvFormat.of(config)
    above = _csv_line_count(header) if header else 0
    text = ((header or b"") + data).decode("utf-8", "surrogateescape")
    records = CsvRecords(
        io.StringIO(text, newline=""), fmt, config.column_names, first_line - above
    )
    piece = csv_piece(records, config)
    count = records.next_line - first_line
    return _finished([piece], config, first_line, None, count)


def _csv_line_count(header: bytes) -> int:
    return sum(1 for _ in io.StringIO(header.decode("utf-8", "surrogateescape"), newline=""))
