"""The key index's resolution against a brute-force account: whatever the batches, the index
holds each key's winner under the policy and the rows that lost are exactly the others."""

from __future__ import annotations

import json
import random

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from resources.dedupe import key_index
from resources.dedupe.key_index import (
    KeyedRows,
    KeyIndex,
    KeyIndexError,
    one_per_key,
    resolve,
    row_ids,
    winners_of,
)
from resources.dedupe.keys import hash_ids
from resources.dedupe.served import (
    INDEX_NAME,
    LEGACY_INDEX_NAME,
    ServedState,
    ServedStateError,
)
from resources.dedupe.word_sort import stable_argsort, stable_argsort_small

Record = tuple[str | None, int | None]  # (id, order value)


@pytest.fixture(params=["one thread", "ranges"])
def resolution_threads(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each resolution test in one thread and as large inputs are resolved (ranges of h1 in
    threads of their own), which must agree."""
    if request.param == "ranges":
        monkeypatch.setattr(key_index, "PARALLEL_ROWS", 0)


def keyed(object_id: int, records: list[Record]) -> KeyedRows:
    keys = hash_ids(pa.array([r[0] for r in records], pa.string()))
    order = pa.array([r[1] for r in records], pa.int64())
    return KeyedRows.of(keys, row_ids(object_id, len(records)), order)


def brute(objects: list[list[Record]], latest: bool) -> dict[str, int]:
    """id -> the winning row id, computed record by record in commit order."""
    best: dict[str, tuple[int | None, int]] = {}
    for object_id, records in enumerate(objects, start=1):
        for pos, (key, order) in enumerate(records):
            if key is None:
                continue
            row = (object_id << 32) | pos
            held = best.get(key)
            if held is None:
                best[key] = (order, row)
            elif latest and (held[0] is None or (order is not None and order >= held[0])):
                best[key] = (order, row)
    return {k: v[1] for k, v in best.items()}


@pytest.mark.usefixtures("resolution_threads")
@pytest.mark.parametrize("latest", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_resolution_in_batches_matches_the_account_record_by_record(
    latest: bool, seed: int
) -> None:
    rng = random.Random(seed)
    keys = [f"k{i}" for i in range(rng.randint(1, 60))]
    objects = [
        [
            (None if rng.random() < 0.05 else rng.choice(keys),
             None if rng.random() < 0.1 else rng.randint(0, 5))
            for _ in range(rng.randint(0, 25))
        ]
        for _ in range(rng.randint(1, 12))
    ]  # fmt: skip
    index = KeyIndex.empty(pa.int64() if latest else None)
    lost: set[int] = set()
    object_id = 0
    while object_id < len(objects):
        batch = rng.randint(1, 4)
        parts = [keyed(object_id + 1 + i, objects[object_id + i]) for i in range(batch)
                 if object_id + i < len(objects)]  # fmt: skip
        new = KeyedRows(
            np.concatenate([p.h1 for p in parts]),
            np.concatenate([p.h2 for p in parts]),
            np.concatenate([p.row for p in parts]),
            pa.concat_arrays([p.order for p in parts]) if latest else None,  # type: ignore[misc]
        )
        object_id += len(parts)
        result = resolve(index, new, object_id, latest)
        index = result.index
        lost |= set(result.lost.row.tolist())
        assert len(index) == len(
            set(zip(index.entries.h1.tolist(), index.entries.h2.tolist(), strict=True))
        )
        assert list(index.entries.h1) == sorted(index.entries.h1)
    want = brute(objects, latest)
    ids = sorted(want)
    assert list(winners_of(index, hash_ids(pa.array(ids)))) == [want[k] for k in ids]
    every = {(o << 32) | p for o, recs in enumerate(objects, 1) for p, r in enumerate(recs) if r[0]}
    assert lost == every - set(want.values())
    assert index.upper == len(objects)


def test_one_per_key_keeps_the_first_or_the_latest_row_of_each_key() -> None:
    keys = hash_ids(pa.array(["a", "b", "a", None, "a", None]))
    order = pa.array([5, 1, 7, None, 7, None])
    assert one_per_key(keys, None, latest=False).tolist() == [1, 1, 0, 1, 0, 1]
    assert one_per_key(keys, order, latest=True).tolist() == [0, 1, 0, 1, 1, 1]


@pytest.mark.parametrize("records", [[], [("a", 1), ("b", 2)]])
def test_an_index_written_and_read_back_is_the_same(records: list[tuple[str, int]]) -> None:
    index = resolve(KeyIndex.empty(pa.int64()), keyed(1, records), 1, True).index
    for back in (
        KeyIndex.from_table(index.to_table(), pa.int64()),
        KeyIndex.from_bytes(index.to_bytes(), pa.int64()),
    ):
        assert back.upper == 1 and back.entries.row.tolist() == index.entries.row.tolist()
        assert back.entries.h1.tolist() == index.entries.h1.tolist()
        assert back.entries.h2.tolist() == index.entries.h2.tolist()
        assert back.entries.order is not None and back.entries.order.equals(index.entries.order)


def test_bytes_that_are_no_key_index_are_refused() -> None:
    with pytest.raises(KeyIndexError, match="not a key index"):
        KeyIndex.from_bytes(b"PAR1 and then nothing", None)
    with pytest.raises(KeyIndexError, match="not a key index"):
        KeyIndex.from_bytes(b"", None)


def test_a_state_naming_another_index_file_is_refused() -> None:
    state = ServedState(1, (), 0)
    doc = json.loads(state.to_json())
    assert ServedState.from_json(state.to_json(), "here").index == INDEX_NAME
    del doc["index"]
    assert ServedState.from_json(json.dumps(doc).encode(), "here").index == LEGACY_INDEX_NAME
    doc["index"] = "../../elsewhere"
    with pytest.raises(ServedStateError, match="here: not a dedupe state"):
        ServedState.from_json(json.dumps(doc).encode(), "here")


HIGH = st.sampled_from([0, 1 << 40, (1 << 63) + 5, (1 << 64) - (1 << 20)])


@given(st.lists(st.tuples(HIGH, st.integers(0, 255)), max_size=300))
def test_stable_argsort_is_numpys_stable_argsort(parts: list[tuple[int, int]]) -> None:
    """Hashes that share their high bits (the runs it orders again), equal hashes (ties keep
    their position) and hashes that differ in the bits the position takes."""
    h1 = np.array([high + low for high, low in parts], dtype=np.uint64)
    assert stable_argsort(h1).tolist() == np.argsort(h1, kind="stable").tolist()


def test_stable_argsort_of_random_hashes() -> None:
    h1 = np.random.default_rng(5).integers(0, 1 << 64, 100_000, dtype=np.uint64, endpoint=False)
    h1[::7] = h1[3]  # and one key many times
    assert stable_argsort(h1).tolist() == np.argsort(h1, kind="stable").tolist()


@given(st.lists(st.sampled_from([0, 1, 2, 7, (1 << 31) + 3, (1 << 32) - 1]), max_size=300))
def test_stable_argsort_small_is_numpys_stable_argsort(values: list[int]) -> None:
    """Small object ids, many equal (the lost rows of one object keep their order)."""
    array = np.array(values, dtype=np.int64)
    assert stable_argsort_small(array).tolist() == np.argsort(array, kind="stable").tolist()


@pytest.mark.parametrize("values", [[-1], [1 << 32]])
def test_stable_argsort_small_refuses_what_it_cannot_pack(values: list[int]) -> None:
    with pytest.raises(ValueError, match="below 2"):
        stable_argsort_small(np.array(values, dtype=np.int64))


@pytest.mark.usefixtures("resolution_threads")
@pytest.mark.parametrize("latest", [False, True])
@pytest.mark.parametrize("seed", range(8))
def test_resolution_holds_when_keys_share_their_first_hash_word(latest: bool, seed: int) -> None:
    """Hashes drawn from a few h1 values on both sides of the middle of h1's range (so runs
    of distinct keys share h1, old and new interleaved, in both ranges): every batch's index
    holds each (h1, h2)'s winner, sorted by h1."""
    rng = np.random.default_rng(seed)
    index = KeyIndex.empty(pa.int64() if latest else None)
    best: dict[tuple[int, int], tuple[int, int]] = {}  # key -> (order, row)
    middle = np.array([(1 << 63) - 2, (1 << 63) - 1, 1 << 63, (1 << 63) + 1], np.uint64)
    for object_id in range(1, 6):
        n = int(rng.integers(1, 40))
        h1 = middle[rng.integers(0, 4, n)]
        h2 = rng.integers(0, 6, n).astype(np.uint64)
        order = rng.integers(0, 4, n)
        rows = row_ids(object_id, n)
        new = KeyedRows(h1, h2, rows, pa.array(order) if latest else None)
        index = resolve(index, new, object_id, latest).index
        for k1, k2, o, r in zip(
            h1.tolist(), h2.tolist(), order.tolist(), rows.tolist(), strict=True
        ):
            held = best.get((k1, k2))
            if held is None or (latest and o >= held[0]):
                best[(k1, k2)] = (o, r)
        e = index.entries
        assert list(e.h1) == sorted(e.h1)
        got = dict(zip(zip(e.h1.tolist(), e.h2.tolist(), strict=True), e.row.tolist(), strict=True))
        assert got == {k: r for k, (_, r) in best.items()}
