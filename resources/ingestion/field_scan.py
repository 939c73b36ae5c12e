"""Which fields a read's JSON objects hold that its schema does not: exact, and cheap when none.

Spark's JSON reader with the declared types cannot see a key it was not asked for, and asking it
for every key costs more than the read (BENCHMARKS.md, "Finding new fields": a text read with
`json_object_keys` took 2.3x the typed read, a variant read 2.8x). So the read stays typed, and
each staged object is checked with byte counts (`count_bytes`, on a thread while Spark reads
the same objects) against the rows Spark returned for it (`known_counts`, `holds_only_known`);
only an object the counts cannot clear is parsed again (`scan_fields`: pyarrow's JSON reader,
else line by line) for the keys, types and first lines of the fields it holds. Under `add` the
reader also reads at once the fields an object's first record holds (`first_record_fields`):
a guess, which the counts then confirm or correct like any other read.

The counts prove that an object holds no non-null field outside the schema. In JSON text every
key is a string followed by `:`; with no whitespace before that colon, each key is one
occurrence of `":`, and inside a string a `"` is always escaped, so `":` there is `\\":`, which
the string's value shows as `":` again. Hence, per object: the raw occurrences of `":` (less
those followed by `null`) equal the non-null values of the known columns plus the `":` held in
the values of its string columns, exactly when no other key holds a value — any other key adds
one to the left side only. What could blur that is refused rather than trusted: whitespace
before a colon, an escape that decodes to a quote or a colon (`\\u0022`, `\\u003a`),
single-quoted names (Spark's reader accepts them). A field whose every value is null is not a
field found: there is nothing to keep.
"""

from __future__ import annotations

import gzip
import json
import mmap
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from resources.ingestion.csv_records import LINE_KEY
from resources.ingestion.source_files import open_lines
from resources.schema.field_types import json_value_type, widen

BOM = "\ufeff"
QUOTE, COLON, BACKSLASH = 0x22, 0x3A, b"\\"
BLUR_BEFORE_COLON = np.zeros(256, dtype=bool)
BLUR_BEFORE_COLON[[0x20, 0x09, 0x0D, 0x0A, 0x27]] = True
"""A byte before a colon that could hide a key from the count of `":`: whitespace, or the
closing quote of a single-quoted name (Spark's reader accepts them)."""
BLUR_ESCAPES = (b"\\u0022", b"\\u003a", b"\\u003A", b"\\U0022", b"\\U003a", b"\\U003A")
"""Escapes that decode to `"` or `:`: a string value could show `":` its text does not have.
(Other escapes, such as the `\\u00e9` of non-ASCII text, cannot.)"""
NULL, SPACED_NULL = b"null", b" null"
GUESS_LINES = 10


@dataclass(frozen=True)
class ObjectBytes:
    """The raw side of the proof for one object, from its bytes alone (`count_bytes`)."""

    keys: int
    """Occurrences of `":`."""
    null_keys: int
    """Of those, the ones followed by `null` or ` null`."""
    blurred: bool
    """Something that could hide a key, or fake one, is present: the proof cannot be trusted."""


@dataclass
class FieldSeen:
    """A field outside the schema, as one object holds it."""

    records: int = 0
    """Records holding a non-null value for it."""
    type: str | None = None
    """The type its values ask for (`resources.schema.field_types`)."""
    first_line: int = 0
    """The object's line of the first record holding it (1-based)."""
    example: Any = None


@dataclass
class ObjectFields:
    """What `scan_fields` found in one object."""

    fields: dict[str, FieldSeen] = field(default_factory=dict)
    records_with_unknown: int = 0


def known_counts(rows: pa.Table, columns: Iterable[tuple[str, str]]) -> dict[int, int]:
    """src -> the right side of the proof for each object in `rows` (a read's Arrow rows, with
    `src`): its known columns' non-null values plus the `":` in its string values (less those
    before `null`). A line Spark rejected counts by its text (`_raw`: the line as read), not
    its columns: its keys are all in the object's bytes, and a field only it holds goes to
    quarantine with it. Per column, only what is there costs: a column without nulls adds its
    object's row count, and string values are searched only when their bytes hold `":`."""
    if rows.num_rows == 0:
        return {}
    counts: dict[int, int] = defaultdict(int)
    raw = rows.column("_raw") if "_raw" in rows.column_names else None
    if raw is not None and raw.null_count < len(raw):
        rejected = pc.is_valid(raw)
        for s, n in _summed_by_src(
            rows.column("src").filter(rejected), _keys_in(raw.filter(rejected))
        ).items():
            counts[s] += n
        rows = rows.filter(pc.invert(rejected))
    src = rows.column("src")
    per_object = _by_src(src)
    for name, typ in columns:
        col = rows.column(name)
        for s, n in per_object.items():
            counts[s] += n
        if col.null_count:
            for s, n in _by_src(src.filter(pc.is_null(col))).items():
                counts[s] -= n
        if typ == "string" and _may_hold_key(col):
            for s, n in _summed_by_src(src, _keys_in(col)).items():
                counts[s] += n
    return dict(counts)


def _keys_in(text: pa.ChunkedArray) -> pa.ChunkedArray:
    """Per value, its `":` less those before `null` (0 for a null value)."""
    keys = pc.fill_null(pc.count_substring(text, '":'), 0).cast(pa.int64())
    for null in ('":null', '": null'):
        nulls = pc.fill_null(pc.count_substring(text, null), 0).cast(pa.int64())
        keys = pc.subtract(keys, nulls)
    return keys


def _by_src(src: pa.ChunkedArray | pa.Array) -> dict[int, int]:
    """Rows per object."""
    counted = pc.value_counts(src)
    return dict(
        zip(counted.field("values").to_pylist(), counted.field("counts").to_pylist(), strict=True)
    )


def _summed_by_src(src: pa.ChunkedArray, values: pa.ChunkedArray) -> dict[int, int]:
    sums = pa.table({"src": src, "n": values}).group_by("src").aggregate([("n", "sum")])
    return dict(zip(sums.column("src").to_pylist(), sums.column("n_sum").to_pylist(), strict=True))


def _may_hold_key(col: pa.ChunkedArray) -> bool:
    """Whether some value of a string column may hold `":`: its chunks' character data
    searched at once (a false yes only costs the exact count)."""
    for chunk in col.chunks:
        if not (pa.types.is_string(chunk.type) or pa.types.is_large_string(chunk.type)):
            return True
        data = chunk.buffers()[2]
        if data is None:
            continue
        view = np.frombuffer(data, dtype=np.uint8)
        colons = np.flatnonzero(view == COLON)
        if (view[colons[colons > 0] - 1] == QUOTE).any():
            return True
    return False


def count_bytes(path: Path) -> ObjectBytes:
    """`ObjectBytes` of the (staged) object at `path` (gzip when named `.gz`): one vectorised
    pass for the colons, then only the bytes around them. Releases the GIL for most of its time,
    so it runs on a thread beside the Spark job that reads the same object."""
    if path.name.endswith(".gz"):
        return _counted(gzip.decompress(path.read_bytes()))
    if path.stat().st_size == 0:
        return ObjectBytes(0, 0, False)
    with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:
        return _counted(data)


def _counted(data: bytes | mmap.mmap) -> ObjectBytes:
    view = np.frombuffer(data, dtype=np.uint8)
    try:
        colons = np.flatnonzero(view == COLON)
        colons = colons[colons > 0]
        before = view[colons - 1]
        blurred = bool(BLUR_BEFORE_COLON[before].any())
        if not blurred and data.find(BACKSLASH) >= 0:
            blurred = any(data.find(escape) >= 0 for escape in BLUR_ESCAPES)
        keys_at = colons[before == QUOTE]
        return ObjectBytes(len(keys_at), _null_values(view, keys_at), blurred)
    finally:
        del view  # an mmap cannot close while a view of it is alive


def _null_values(view: np.ndarray, keys_at: np.ndarray) -> int:
    """How many of the colons at `keys_at` are followed by `null` or ` null`: an `n` one or two
    bytes on picks the candidates (few, unless many values are null), whose bytes are then
    compared whole, all at once."""
    last = len(view) - 1
    near = view[np.minimum(keys_at + 1, last)] == ord("n")
    near |= view[np.minimum(keys_at + 2, last)] == ord("n")
    candidates = keys_at[near]
    nulls = 0
    for pattern in (NULL, SPACED_NULL):
        fits = candidates[candidates + len(pattern) <= last]
        match = np.ones(len(fits), dtype=bool)
        for offset, byte in enumerate(pattern, 1):
            match &= view[fits + offset] == byte
        nulls += int(np.count_nonzero(match))
    return nulls


def holds_only_known(counted: ObjectBytes | None, expected: int | None) -> bool:
    """Whether the counts prove the object holds no non-null field outside the schema:
    `counted` its `count_bytes`, `expected` its `known_counts` (None: not countable)."""
    if counted is None or expected is None or counted.blurred:
        return False
    return counted.keys - counted.null_keys == expected


def scan_fields(path: Path, known: set[str], first_line: int = 1) -> ObjectFields:
    """Every field outside `known` of every record of the object at `path` (gzip when named
    `.gz`), read as Spark's JSON reader reads it: a line holding an array is one record per
    element; a line that is not JSON is skipped (the read quarantines it). Line numbers count
    from `first_line`. pyarrow's JSON reader first (C++, all cores); an object it refuses (a
    malformed line, a field of two kinds of value, an array line) is read line by line."""
    found = _scan_with_arrow(path, known, first_line)
    return found if found is not None else _scan_lines(path, known, first_line)


def first_record_fields(path: Path, known: set[str], first_line: int = 1) -> ObjectFields:
    """The fields outside `known` of the object's first record line, typed by its values: a
    guess, nearly free (one line), of what the whole object holds — a source that changed
    usually carries its new fields from an object's first record on. The first non-blank line
    within `GUESS_LINES`; nothing when it does not parse."""
    found = ObjectFields()
    with open_lines(path) as lines:
        for n, line in enumerate(lines, first_line):
            text = line.strip().removeprefix(BOM)
            if not text:
                if n - first_line < GUESS_LINES:
                    continue
                return found
            try:
                parsed = json.loads(text)
            except ValueError:
                return found
            for record in parsed if isinstance(parsed, list) else [parsed]:
                if isinstance(record, dict):
                    _note(found, record, known, n)
            return found
    return found


def _scan_with_arrow(path: Path, known: set[str], first_line: int) -> ObjectFields | None:
    """`scan_fields` by pyarrow, or None when it cannot read the object as Spark does."""
    try:
        table = pj.read_json(path, parse_options=pj.ParseOptions(unexpected_field_behavior="infer"))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError):
        return None
    found = ObjectFields()
    holding = None
    for name in table.column_names:
        if name in known:
            continue
        column = table.column(name)
        present = pc.is_valid(column)
        records = len(column) - column.null_count
        if records == 0:
            continue
        typ = arrow_json_type(column.type)
        if typ is None:
            return None
        found.fields[name] = FieldSeen(records=records, type=typ)
        holding = present if holding is None else pc.or_(holding, present)
    if holding is not None:
        found.records_with_unknown = pc.sum(pc.cast(holding, pa.int64())).as_py() or 0
        for name, line in _first_lines(path, set(found.fields), first_line).items():
            found.fields[name].first_line = line
    return found


def arrow_json_type(t: pa.DataType) -> str | None:
    """The column type of a field pyarrow inferred as `t` (its JSON values' kind)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "long"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_timestamp(t):
        return "string"  # a timestamp here is a JSON string pyarrow recognised
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return "string"  # nested: kept as its JSON text
    return None


def _first_lines(path: Path, names: set[str], first_line: int) -> dict[str, int]:
    """The line of the first record holding a non-null value of each of `names`: lines that
    mention a name are parsed until each is found (usually within the first few)."""
    wanted = {name: json.dumps(name) for name in names}
    lines: dict[str, int] = {}
    with open_lines(path) as text:
        for n, line in enumerate(text, first_line):
            if not any(quoted in line for name, quoted in wanted.items() if name not in lines):
                continue
            try:
                parsed = json.loads(line.strip().removeprefix(BOM))
            except ValueError:
                continue
            for record in parsed if isinstance(parsed, list) else [parsed]:
                if isinstance(record, dict):
                    for name in wanted:
                        if name not in lines and record.get(name) is not None:
                            lines[name] = record.get(LINE_KEY, n)  # CSV: its object's line
            if len(lines) == len(wanted):
                break
    return lines


def _scan_lines(path: Path, known: set[str], first_line: int) -> ObjectFields:
    """`scan_fields` in Python, one line at a time."""
    found = ObjectFields()
    with open_lines(path) as lines:
        for n, line in enumerate(lines, first_line):
            text = line.strip().removeprefix(BOM) if n == first_line else line.strip()
            if not text:
                continue
            try:
                parsed = json.loads(text)
            except ValueError:
                continue
            for record in parsed if isinstance(parsed, list) else [parsed]:
                if isinstance(record, dict):
                    _note(found, record, known, record.get(LINE_KEY, n))
    return found


def _note(found: ObjectFields, record: Mapping[str, Any], known: set[str], line: int) -> None:
    unknown = False
    for name, value in record.items():
        if name in known or value is None:
            continue
        unknown = True
        seen = found.fields.get(name)
        if seen is None:
            seen = found.fields[name] = FieldSeen(first_line=line, example=value)
        seen.records += 1
        seen.type = widen(seen.type, json_value_type(value))
    found.records_with_unknown += unknown
