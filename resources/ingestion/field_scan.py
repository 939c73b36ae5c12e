"""Which fields a read's JSON objects hold that its schema does not: exact, and cheap when none.

Spark's JSON reader with the declared types cannot see a key it was not asked for, and asking it
for every key costs more than the read (BENCHMARKS.md, "Finding new fields": a text read with
`json_object_keys` took 2.3x the typed read, a variant read 2.8x). So the read stays typed, and
each staged object is first checked with byte counts against the rows Spark returned for it
(`holds_only_known`); only an object the counts cannot clear is parsed again in Python
(`scan_fields`), line by line, for the keys, values and first lines of the fields it holds.

The counts prove that an object holds no non-null field outside the schema. In JSON text every
key is a string followed by `:`; with no whitespace before that colon, each key is one
occurrence of `":`, and inside a string a `"` is always escaped, so `":` there is `\\":`, which
the string's value shows as `":` again. Hence, per object: the raw occurrences of `":` (less
those followed by `null`) equal the non-null values of the known columns plus the `":` held in
the values of its string columns, exactly when no other key holds a value — any other key adds
one to the left side only. What could blur that is refused rather than trusted: whitespace
before a colon, `\\u00` escapes (a quote or colon written as an escape), single-quoted names
(Spark's reader accepts them). A field whose every value is null is not a field found: there is
nothing to keep.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from resources.ingestion.csv_records import LINE_KEY
from resources.ingestion.source_files import open_lines
from resources.schema.field_types import json_value_type, widen

BOM = "\ufeff"
BLURS = (
    (b" ", b" :"),
    (b"\t", b"\t:"),
    (b"\r", b"\r:"),
    (b"'", b"':"),
    (b"\\", b"\\u00"),
    (b"\\", b"\\U00"),
)
"""(byte, pattern) of what could hide a key from the count of `":`, or make a string value
show `":` its text does not have: whitespace before a colon, a single-quoted name (Spark
accepts them), a quote or colon written as a `\\u00..` escape. The pattern is looked for only
where the byte is present."""


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
    before `null`). An object with a bad row is left out: it is scanned (its rows are not all
    there to count)."""
    if rows.num_rows == 0:
        return {}
    parts = []
    for name, typ in columns:
        col = rows.column(name)
        parts.append(pc.cast(pc.is_valid(col), pa.int64()))
        if typ != "string":
            continue
        inside = pc.fill_null(pc.count_substring(col, '":'), 0).cast(pa.int64())
        if not pc.sum(inside).as_py():
            continue  # the common case: no value holds `":` (nor, then, `":null`)
        parts.append(inside)
        for null in ('":null', '": null'):
            nulls = pc.fill_null(pc.count_substring(col, null), 0).cast(pa.int64())
            parts.append(pc.negate(nulls))
    total = parts[0]
    for part in parts[1:]:
        total = pc.add(total, part)
    bad = pc.cast(pc.is_valid(rows.column("_reason")), pa.int64())
    grouped = pa.table({"src": rows.column("src"), "n": total, "bad": bad}).group_by("src")
    sums = grouped.aggregate([("n", "sum"), ("bad", "sum")])
    return {
        int(src): int(n)
        for src, n, b in zip(
            sums.column("src").to_pylist(),
            sums.column("n_sum").to_pylist(),
            sums.column("bad_sum").to_pylist(),
            strict=True,
        )
        if b == 0
    }


def holds_only_known(path: Path, expected: int | None) -> bool:
    """Whether the counts prove the (staged) object at `path` holds no non-null field outside
    the schema, `expected` being its `known_counts` (None: not countable). Each check is one
    substring count over the object (CPython's fast search); a check for a byte that is absent
    (found with `memchr`) is skipped, so a typical object costs two passes."""
    if expected is None:
        return False
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    keys = data.count(b'":')
    if keys < expected:
        return False
    for byte, blur in BLURS:
        if byte in data and blur in data:
            return False  # whitespace before a colon, a single-quoted name, an escape
    if keys == expected:
        return True  # no null value and no other key: both would have added to `keys`
    return keys - data.count(b'":null') - data.count(b'": null') == expected


def scan_fields(path: Path, known: set[str], first_line: int = 1) -> ObjectFields:
    """Every field outside `known` of every record of the object at `path` (gzip when named
    `.gz`), read as Spark's JSON reader reads it: a line holding an array is one record per
    element; a line that is not JSON is skipped (the read quarantines it). Line numbers count
    from `first_line`. pyarrow's JSON reader first (C++, all cores); an object it refuses (a
    malformed line, a field of two kinds of value, an array line) is read line by line."""
    found = _scan_with_arrow(path, known, first_line)
    return found if found is not None else _scan_lines(path, known, first_line)


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
        typ = _arrow_json_type(column.type)
        if typ is None:
            return None
        found.fields[name] = FieldSeen(records=records, type=typ)
        holding = present if holding is None else pc.or_(holding, present)
    if holding is not None:
        found.records_with_unknown = pc.sum(pc.cast(holding, pa.int64())).as_py() or 0
        for name, line in _first_lines(path, set(found.fields), first_line).items():
            found.fields[name].first_line = line
    return found


def _arrow_json_type(t: pa.DataType) -> str | None:
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
