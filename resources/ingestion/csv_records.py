"""CSV as real tools write it (RFC 4180: Python's `csv` module, Excel, pandas), split into
records here in Python; `record_parser` types each record's fields by the stream's schema.

Quoted delimiters, doubled quotes (or `csv.escape`), quoted line breaks (\\n, \\r\\n or \\r inside
quotes stay in the value) and a UTF-8 byte-order mark are read as those tools write them; a line
ends at \\n, \\r\\n or \\r. Each CSV record becomes one JSON object: its header's column names
(matched by name, so objects may order their columns differently) -> the field's text, an empty
field null; with the object's line number of the record's first line, the record's text as
written (without its final line break) and, for a malformed record only, why. Quarantine
stores the record's own text and exact line number, whatever lines it spans.

A record is malformed when its quotes do not close (before the end of the object, or within
`MAX_RECORD_CHARS` once it spans lines), when it holds invalid UTF-8, or when its field count
differs from the header's. A record whose quotes do not close is its FIRST line alone, and
reading resumes at the next line: every line is in exactly one record, the records after a
stray quote are still read, and memory stays bounded. Blank lines are skipped.

A header that names no usable columns (a blank or repeated name, one starting with the
reserved `__leasehold`, unclosed quotes, invalid UTF-8) makes the whole object unreadable
(`CsvHeaderError`): like a corrupt gzip, it is reported in its unit's `failed`, the unit closed
with backoff and at last dead-lettered, to be fixed and re-driven — no record of it could be
mapped to a column.

The same record splitting cuts a large object's chunks (`source_files.ChunkReader`) at record
boundaries, never inside a quoted line break, and `leasehold init` infers from it. Plain
Python: no Spark here.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import IO, Any, NamedTuple

from resources.errors import LeaseholdError
from resources.streams import RESERVED_PREFIX, StreamConfig

MAX_RECORD_CHARS = 16 << 20
"""A record spanning lines whose quotes are still open after this many characters is taken as
an unclosed quote: what one record may hold in memory, and how far a chunk's cut may look."""

UNCLOSED = "unclosed quote"
BOM = "\ufeff"

# The csv module's own limit per field is 128 KiB (a process-wide setting); records are bounded
# by MAX_RECORD_CHARS instead, and a long single-line field is data like any other.
csv.field_size_limit(max(csv.field_size_limit(), 2**31 - 1))


class CsvHeaderError(LeaseholdError):
    """The object's header names no usable set of columns: the object cannot be read."""


@dataclass(frozen=True)
class CsvFormat:
    """How a stream's CSV objects are written (`streams.yaml` `csv:`)."""

    delimiter: str = ","
    quote: str = '"'
    escape: str | None = None
    """None: a quote inside a quoted field is doubled (RFC 4180); doubled quotes are read
    either way."""
    header: bool = True

    @classmethod
    def of(cls, config: StreamConfig) -> CsvFormat:
        return cls(config.csv_delimiter, config.csv_quote, config.csv_escape, config.csv_header)

    def reader_options(self) -> dict[str, Any]:
        """Python's csv dialect: a quote is special only at a field's start (elsewhere it is
        text, as Excel and pandas read it), and a character after a closing quote joins the
        field (not strict)."""
        escape = None if self.escape in (None, self.quote) else self.escape
        return {
            "delimiter": self.delimiter,
            "quotechar": self.quote,
            "escapechar": escape,
            "doublequote": True,
            "skipinitialspace": False,
            "strict": False,
        }


class CsvRecord(NamedTuple):
    """One record's lines (each with its line break), and its fields, or None with the reason
    it is malformed (then `lines` is its first line only)."""

    lines: list[str]
    fields: list[str] | None
    problem: str | None = None


class _TooLong(Exception):
    pass


class _Lines:
    """The csv reader's input: the object's lines, those put back first; which lines the
    current record took, and whether it ran into the end of the object."""

    __slots__ = ("source", "back", "taken", "chars", "ended", "limit")

    def __init__(self, source: Iterator[str], limit: int) -> None:
        self.source = source
        self.back: deque[str] = deque()
        self.taken: list[str] = []
        self.chars = 0
        self.ended = False
        self.limit = limit

    def __iter__(self) -> _Lines:
        return self

    def __next__(self) -> str:
        if self.back:
            line = self.back.popleft()
        else:
            following = next(self.source, None)
            if following is None:
                self.ended = True
                raise StopIteration
            line = following
        self.taken.append(line)
        self.chars += len(line)
        if self.chars > self.limit and len(self.taken) > 1:
            raise _TooLong
        return line


def split_records(
    lines: Iterable[str], fmt: CsvFormat, limit: int | None = None
) -> Iterator[CsvRecord]:
    """The records of `lines` (each line with its line break, as a file opened with
    `newline=""` gives them), blank ones included, every line in exactly one record. A record
    whose quotes do not close (before the end, or within `limit` characters once it spans
    lines) is its first line alone, malformed; the lines after it are read again as records.
    The csv module reads one line at a time and never ahead, so the lines a record took are
    exactly those pulled while it was parsed. `limit`: `MAX_RECORD_CHARS` by default."""
    limit = limit or MAX_RECORD_CHARS
    feed = _Lines(iter(lines), limit)
    reader = csv.reader(feed, **fmt.reader_options())
    quote, escape, delimiter = fmt.quote, fmt.escape or fmt.quote, fmt.delimiter
    while True:
        feed.taken, feed.chars, feed.ended = [], 0, False
        # A line holding no quote (nor escape) at a record's start is that record, its fields
        # split at the delimiter: what the csv module makes of it, without it (most lines).
        line = feed.back.popleft() if feed.back else next(feed.source, None)
        if line is None:
            return
        if quote not in line and escape not in line:
            text = line.rstrip("\r\n")  # one line, one line break
            yield CsvRecord([line], text.split(delimiter) if text else [])
            continue
        feed.back.appendleft(line)
        problem: str | None
        try:
            fields = next(reader)
            problem = UNCLOSED if feed.ended else None
        except StopIteration:
            if not feed.taken:
                return
            problem = UNCLOSED
        except _TooLong:
            problem = f"{UNCLOSED} (a record spanning lines holds at most {limit} characters)"
        except csv.Error as exc:
            problem = f"CSV: {exc}"
        taken = feed.taken
        if problem is None:
            yield CsvRecord(taken, fields)
            continue
        feed.back.extendleft(reversed(taken[1:]))
        yield CsvRecord(taken[:1], None, problem)


def strip_bom(lines: Iterable[str]) -> tuple[Iterator[str], bool]:
    """The lines of an object from its start, a UTF-8 byte-order mark left out, and whether
    there was one. Left out before the split: a mark before a quote would make the quote text."""
    source = iter(lines)
    first = next(source, None)
    if first is None:
        return source, False
    return chain([first.removeprefix(BOM)], source), first.startswith(BOM)


def complete_records(text: str, fmt: CsvFormat) -> str:
    """The head of `text` up to the first record whose quotes are still open at its end: of
    an object's first bytes cut at a line end, what holds whole records only (the cut may fall
    inside a quoted line break)."""
    kept = 0
    for record in split_records(io.StringIO(text, newline=""), fmt):
        if record.problem == UNCLOSED:
            break
        kept += sum(map(len, record.lines))
    return text[:kept]


def is_blank(record: CsvRecord) -> bool:
    return len(record.lines) == 1 and not record.lines[0].strip()


def without_line_break(text: str) -> str:
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith(("\n", "\r")):
        return text[:-1]
    return text


def valid_utf8(text: str) -> str:
    """`text` with each undecodable byte sequence (kept as surrogate escapes) as U+FFFD."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def _is_valid(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class CsvRow(NamedTuple):
    """One CSV record: where it starts, its text as written, and its fields (or why it is
    malformed)."""

    line: int
    """The object's line number of the record's first line."""
    raw: str
    """The record as written (its lines, without the final line break), valid UTF-8."""
    values: list[str] | None
    """Its fields in the header's order (None: malformed)."""
    error: str | None


class CsvRecords:
    """An object's records under its header: `header` is read on creation (`CsvHeaderError`
    when it is unusable; without a header, the `columns` given), then iterating gives each
    non-blank record as a `CsvRow`. The first of `lines` is line `first_line`."""

    def __init__(
        self,
        lines: Iterable[str],
        fmt: CsvFormat,
        columns: list[str] | None = None,
        first_line: int = 1,
    ) -> None:
        self._records = split_records(strip_bom(lines)[0], fmt)
        self.next_line = first_line
        self.what = "header"
        if fmt.header:
            self.header = self._read_header()
        else:
            self.header, self.what = list(columns or []), "schema"

    def _read_header(self) -> list[str]:
        for record in self._records:
            line = self.next_line
            self.next_line += len(record.lines)
            if is_blank(record):
                continue
            if record.fields is None:
                raise CsvHeaderError(f"the CSV header (line {line}) has an {UNCLOSED}")
            return header_names(record.fields, line)
        return []

    def __iter__(self) -> Iterator[CsvRow]:
        width = len(self.header)
        what = self.what
        for lines, fields, problem in self._records:
            line = self.next_line
            self.next_line += len(lines)
            if len(lines) == 1:
                raw = lines[0].rstrip("\r\n")
                if not raw.strip():
                    continue
            else:
                raw = without_line_break("".join(lines))
            if fields is None:
                error = problem
            elif not _is_valid(raw):
                error = "invalid UTF-8"
            elif len(fields) != width:
                error = f"CSV record has {len(fields)} fields, the {what} has {width}"
            else:
                yield CsvRow(line, raw, fields, None)
                continue
            yield CsvRow(line, valid_utf8(raw), None, error)


def header_names(fields: list[str], line: int = 1) -> list[str]:
    """A header record's column names, stripped; `CsvHeaderError` unless each is a distinct,
    non-blank name leasehold may use."""
    names = [f.strip() for f in fields]
    if not all(_is_valid(n) for n in names):
        raise CsvHeaderError(f"the CSV header (line {line}) is not valid UTF-8")
    blank = [i + 1 for i, n in enumerate(names) if not n]
    if blank:
        shown = ", ".join(map(str, blank))
        raise CsvHeaderError(f"the CSV header (line {line}) has unnamed columns (field {shown})")
    twice = sorted(n for n, count in Counter(names).items() if count > 1)
    if twice:
        raise CsvHeaderError(f"the CSV header (line {line}) names {twice} more than once")
    reserved = [n for n in names if n.startswith(RESERVED_PREFIX)]
    if reserved:
        raise CsvHeaderError(
            f"the CSV header (line {line}) names {reserved}: names starting with "
            f"{RESERVED_PREFIX} are reserved"
        )
    return names


def open_text(path: Path) -> IO[str]:
    """The object's text, gunzipped when named `.gz`, lines split at \\n, \\r\\n and \\r and
    given with their line breaks as written; an invalid UTF-8 byte kept as a surrogate escape,
    so that encoding a line back gives its bytes exactly."""
    binary = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")
    return io.TextIOWrapper(binary, encoding="utf-8", errors="surrogateescape", newline="")
