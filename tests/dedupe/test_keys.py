"""The record id hashes: `MIX128` equal to its definition written out id by id, whatever the
array's layout; distinct ids distinct; the older `SIPHASH` still computed as indexes built with
it expect; an index remembers its hash."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.dedupe.key_index import KeyedRows, KeyIndex, resolve, row_ids
from resources.dedupe.keys import MIX128, SIPHASH, UnknownHashError, hash_ids

M = (1 << 64) - 1


def fmix(h: int) -> int:
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & M
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & M
    return h ^ (h >> 33)


def mix128(text: str) -> tuple[int, int]:
    """MIX128 as keys.py's docstring defines it, one id at a time."""
    data = text.encode()
    n = len(data)
    a = ((n * 0xD6E8FEB86659FD93) & M) ^ 0x6C65617365686F6C
    b = ((n * 0x9E3779B97F4A7C15) & M) ^ 0x64206B6579732033
    for j in range(0, n, 8):
        w = int.from_bytes(data[j : j + 8].ljust(8, b"\0"), "little")
        a = fmix(((w * 0x9E3779B97F4A7C15) & M) ^ a)
        b = fmix(((w * 0xA0761D6478BD642F) & M) ^ b)
    a = fmix(a ^ n)
    return a, fmix(b ^ a)


ids = st.lists(st.one_of(st.none(), st.text(max_size=40)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(ids, st.integers(0, 5), st.booleans())
def test_mix128_is_its_definition_for_any_layout(
    values: list[str | None], cut: int, large: bool
) -> None:
    kind = pa.large_string() if large else pa.string()
    whole = pa.array(["pad"] * cut + values, kind).slice(cut)  # an offset into the buffers
    chunked = pa.chunked_array([whole.slice(0, len(values) // 2), whole.slice(len(values) // 2)])
    for array in (whole, chunked):
        keys = hash_ids(array, MIX128)
        assert keys.present.tolist() == [v is not None for v in values]
        for i, v in enumerate(values):
            want = mix128(v) if v is not None else (0, 0)
            assert (int(keys.h1[i]), int(keys.h2[i])) == want, (i, v)


def test_mix128_past_a_block_and_at_the_buffer_end() -> None:
    values = [("x" * (i % 23)) + str(i) for i in range(70_000)]  # two blocks and a part
    keys = hash_ids(pa.array(values), MIX128)
    for i in [0, 1, 7, 32_767, 32_768, 65_535, 65_536, 69_998, 69_999]:
        assert (int(keys.h1[i]), int(keys.h2[i])) == mix128(values[i])


def test_distinct_ids_have_distinct_hashes() -> None:
    # Structured ids, where a weak mix would collide: counters, padded counters, a trailing
    # NUL, one byte apart, the empty id.
    values = [f"new-{i}" for i in range(300_000)] + [f"{i:020d}" for i in range(300_000)]
    values += ["", "\0", "\0\0", "a", "a\0", "a" * 8, "a" * 8 + "\0", "a" * 9, "é", "e"]
    keys = hash_ids(pa.array(values), MIX128)
    assert len(set(zip(keys.h1.tolist(), keys.h2.tolist(), strict=True))) == len(values)
    assert len(np.unique(keys.h1)) == len(values)


def test_an_id_is_hashed_as_its_text() -> None:
    numbers = hash_ids(pa.array([7, None, 123456789012], pa.int64()), MIX128)
    texts = hash_ids(pa.array(["7", None, "123456789012"]), MIX128)
    assert numbers.h1.tolist() == texts.h1.tolist() and numbers.h2.tolist() == texts.h2.tolist()


def test_siphash_keeps_the_values_indexes_of_earlier_versions_hold() -> None:
    keys = hash_ids(pa.array(["a", "order-42", None]), SIPHASH)
    # What the version before MIX128 computed for these ids (and wrote into its indexes).
    assert keys.h1.tolist() == [6284782777804282032, 13924777187907516691, 0]
    assert keys.h2.tolist() == [5380136007760163080, 16225200193605711071, 0]
    assert hash_ids(pa.array(["a"]), MIX128).h1[0] != keys.h1[0]


def test_an_unknown_hash_is_refused_by_name() -> None:
    with pytest.raises(UnknownHashError, match="nohash"):
        hash_ids(pa.array(["a"]), "nohash")


def test_an_index_keeps_its_hash_through_a_resolution_and_a_file() -> None:
    old = KeyIndex.empty(None, SIPHASH)
    rows = KeyedRows.of(hash_ids(pa.array(["a", "b", "a"]), SIPHASH), row_ids(1, 3), None)
    index = resolve(old, rows, 1, latest=False).index
    assert index.hash_name == SIPHASH
    again = KeyIndex.from_table(index.to_table(), None)
    assert again.hash_name == SIPHASH and len(again) == 2
    assert KeyIndex.empty(None).hash_name == MIX128
