"""Local source objects: whether a whole object can be read at all (`inspect_source`, for
`leasehold init`), the digits sampled objects are named by (`INPUT_DIGITS`), and cutting a large
object read in sequence into chunks (`ChunkReader`, in a Spark task). Plain Python: no Spark.
"""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from resources.ingestion.csv_records import (
    CsvFormat,
    CsvRecord,
    is_blank,
    open_text,
    split_records,
    strip_bom,
)

# Digits of a staged input's name, the batch index of its object: Spark's rows carry the name
# (`_metadata.file_name`), so each row maps back to its source key whatever the key holds.
INPUT_DIGITS = 7
BOM = b"\xef\xbb\xbf"


def inspect_source(path: Path) -> tuple[str | None, int]:
    """(why the whole object can't be read or None, bytes of text it holds). Gzip is verified
    end to end here — a corrupt member would otherwise fail the Spark job for every object in
    the batch — and its size counted on the way."""
    try:
        with path.open("rb") as f:
            head = f.read(2)
        size = path.stat().st_size
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}", 0
    if path.name.endswith(".gz"):
        if head != b"\x1f\x8b":
            return "named .gz but is not gzip data", 0
        size = 0
        try:
            with gzip.open(path, "rb") as f:
                while block := f.read(1 << 20):
                    size += len(block)
        except (OSError, EOFError, zlib.error) as exc:
            return f"corrupt gzip: {exc}", 0
    return None, size


@dataclass(frozen=True)
class ChunkCut:
    """One chunk of a large object, cut at a line boundary (a CSV record's) into a file of its
    own."""

    path: Path
    first_line: int
    """The object's line number of the chunk's first record line (1-based)."""
    offset: int
    """Where the next chunk starts: a byte offset into the object, or — gzip cannot seek —
    into its decompressed text (resuming decompresses up to it again)."""
    line: int
    """The object's line number the next chunk starts at."""
    last: bool
    header_lines: int = 0
    """Lines of the CSV header put before the chunk's own lines in `path`: the file's line n
    is the object's line `first_line - header_lines + n - 1`."""


class ChunkReader:
    """Cuts consecutive chunks of one object, keeping it open between them: a gzip object is
    decompressed once per attempt (up to the resume offset, then chunk after chunk), not again
    from its start for every chunk.

    JSON lines are cut at `\n` (and `\r\n`); a file ending lines with `\r` alone is cut by
    bytes only at `\n`. CSV (`csv` given) is cut where `csv_records` ends a record — never at
    a line break inside quotes — its lines ending at `\n`, `\r\n` or `\r` as the CSV staging
    counts them; a chunk after the first gets the object's header record again, so the reader
    handles every chunk alike."""

    def __init__(self, source: Path, offset: int, line: int, csv: CsvFormat | None = None) -> None:
        gz = source.name.endswith(".gz")
        self._file = gzip.open(source, "rb") if gz else source.open("rb")
        self._header, self._header_lines = b"", 0
        self._records: Iterator[CsvRecord] | None = None
        self._next: CsvRecord | None = None
        self._bom = b""  # the object's byte-order mark, left out of its first record's split
        self._file.seek(offset)
        if csv is not None:
            if csv.header:
                self._header, self._header_lines = _csv_header(source, csv)
            text: Iterator[str] = io.TextIOWrapper(
                self._file, encoding="utf-8", errors="surrogateescape", newline=""
            )
            if offset == 0:
                text, bom = strip_bom(text)
                self._bom = BOM if bom else b""
            self._records = split_records(text, csv)
            self._next = next(self._records, None)
        self.offset, self.line = offset, line

    def next(self, max_bytes: int, target: Path) -> ChunkCut:
        """The lines (CSV: records) from where the last chunk ended up to `max_bytes` and on to
        the end of the line (record) that crosses it, into `target`."""
        target.parent.mkdir(parents=True, exist_ok=True)
        if self._records is not None:
            return self._next_records(max_bytes, target)
        block = self._file.read(max_bytes)
        if block and not block.endswith(b"\n"):
            block += self._file.readline()
        with target.open("wb") as out:
            out.write(block)
        first = self.line
        self.offset += len(block)
        self.line += block.count(b"\n")
        last = not self._file.peek(1)
        return ChunkCut(target, first, self.offset, self.line, last)

    def _next_records(self, max_bytes: int, target: Path) -> ChunkCut:
        assert self._records is not None
        first = self.line
        header = self._header_lines if self._header and self.offset > 0 else 0
        written = 0
        with target.open("wb") as out:
            if header:
                out.write(self._header)
            while self._next is not None and written < max_bytes:
                data = self._bom + "".join(self._next.lines).encode("utf-8", "surrogateescape")
                self._bom = b""
                out.write(data)
                written += len(data)
                self.offset += len(data)
                self.line += len(self._next.lines)
                self._next = next(self._records, None)
        return ChunkCut(target, first, self.offset, self.line, self._next is None, header)

    def close(self) -> None:
        self._file.close()


def _csv_header(source: Path, fmt: CsvFormat) -> tuple[bytes, int]:
    """The object's header record as written (blank lines before it included, a byte-order
    mark left out), and its lines: what a chunk after the first starts with."""
    with open_text(source) as text:
        lines: list[str] = []
        for record in split_records(strip_bom(text)[0], fmt):
            lines += record.lines
            if not is_blank(record):
                break
    return "".join(lines).encode("utf-8", "surrogateescape"), len(lines)


def cut_chunk(
    source: Path,
    offset: int,
    line: int,
    max_bytes: int,
    target: Path,
    csv: CsvFormat | None = None,
) -> ChunkCut:
    """One chunk of `source` from `offset` (the start of line `line`): `ChunkReader.next`."""
    reader = ChunkReader(source, offset, line, csv)
    try:
        return reader.next(max_bytes, target)
    finally:
        reader.close()
