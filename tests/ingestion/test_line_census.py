"""Cutting a large object into byte ranges at line ends and numbering their first lines, as
the census tasks do (executor side, no Spark): the ranges cover the object exactly once, each
starts at a line's start, and each first line is the object's number for it."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.ingestion.line_census import CensusJob, census, exact_ranges
from resources.ingestion.split_plan import nominal_cuts
from resources.ingestion.split_task import StoreAddress


@pytest.mark.parametrize(
    ("text", "chunk", "offset", "line"),
    [
        (b"".join(b"line %03d\n" % i for i in range(1, 41)), 50, 0, 1),  # 9 bytes a line
        (b"".join(b"line %03d\n" % i for i in range(1, 41)), 50, 90, 11),  # resumed
        (b"a\n" + b"x" * 300 + b"\nb\nc", 64, 0, 1),  # a line longer than a range; no last \n
        (b"one line without an end", 5, 0, 1),
        (b"\n\n\nrecord\n", 1, 0, 1),  # empty lines: every cut on a line end
    ],
)
def test_ranges_cover_the_object_at_line_starts_with_their_line_numbers(
    tmp_path: Path, text: bytes, chunk: int, offset: int, line: int
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "big.jsonl").write_bytes(text)
    stores = StoreAddress(f"file://{tmp_path / 'src'}", "file:///unused", "file:///unused")
    cuts = nominal_cuts(offset, len(text), chunk)
    job = CensusJob(stores, "big.jsonl", tuple(cuts))
    ranges = exact_ranges([census(job, k) for k in range(len(cuts) - 1)], len(text), line)

    assert b"".join(text[s:e] for s, e, _, _ in ranges) == text[offset:]
    lines_before = text[:offset].count(b"\n") + 1
    assert line == lines_before
    for start, end, first, following in ranges:
        assert start == 0 or text[start - 1 : start] == b"\n"
        assert first == text[:start].count(b"\n") + 1
        assert following == text[:end].count(b"\n") + 1
        assert end - start > 0
