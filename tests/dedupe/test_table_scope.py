"""`lost_to_other_dates` and `latest_across_dates` against brute-force statements of `scope:
table` under `first` and `latest`."""

from __future__ import annotations

import random

import numpy as np
import pyarrow as pa
import pytest

from resources.dedupe.key_index import KeyedRows
from resources.dedupe.table_scope import DateKeys, latest_across_dates, lost_to_other_dates


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


def owners(rng: random.Random, universe: list[int], dates: int) -> list[list[int]]:
    """Per date, the keys its index holds: no key in two dates' indexes."""
    owned: set[int] = set()
    out = []
    for _ in range(dates):
        free = [k for k in universe if k not in owned]
        out.append(rng.sample(free, rng.randint(0, len(free) // 2)))
        owned.update(out[-1])
    return out


@pytest.mark.parametrize("seed", range(40))
def test_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    universe = list(range(1, rng.randint(2, 40)))
    spec = []
    for d, indexed in enumerate(owners(rng, universe, rng.randint(1, 5))):
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


def latest_brute(
    spec: list[
        tuple[str, list[tuple[int, int, int | None, int]], list[tuple[int, int, int | None, int]]]
    ],
) -> tuple[dict[str, list[bool]], dict[str, list[bool]]]:
    """spec: (dt, index entries, new rows), each as (key, row, order, committed_at)."""
    best: dict[int, tuple[int, int, str, int]] = {}
    new_keys = {key for _, _, new in spec for key, *_ in new}
    for dt, indexed, new in spec:
        for key, row, order, when in [*new, *(e for e in indexed if e[0] in new_keys)]:
            # a null below every value; ties to the later commit (time, date, row)
            rank = (-1 if order is None else order, when, dt, row)
            best[key] = max(best.get(key, rank), rank)
    lost = {dt: [best[k][2] != dt for k, *_ in new] for dt, _, new in spec if new}
    taken = {}
    for dt, indexed, _ in spec:
        mask = [k in best and best[k][2] != dt for k, *_ in indexed]
        if any(mask):
            taken[dt] = mask
    return lost, taken


def latest_rows(rows: list[tuple[int, int, int | None, int]], *, sort: bool) -> KeyedRows:
    by = sorted(range(len(rows)), key=lambda i: (rows[i][0] % 5, rows[i][0])) if sort else None
    rows = [rows[i] for i in by] if by is not None else rows
    return KeyedRows(
        np.array([k % 5 for k, *_ in rows], np.uint64),
        np.array([k for k, *_ in rows], np.uint64),
        np.array([r for _, r, _, _ in rows], np.int64),
        pa.array([o for _, _, o, _ in rows], pa.int64()),
    )


@pytest.mark.parametrize("seed", range(60))
def test_latest_across_dates_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    universe = list(range(1, rng.randint(2, 30)))
    spec = []
    for d, keys in enumerate(owners(rng, universe, rng.randint(1, 4))):
        order = lambda: rng.choice([None, *range(4)])  # noqa: E731 - many ties and nulls
        indexed = sorted(
            ((k, 1000 + i, order(), rng.randint(0, 3)) for i, k in enumerate(keys)),
            key=lambda e: (e[0] % 5, e[0]),
        )
        new = [
            (rng.choice(universe), r, order(), rng.randint(0, 3)) for r in range(rng.randint(0, 10))
        ]
        spec.append((f"2026-01-0{d + 1}", indexed, new))
    dates = []
    for dt, indexed, new in spec:
        times = {row: when for _, row, _, when in indexed}
        dates.append(
            DateKeys(
                dt,
                latest_rows(indexed, sort=False),
                latest_rows(new, sort=False),
                np.array([w for *_, w in new], np.int64),
                lambda rows, times=times: np.array([times[int(r)] for r in rows], np.int64),
            )
        )
    rng.shuffle(dates)  # ties go by dt, whatever the order the dates come in
    moves = latest_across_dates(dates)
    lost, taken = latest_brute(spec)
    assert {dt: m.tolist() for dt, m in moves.lost.items()} == lost
    assert {dt: m.tolist() for dt, m in moves.taken.items()} == taken
