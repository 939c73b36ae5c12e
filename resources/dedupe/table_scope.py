"""`scope: table`: which date serves a key, when records of one key land on several dates.

Each date keeps its own key index (`key_index`), holding the keys that date serves; under
`scope: table` no key is in two dates' indexes. A publication run (holding the table's keys
lease, so no other run publishes the table meanwhile) resolves the rows committed since each
date's index against every date's index first:
- a new row whose key another date's index holds loses: that date published the key first;
- of new rows of one key on several dates (none indexed yet), the date of the row committed
  first keeps the key (commit time, then date, then row id); the rows of the other dates lose.
What is left is resolved within its date as under `scope: date`. Only new rows ever lose
(`first` only: under `latest` a later record would take a key from a date with nothing new to
publish), so no date changes without new rows of its own.

Cost: every date's index is read once per run (24 bytes a key; the whole table's keys), and
the new rows, sorted once by hash, are looked up in each (binary searches: new rows x dates x
log(keys of a date)); nothing sorts the table's keys.
Pure: the publisher does the I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from resources.dedupe.key_index import KeyedRows, find_keys, stable_argsort


@dataclass(frozen=True)
class DateKeys:
    """One date of the table as a run sees it: the keys its index holds, and its new rows."""

    dt: str
    indexed: KeyedRows
    """The date's key index entries (its current publication's, or what this run starts
    from): the keys it serves."""
    new: KeyedRows
    """Rows committed since the index (their row ids are the date's), none for a date with
    nothing new."""
    committed_at_ms: np.ndarray
    """Per row of `new`, when its small object was committed (int64, store clock)."""


def lost_to_other_dates(dates: Sequence[DateKeys]) -> dict[str, np.ndarray]:
    """Per date with new rows, a bool mask over its `new`: the rows whose key another date
    serves or keeps in this run (see the module docstring). Deterministic for given inputs.
    Pure; raises nothing."""
    if not dates:
        return {}
    code = np.arange(len(dates), dtype=np.int64)
    new_h1, new_h2, new_date = _concat(
        [(d.new.h1, d.new.h2, np.full(len(d.new), c)) for d, c in zip(dates, code, strict=True)]
    )
    lost = np.zeros(len(new_h1), bool)
    indexed = np.zeros(len(new_h1), bool)
    # Probed in hash order, each date's index is walked forward, not hit at random: several
    # times faster at a million new rows (BENCHMARKS.md).
    by = stable_argsort(new_h1)
    sorted_h1, sorted_h2 = new_h1[by], new_h2[by]
    for d, c in zip(dates, code, strict=True):
        if len(d.indexed) and len(new_h1):
            found = np.zeros(len(new_h1), bool)
            found[by] = find_keys(d.indexed.h1, d.indexed.h2, sorted_h1, sorted_h2) >= 0
            indexed |= found
            lost |= found & (new_date != c)
    lost |= _not_first_date(dates, new_h1, new_h2, new_date, ~indexed)
    out, start = {}, 0
    for d in dates:
        if len(d.new):
            out[d.dt] = lost[start : start + len(d.new)]
        start += len(d.new)
    return out


def _not_first_date(
    dates: Sequence[DateKeys],
    h1: np.ndarray,
    h2: np.ndarray,
    date: np.ndarray,
    contested: np.ndarray,
) -> np.ndarray:
    """Of the `contested` rows (keys no index holds), those whose key's first committed row
    (commit time, date, row id) is on another date."""
    out = np.zeros(len(h1), bool)
    rows = np.concatenate([d.new.row for d in dates]) if dates else np.zeros(0, np.int64)
    when = np.concatenate([d.committed_at_ms for d in dates]) if dates else rows
    pick = np.nonzero(contested)[0]
    if len(pick) < 2:
        return out
    order = np.lexsort((rows[pick], date[pick], when[pick], h2[pick], h1[pick]))
    s = pick[order]
    starts = np.ones(len(s), bool)
    starts[1:] = (h1[s][1:] != h1[s][:-1]) | (h2[s][1:] != h2[s][:-1])
    group = np.cumsum(starts) - 1
    first_date = date[s][starts][group]
    out[s] = date[s] != first_date
    return out


def _concat(
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not parts:
        empty = np.zeros(0, np.uint64)
        return empty, empty.copy(), np.zeros(0, np.int64)
    return (
        np.concatenate([p[0] for p in parts]).astype(np.uint64, copy=False),
        np.concatenate([p[1] for p in parts]).astype(np.uint64, copy=False),
        np.concatenate([p[2] for p in parts]).astype(np.int64, copy=False),
    )
