"""The CSV staging of the Spark reader before issue 34 (each CSV record as one JSON line carrying
its line number, text and, when malformed, why): kept for the record-splitting tests, which
read `csv_records`' records back through it."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from resources.ingestion.csv_records import CsvFormat, CsvRecords, open_text
from resources.streams import RESERVED_PREFIX, StreamConfig

LINE_KEY = f"{RESERVED_PREFIX}_line"
RAW_KEY = f"{RESERVED_PREFIX}_raw"
ERROR_KEY = f"{RESERVED_PREFIX}_error"
quoted = json.encoder.encode_basestring  # a JSON string of the text (C; non-ASCII as is)

_INTEGER = re.compile(r"-?(?:0|[1-9][0-9]*)").fullmatch
JSON_LITERALS: dict[str, Callable[[str], object]] = {
    "long": _INTEGER,
    "int": _INTEGER,
    "double": re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?").fullmatch,
    "boolean": {"true", "false"}.__contains__,
}
"""Column type -> whether a field's text is a JSON literal Spark's JSON reader reads as that
type, to the value `try_cast` gives the text (a long out of range fails both ways)."""


@dataclass(frozen=True)
class CsvStaging:
    """What staging one CSV object as JSON lines found: its header, records and malformed ones."""

    header: list[str]
    """The object's column names (the schema's, without a header)."""
    records: int
    """Records staged, malformed ones included (blank lines are not records)."""
    malformed: int


def stage_csv(source: Path, target: Path, config: StreamConfig, first_line: int = 1) -> CsvStaging:
    """Write `source`'s CSV records to `target` as JSON lines (module docstring), numbering
    `source`'s first line `first_line` (a chunk of a large object, the object's header put
    before its own lines, passes its first line's number in the object minus the header's
    lines). Raises `CsvHeaderError` when the header is unusable.

    A field of a long, int, double or boolean column whose text is already that JSON literal
    (`JSON_LITERALS`) is written as it, any other text as a JSON string: Spark's JSON reader
    then types most records in its typed parse, where a string for such a column would send
    every record through the text parse (~12x slower, BENCHMARKS.md "CSV staging"); the text
    parse `try_cast`s whatever is left, as before. A record's JSON is a %-template of its keys
    filled with json's C string encoder: a third of the time of a dict through `json.dumps`."""
    fmt = CsvFormat.of(config)
    with open_text(source) as text:
        rows = CsvRecords(text, fmt, config.column_names, first_line)
        header = rows.header
        types = {c.name: c.type for c in config.columns}
        literal = [JSON_LITERALS.get(types.get(name, "string")) for name in header]
        carried = f"{quoted(LINE_KEY)}:%d,{quoted(RAW_KEY)}:%s}}\n"
        good = "{" + "".join(f"{quoted(name).replace('%', '%%')}:%s," for name in header) + carried
        bad = f"{{{quoted(ERROR_KEY)}:%s," + carried
        records = malformed = 0
        batch: list[str] = []
        with target.open("w", encoding="utf-8") as out:
            for line, raw, values, error in rows:
                records += 1
                if values is None:
                    malformed += 1
                    batch.append(bad % (quoted(error or ""), line, quoted(raw)))
                else:
                    fields = [
                        (value if is_literal and is_literal(value) else quoted(value))
                        if value
                        else "null"
                        for value, is_literal in zip(values, literal, strict=True)
                    ]
                    batch.append(good % (*fields, line, quoted(raw)))
                if len(batch) == 1024:
                    out.writelines(batch)
                    batch.clear()
            out.writelines(batch)
    return CsvStaging(header, records, malformed)
