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

from resources.ingestion.source_files import open_lines
from resources.schema.field_types import json_value_type, widen

BOM = "\ufeff"
_BLURS = (b'" :', b'"\t:', b'"\r:', b"\\u00", b"\\U00", b"':")


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
        if typ == "string":
            parts.append(pc.fill_null(pc.count_substring(col, '":'), 0).cast(pa.int64()))
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
    """Whether the counts prove the (uncompressed, staged) object at `path` holds no non-null
    field outside the schema, `expected` being its `known_counts` (None: not countable)."""
    if expected is None:
        return False
    data = gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes()
    if any(blur in data for blur in _BLURS):
        return False
    keys = data.count(b'":') - data.count(b'":null') - data.count(b'": null')
    return keys == expected


def scan_fields(path: Path, known: set[str], first_line: int = 1) -> ObjectFields:
    """Every field outside `known` of every record of the object at `path` (gzip when named
    `.gz`), read as Spark's JSON reader reads it: a line holding an array is one record per
    element; a line that is not JSON is skipped (the read quarantines it). Line numbers count
    from `first_line`."""
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
                    _note(found, record, known, n)
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
