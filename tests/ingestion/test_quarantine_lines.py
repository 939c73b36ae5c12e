"""`line_numbers` finds bad lines by `str.find` over blocks: it must number them exactly as a
plain pass over the object's lines does, whatever the text, line endings, blocks and repeats."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.ingestion import quarantine
from resources.ingestion.quarantine import line_numbers
from resources.ingestion.source_files import open_lines


def numbered_line_by_line(path: Path, raws: list[str | None]) -> list[int | None]:
    """The reference: every line read in turn, the k-th line equal to a text gets its k-th
    occurrence (U+FFFD runs compared as one)."""
    wanted: dict[str, list[int]] = {}
    for i, raw in enumerate(raws):
        if raw is not None:
            wanted.setdefault(quarantine._normalized(raw), []).append(i)
    numbers: list[int | None] = [None] * len(raws)
    with open_lines(path) as lines:
        for number, line in enumerate(lines, start=1):
            slots = wanted.get(quarantine._normalized(line.rstrip("\n")))
            if slots:
                numbers[slots.pop(0)] = number
    return numbers


LINES = st.lists(
    st.sampled_from(["a", "ab", "b a", '{"x": 1', "\ufffd", "x\ufffd\ufffdy", "a a", ""]),
    min_size=0,
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(
    lines=LINES,
    ending=st.sampled_from(["\n", "\r\n", "\r"]),
    final_newline=st.booleans(),
    asked=st.lists(
        st.one_of(st.none(), st.sampled_from(["a", "ab", "b a", '{"x": 1', "\ufffd", "zz"])),
        max_size=12,
    ),
    block_chars=st.sampled_from([1, 2, 5, 64, 4 << 20]),
    max_find_texts=st.sampled_from([0, 1, 32]),
    gz=st.booleans(),
)
def test_bad_lines_are_numbered_as_a_pass_over_every_line_numbers_them(
    tmp_path_factory: pytest.TempPathFactory,
    lines: list[str],
    ending: str,
    final_newline: bool,
    asked: list[str | None],
    block_chars: int,
    max_find_texts: int,
    gz: bool,
) -> None:
    directory = tmp_path_factory.mktemp("object")
    data = (ending.join(lines) + (ending if final_newline and lines else "")).encode()
    path = directory / ("object.jsonl.gz" if gz else "object.jsonl")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(quarantine, "BLOCK_CHARS", block_chars)
        patch.setattr(quarantine, "MAX_FIND_TEXTS", max_find_texts)
        got = line_numbers(path, asked)
    assert got == numbered_line_by_line(path, asked)


def test_a_line_that_only_contains_a_bad_text_is_not_it(tmp_path: Path) -> None:
    path = tmp_path / "object.jsonl"
    path.write_text('{"x": 12}\n{"x": 1\nx{"x": 1\n{"x": 1\n')
    assert line_numbers(path, ['{"x": 1', '{"x": 1', '{"x": 1']) == [2, 4, None]
