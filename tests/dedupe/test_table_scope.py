"""`lost_to_other_dates` against a brute-force statement of `scope: table` under `first`."""

from __future__ import annotations

import random

import numpy as np
import pytest

from resources.dedupe.key_index import KeyedRows
from resources.dedupe.table_scope import DateKeys, lost_to_other_dates


def keyed(keys: list[int], rows: list[int]) -> KeyedRows:
    h1 = np.array([k % 5 for k in keys], np.uint64)  # few h1 values: shared h1 runs are walked
    h2 = np.array(keys, np.uint64)
    by = np.lexsort((h2, h1))
    return KeyedRows(h1[by], h2[by], np.array(rows, np.int64)[by], None)


def brute(dates: list[tuple[str, list[int], list[tuple[int, int, int]]]]) -> dict[str, list[bool]]:
    """dates: (dt, indexed keys, new rows as (key, row, committed_at))."""
    owner = {k: dt for dt, indexed, _ in dates for k in indexed}
    first: dict[int, tuple[int, str, int]] = {}
    for dt, _, new in dates:
        for key, row, when in new:
            if key not in owner:
                first[key] = min(first.get(key, (when, dt, row)), (when, dt, row))
    out = {}
    for dt, _, new in dates:
        if new:
            out[dt] = [(owner[k] != dt) if k in owner else first[k][1] != dt for k, _, _ in new]
    return out


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    universe = list(range(1, rng.randint(2, 40)))
    taken: set[int] = set()
    spec = []
    for d in range(rng.randint(1, 5)):
        free = [k for k in universe if k not in taken]
        indexed = rng.sample(free, rng.randint(0, len(free) // 2))
        taken.update(indexed)
        new = [(rng.choice(universe), r, rng.randint(0, 3)) for r in range(rng.randint(0, 12))]
        spec.append((f"2026-01-0{d + 1}", indexed, new))
    dates = []
    for dt, indexed, new in spec:
        rows = KeyedRows(
            np.array([k % 5 for k, _, _ in new], np.uint64),
            np.array([k for k, _, _ in new], np.uint64),
            np.array([r for _, r, _ in new], np.int64),
            None,
        )
        when = np.array([w for _, _, w in new], np.int64)
        dates.append(DateKeys(dt, keyed(indexed, list(range(len(indexed)))), rows, when))
    got = {dt: mask.tolist() for dt, mask in lost_to_other_dates(dates).items()}
    assert got == brute(spec)


def test_the_first_committed_date_keeps_a_new_key_and_an_indexed_one_stays() -> None:
    one = KeyedRows(np.array([1, 2], np.uint64), np.array([1, 2], np.uint64),
                    np.array([0, 1], np.int64), None)  # fmt: skip
    dates = [
        DateKeys("2026-01-01", keyed([9], [0]), one, np.array([200, 100], np.int64)),
        DateKeys("2026-01-02", keyed([], []), one, np.array([100, 200], np.int64)),
        DateKeys("2026-01-03", keyed([], []), KeyedRows(np.array([9 % 5], np.uint64),
                 np.array([9], np.uint64), np.array([0], np.int64), None), np.array([0])),
    ]  # fmt: skip
    lost = lost_to_other_dates(dates)
    # key 1: committed first on 01-02; key 2 first on 01-01; key 9 indexed by 01-01.
    assert {dt: m.tolist() for dt, m in lost.items()} == {
        "2026-01-01": [True, False],
        "2026-01-02": [False, True],
        "2026-01-03": [True],
    }
