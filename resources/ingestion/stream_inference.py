"""Infer a stream entry from sampled source text: format, schema, event time, record id.

`leasehold init` samples a source (`stream_sampling`) and asks this module what the stream
looks like. Everything here is plain Python on bytes and strings, so each decision can be
tested on its own: a wrong guess costs the user a run full of quarantined records, so every
choice the data does not settle is refused with a message naming the flag that settles it
(`InferenceChoiceError`) rather than guessed.

The types are inferred the way the runtime will read them (`read_plan`): a JSON value's own
type decides, a JSON string holding a number stays a string; a CSV field (parsed as the
runtime stages it, `csv_records`) is text that must cast. Timestamps are what Spark's cast
accepts (ISO-8601 dates with a time, `T` or a space, an optional fraction and offset): a
column leasehold would fail to parse is never declared a timestamp.
"""

from __future__ import annotations

import io
import json
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any

from resources.errors import ConfigError, LeaseholdError
from resources.ingestion.csv_records import CsvFormat, CsvHeaderError, CsvRecords

GZIP_MAGIC = b"\x1f\x8b"
BOM = "\ufeff"

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".json")
CSV_SUFFIXES = {".csv": ",", ".tsv": "\t"}

# In order of preference: the first of these among the timestamp columns is the event time.
EVENT_TIME_NAMES = (
    "event_time",
    "event_timestamp",
    "eventtime",
    "timestamp",
    "ts",
    "time",
    "occurred_at",
    "created_at",
    "datetime",
    "date_time",
)
# A record id named like one of these wins over other unique id-like columns.
RECORD_ID_NAMES = ("record_id", "event_id", "id", "uuid", "message_id", "guid")

_TIMESTAMP = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[T ](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,9})?)?"
    r"(Z|[+-]\d{2}(?::?\d{2})?)?"
)
_DATE = re.compile(r"(\d{4})-(\d{2})-(\d{2})")
_LONG = re.compile(r"[+-]?(0|[1-9]\d*)")
_DOUBLE = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?")
_LEADING_ZERO = re.compile(r"[+-]?0\d+")
_OFFSET = re.compile(r"(Z|[+-]\d{2}(:?\d{2})?)$")
LONG_MAX = 2**63 - 1


class SourceInferenceError(LeaseholdError):
    """The source cannot become a stream as it is (empty, unreadable, no usable column)."""


class InferenceChoiceError(ConfigError):
    """A choice the sample does not settle: the message names the flag that settles it."""

    def __init__(self, flag: str, message: str) -> None:
        LeaseholdError.__init__(self, f"{message}; choose with {flag}")
        self.field = flag


@dataclass(frozen=True)
class ObjectFormat:
    """What one object is, from its key and first bytes."""

    format: str | None  # jsonl, csv, or None when neither key nor bytes say
    gzip: bool
    delimiter: str = ","
    problem: str | None = None  # why the runtime could not read it as it is


def format_from_key(key: str) -> str | None:
    """jsonl or csv by the key's suffix (under a `.gz`), None when it does not say."""
    name = key.lower().removesuffix(".gz")
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(tuple(CSV_SUFFIXES)):
        return "csv"
    return None


def detect_format(key: str, head: bytes, text: str) -> ObjectFormat:
    """One object's format: the suffix first (`.jsonl`, `.ndjson`, `.json`, `.csv`, `.tsv`,
    each maybe `.gz`), else its first line. `head` is its first raw bytes (for gzip's magic
    number), `text` its first decompressed text. The runtime decompresses exactly the objects
    named `.gz` (`source_files.inspect_source`), so gzip data under another name, or a `.gz`
    that is not gzip, is a problem to report, not something to work around here."""
    named_gz = key.lower().endswith(".gz")
    is_gz = head[:2] == GZIP_MAGIC
    problem = None
    if named_gz and not is_gz and head:
        problem = "named .gz but is not gzip data"
    elif is_gz and not named_gz:
        problem = "gzip data not named .gz (leasehold decompresses only objects named .gz)"
    fmt = format_from_key(key)
    first = _first_line(text)
    if fmt is None and first:
        fmt = "jsonl" if first.lstrip().startswith(("{", "[")) else None
        if fmt is None and any(d in first for d in (",", "\t", ";", "|")):
            fmt = "csv"
    delimiter = ","
    if fmt == "csv":
        suffix = "." + key.lower().removesuffix(".gz").rpartition(".")[2]
        delimiter = CSV_SUFFIXES.get(suffix) or sniff_delimiter(first)
    return ObjectFormat(fmt, named_gz, delimiter, problem)


def _first_line(text: str) -> str:
    for line in text.removeprefix(BOM).splitlines():
        if line.strip():
            return line
    return ""


def sniff_delimiter(header: str) -> str:
    """The most frequent of the usual delimiters in the header line (comma on a tie)."""
    counts = {d: header.count(d) for d in (",", "\t", ";", "|")}
    best = max(counts, key=lambda d: (counts[d], d == ","))
    return best if counts[best] else ","


def single_format(formats: dict[str, ObjectFormat], unknown_keys: Sequence[str]) -> ObjectFormat:
    """The one format of a source, or why not. A stream reads one format: the lister takes
    every object under the source, with no filter by suffix, so mixed formats must be split
    into separate directories (prefixes), one stream each."""
    counts = Counter(f.format for f in formats.values() if f.format)
    if len(counts) > 1:
        listed = ", ".join(f"{n} {_FORMAT_NAMES[fmt]}" for fmt, n in sorted(counts.items()))
        raise SourceInferenceError(
            f"the source mixes formats ({listed} objects) and a stream reads one: leasehold "
            "lists every object under a source (no filter by suffix), so move each format to "
            "a directory or prefix of its own and `leasehold init` each"
        )
    if not counts:
        examples = ", ".join(repr(k) for k in list(unknown_keys)[:3])
        raise InferenceChoiceError(
            "--format jsonl|csv",
            f"cannot tell the source's format: neither the keys ({examples}) nor the first "
            "lines say JSON lines or CSV",
        )
    fmt = next(iter(counts))
    gz = Counter(f.gzip for f in formats.values() if f.format == fmt)
    delimiters = Counter(f.delimiter for f in formats.values() if f.format == fmt)
    return ObjectFormat(fmt, gz.most_common(1)[0][0], delimiters.most_common(1)[0][0])


_FORMAT_NAMES = {"jsonl": "JSON-lines", "csv": "CSV"}


@dataclass
class Column:
    """A column as inferred from the sample, with what the user should know about it."""

    name: str
    type: str
    values: list[Any] = field(default_factory=list, repr=False)  # non-null sample values
    nulls: int = 0
    note: str | None = None
    naive_timestamps: bool = False  # timestamps without an offset: read in UTC

    @property
    def unique(self) -> bool:
        return (
            self.nulls == 0 and len(self.values) > 1 and len(set(self.values)) == len(self.values)
        )


@dataclass
class SampleRecords:
    """The sample's records, parsed in Python: columns in first-seen order."""

    columns: list[Column]
    records: int
    malformed: int
    malformed_examples: list[str]


def parse_jsonl(lines: Iterable[str]) -> SampleRecords:
    """Records of JSON lines as Spark reads them: an object per line, a line holding an array
    is one record per element; anything else is malformed."""
    values: dict[str, list[Any]] = {}
    records = malformed = 0
    examples: list[str] = []
    for raw in lines:
        line = raw.removeprefix(BOM).strip()
        if not line:
            continue
        try:
            parsed = json.loads(line)
        except ValueError:
            parsed = None
        rows = parsed if isinstance(parsed, list) else [parsed]
        if not rows or not all(isinstance(r, dict) for r in rows):
            malformed += 1
            if len(examples) < 3:
                examples.append(line[:120])
            continue
        for row in rows:
            for name in row:
                values.setdefault(str(name), [None] * records)
            for name, column in values.items():
                column.append(row.get(name))
            records += 1
    columns = [_column(name, vals, json_values=True) for name, vals in values.items()]
    return SampleRecords(columns, records, malformed, examples)


def parse_csv(texts: dict[str, str], fmt: CsvFormat) -> SampleRecords:
    """Records of CSV objects (key -> sampled text, header first) as the runtime stages them
    (`csv_records`: RFC 4180, columns by header name, an empty field null): the columns are
    every header's names in first-seen order, as a stream's objects may order their header
    differently; a record whose quotes do not close or whose field count differs from its
    header's is malformed. A header naming no usable columns is refused, naming the object."""
    values: dict[str, list[Any]] = {}
    records = malformed = 0
    examples: list[str] = []
    for key, text in texts.items():
        try:
            rows = CsvRecords(io.StringIO(text, newline=""), fmt)
        except CsvHeaderError as exc:
            raise SourceInferenceError(
                f"{key}: {exc}; leasehold needs a header line naming every column once"
            ) from None
        for name in rows.header:
            values.setdefault(name, [None] * records)
        for row in rows:
            if row.values is None:
                malformed += 1
                if len(examples) < 3:
                    examples.append(row.raw.strip()[:120])
                continue
            record = dict(zip(rows.header, row.values, strict=True))
            for name, column in values.items():
                column.append(record.get(name) or None)
            records += 1
    columns = [_column(name, vals, json_values=False) for name, vals in values.items()]
    return SampleRecords(columns, records, malformed, examples)


def _column(name: str, values: list[Any], *, json_values: bool) -> Column:
    present = [v for v in values if v is not None]
    typ, note, naive = infer_type(present, json_values=json_values)
    hashable = [json.dumps(v, sort_keys=True) if isinstance(v, dict | list) else v for v in present]
    return Column(name, typ, hashable, len(values) - len(present), note, naive)


def infer_type(values: Sequence[Any], *, json_values: bool) -> tuple[str, str | None, bool]:
    """(type, note for the user, whether timestamps lack an offset) of a column's non-null
    sample values. JSON: booleans, integers (long), numbers (double) by their JSON type;
    strings by what they hold. CSV: every value is text and must cast to the type."""
    if not values:
        return "string", "always null in the sample", False
    if json_values and all(not isinstance(v, str) for v in values):
        if all(isinstance(v, bool) for v in values):
            return "boolean", None, False
        if all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return (
                ("long", None, False)
                if all(abs(v) <= LONG_MAX for v in values)
                else (
                    "double",
                    "integers beyond a long",
                    False,
                )
            )
        if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
            return "double", None, False
        if all(isinstance(v, dict | list) for v in values):
            return "string", "nested JSON, kept as its JSON text", False
        return "string", "mixed JSON types, kept as text", False
    if json_values and not all(isinstance(v, str) for v in values):
        return "string", "mixed JSON types, kept as text", False
    texts = [str(v).strip() for v in values]
    # Leading zeros (`007`, zip codes, account numbers) mean an identifier: a number would
    # lose them.
    if not json_values and not any(_LEADING_ZERO.fullmatch(t) for t in texts):
        lowered = {t.lower() for t in texts}
        if lowered <= {"true", "false"}:
            return "boolean", None, False
        if all(_LONG.fullmatch(t) and abs(int(t)) <= LONG_MAX for t in texts):
            return "long", None, False
        if all(_DOUBLE.fullmatch(t) for t in texts):
            return "double", None, False
    if all(is_timestamp(t) or is_date(t) for t in texts) and any(is_timestamp(t) for t in texts):
        naive = any(is_timestamp(t) and not _OFFSET.search(t) for t in texts)
        return "timestamp", None, naive
    if all(is_date(t) for t in texts):
        return "date", None, False
    return "string", None, False


def is_timestamp(text: str) -> bool:
    """An ISO-8601 date and time Spark's cast reads (a real calendar date and time)."""
    match = _TIMESTAMP.fullmatch(text)
    if not match:
        return False
    y, mo, d, h, mi, s = (int(g) if g else 0 for g in match.groups()[:6])
    try:
        datetime(y, mo, d, h, mi, s)
    except ValueError:
        return False
    return True


def is_date(text: str) -> bool:
    match = _DATE.fullmatch(text)
    if not match:
        return False
    try:
        date(*(int(g) for g in match.groups()))
    except ValueError:
        return False
    return True


def normalized(name: str) -> str:
    """A column name compared with the preferred names: camelCase and separators as snake."""
    snake = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", name)
    return re.sub(r"[^a-z0-9@]+", "_", snake.lower()).strip("_")


def choose_event_time(columns: Sequence[Column], wanted: str | None) -> tuple[Column, str]:
    """The column whose time decides a record's table partition, and why it was chosen.

    `wanted` (`--event-time`) wins when it can be read as a time. Otherwise the timestamp
    columns (date columns when there are none) are the candidates: one is chosen; of several,
    the one named first in `EVENT_TIME_NAMES`; with none of those names it is ambiguous."""
    by_name = {c.name: c for c in columns}
    if wanted is not None:
        column = by_name.get(wanted)
        if column is None:
            raise InferenceChoiceError(
                "--event-time COL", f"--event-time {wanted!r} is not a column: {list(by_name)}"
            )
        if column.type not in ("timestamp", "date", "string"):
            raise InferenceChoiceError(
                "--event-time COL",
                f"--event-time {wanted!r} holds {column.type} values, not ISO-8601 timestamps",
            )
        return column, "--event-time"
    timestamps = [c for c in columns if c.type == "timestamp"] or [
        c for c in columns if c.type == "date"
    ]
    if len(timestamps) == 1:
        return timestamps[0], "the only timestamp column"
    if not timestamps:
        numeric = [c.name for c in columns if c.type in ("long", "double") and _timelike(c.name)]
        hint = (
            f" ({', '.join(numeric)} hold numbers: leasehold reads ISO-8601 timestamps, not "
            "epoch numbers)"
            if numeric
            else ""
        )
        raise InferenceChoiceError(
            "--event-time COL",
            f"no column holds timestamps in the sample{hint}: leasehold partitions a table by "
            f"each record's event time; columns: {', '.join(c.name for c in columns)}",
        )
    ranked = sorted(
        (EVENT_TIME_NAMES.index(normalized(c.name)), c.name)
        for c in timestamps
        if normalized(c.name) in EVENT_TIME_NAMES
    )
    if ranked:
        others = [c.name for c in timestamps if c.name != ranked[0][1]]
        return by_name[ranked[0][1]], f"its name (other timestamp columns: {', '.join(others)})"
    raise InferenceChoiceError(
        "--event-time COL",
        f"several columns hold timestamps ({', '.join(c.name for c in timestamps)}) and none "
        "is named like an event time",
    )


def _timelike(name: str) -> bool:
    n = normalized(name)
    return n in EVENT_TIME_NAMES or n.endswith(("_at", "_time", "_ts", "timestamp"))


def id_like(name: str) -> bool:
    n = normalized(name)
    return n in RECORD_ID_NAMES or n.endswith(("_id", "_uuid", "_key")) or n == "key"


def choose_record_id(
    columns: Sequence[Column], wanted: str | None
) -> tuple[Column | None, list[str]]:
    """The record id (checked for duplicates per table partition) and notes for the user.

    `--record-id COL` names it, `--record-id none` declines one. Otherwise the candidates are
    string or long columns with an id-like name whose sample values are all present and
    distinct: one is chosen; of several, the one named in `RECORD_ID_NAMES`; none is no
    record id (a note says what that costs); several with no such name are ambiguous."""
    by_name = {c.name: c for c in columns}
    if wanted is not None:
        if wanted.lower() == "none":
            return None, ["no record id (--record-id none): duplicates are not checked"]
        column = by_name.get(wanted)
        if column is None:
            raise InferenceChoiceError(
                "--record-id COL|none", f"--record-id {wanted!r} is not a column: {list(by_name)}"
            )
        notes = [] if column.unique else [f"{wanted} repeats or is missing in the sample"]
        return column, notes
    named = [c for c in columns if c.type in ("string", "long") and id_like(c.name)]
    candidates = [c for c in named if c.unique]
    notes = [f"{c.name} is not unique in the sample" for c in named if not c.unique]
    if len(candidates) == 1:
        return candidates[0], notes
    if not candidates:
        notes.append(
            "no record id: no id-like column is unique in the sample, so duplicates are not "
            "checked (--record-id COL names one)"
        )
        return None, notes
    preferred = [c for c in candidates if normalized(c.name) in RECORD_ID_NAMES]
    if preferred:
        best = min(preferred, key=lambda c: RECORD_ID_NAMES.index(normalized(c.name)))
        others = ", ".join(c.name for c in candidates if c is not best)
        return best, [*notes, f"record id {best.name} by its name (also unique: {others})"]
    raise InferenceChoiceError(
        "--record-id COL|none",
        f"several id-like columns are unique in the sample "
        f"({', '.join(c.name for c in candidates)})",
    )


def stream_name(source: str) -> str:
    """A stream name from the source's last path segment: letters, digits and `_` only (as
    `streams.yaml` requires), accents folded, not starting with a digit."""
    last = source.rstrip("/").rpartition("/")[2]
    folded = unicodedata.normalize("NFKD", last).encode("ascii", "ignore").decode()
    name = re.sub(r"[^A-Za-z0-9_]+", "_", folded).strip("_").lower()
    if not name:
        return "stream"
    return f"s_{name}" if name[0].isdigit() else name[:63]
