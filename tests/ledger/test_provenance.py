"""A small object's sources in the ledger: stored short as JSON, compressed past a bound, not
kept at all past another (so a ledger item and a commit stay within DynamoDB's bounds), read
back exactly; the rows of one source found by position."""

from __future__ import annotations

import pytest

from resources.ledger.provenance import (
    COMPRESSED,
    MAX_SOURCES_BYTES,
    SourcesError,
    positions_of,
    sources_json,
    sources_of,
)


def test_sources_round_trip_short_and_compressed() -> None:
    short = (("a.jsonl", 3), ("b ü\n.jsonl", 0), ('c"d', 2))
    assert sources_of(sources_json(short)) == short
    assert not sources_json(short).startswith(COMPRESSED)
    many = tuple(
        (f"2026/01/02/batch {i // 100:02d}/part {i:05d}.jsonl.gz", i % 9) for i in range(1000)
    )
    text = sources_json(many)
    assert text.startswith(COMPRESSED) and len(text) < 8 * 1024
    assert sources_of(text) == many
    assert sources_json(()) == "" and sources_of("") == () and sources_of(None) == ()


def test_sources_too_large_are_not_kept(caplog: pytest.LogCaptureFixture) -> None:
    huge = tuple((f"prefix/{i:08d}/{'x' * 200}-{i * 7919 % 99991}", 1) for i in range(20_000))
    assert sources_json(huge) == ""
    assert f"over {MAX_SOURCES_BYTES}: not kept" in caplog.text


@pytest.mark.parametrize("text", ["[1, 2", '[["a", -1]]', "z:not base64!", '{"a": 1}'])
def test_text_not_written_by_sources_json_is_refused(text: str) -> None:
    with pytest.raises(SourcesError):
        sources_of(text)


def test_positions_of_a_source() -> None:
    runs = (("a", 2), ("b", 3), ("a", 0), ("c", 1), ("a", 4))
    assert positions_of(runs, "a") == [(0, 2), (6, 10)]
    assert positions_of(runs, "b") == [(2, 5)] and positions_of(runs, "x") == []
