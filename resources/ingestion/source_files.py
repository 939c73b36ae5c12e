"""Local source objects as the reader meets them, before and beside Spark.

Whether a whole object can be read at all (`inspect_source`), its lines as Spark's text reader
sees them (`open_lines`), and staging it for Spark under a name its rows can be mapped back by
(`stage_input`, `INPUT_DIGITS`). Plain Python: no Spark here.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

# Digits of a staged input's name, the batch index of its object: Spark's rows carry the name
# (`_metadata.file_name`), so each row maps back to its source key whatever the key holds.
INPUT_DIGITS = 7


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


def open_lines(path: Path) -> IO[str]:
    """The object's lines as Spark's text reader sees them: \\n, \\r\\n and \\r all end a line,
    invalid UTF-8 becomes U+FFFD."""
    binary: IO[bytes] = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline=None)


def stage_input(path: Path, link: Path, skip_header: bool) -> None:
    """Give Spark a name we can map back (keys may hold any character); no copy if possible.
    A CSV header is dropped here, where "first line of the object" still means something."""
    if skip_header:
        with open_lines(path) as lines, link.open("w", encoding="utf-8") as out:
            lines.readline()
            shutil.copyfileobj(lines, out)
        return
    try:
        os.link(path, link)
    except OSError:
        try:
            os.symlink(path.resolve(), link)
        except OSError:
            shutil.copyfile(path, link)


@dataclass(frozen=True)
class ChunkCut:
    """One chunk of a large object, cut at a line boundary into a file of its own."""

    path: Path
    first_line: int
    """The object's line number of the chunk's first record line (1-based)."""
    offset: int
    """Where the next chunk starts: a byte offset into the object, or — gzip cannot seek —
    into its decompressed text (resuming decompresses up to it again)."""
    line: int
    """The object's line number the next chunk starts at."""
    last: bool


class ChunkReader:
    """Cuts consecutive chunks of one object, keeping it open between them: a gzip object is
    decompressed once per attempt (up to the resume offset, then chunk after chunk), not again
    from its start for every chunk."""

    def __init__(self, source: Path, offset: int, line: int, header: bool) -> None:
        gz = source.name.endswith(".gz")
        self._file = gzip.open(source, "rb") if gz else source.open("rb")
        # A CSV chunk after the first gets the object's header line again, so the reader
        # handles every chunk alike.
        self._header = self._file.readline() if header else b""
        self._file.seek(offset)
        self.offset, self.line = offset, line

    def next(self, max_bytes: int, target: Path) -> ChunkCut:
        """The lines from where the last chunk ended up to `max_bytes` and on to the end of
        the line that crosses it, into `target`. Lines end at `\n` (and `\r\n`); a file ending
        lines with `\r` alone is cut by bytes only at `\n`."""
        target.parent.mkdir(parents=True, exist_ok=True)
        block = self._file.read(max_bytes)
        if block and not block.endswith(b"\n"):
            block += self._file.readline()
        with target.open("wb") as out:
            if self._header and self.line > 1:
                out.write(self._header)
            out.write(block)
        first = self.line
        self.offset += len(block)
        self.line += block.count(b"\n")
        last = not self._file.peek(1)
        return ChunkCut(target, first, self.offset, self.line, last)

    def close(self) -> None:
        self._file.close()


def cut_chunk(
    source: Path, offset: int, line: int, max_bytes: int, target: Path, header: bool
) -> ChunkCut:
    """One chunk of `source` from `offset` (the start of line `line`): `ChunkReader.next`."""
    reader = ChunkReader(source, offset, line, header)
    try:
        return reader.next(max_bytes, target)
    finally:
        reader.close()
