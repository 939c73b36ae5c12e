"""`scope: table`: which date serves a key, when records of one key land on several dates.

Each date keeps its own key index (`key_index`), holding the keys that date serves; under
`scope: table` no key is in two dates' indexes. A publication run (holding the table's keys
lease, so no other run publishes the table meanwhile) resolves the rows committed since each
date's index against every date's index first:
- a new row whose key another date's index holds loses: that date published the key first;
- of new rows of one key on several dates (none indexed yet), the date of the row committed
  first keeps the key (commit time, then date, then row id); the rows of the other dates lose.
What is left is resolved within its date as under `scope: date`. Under `first` only new rows
ever lose, so no date changes without new rows of its own.

Under `latest` (`latest_across_dates`) a key goes to the date of its best record among every
date's new rows and the one index entry that holds it: the greatest `order_by`, ties (and nulls,
which lose to any value) to the later commit (commit time, then date, then row id). New rows of
the key on other dates lose, and so does the index entry when it is on another date: that date
is *taken* from and must be published again (a revision of its current version when it has
nothing new), in the same store transaction as the date that took the key.

Cost: every date's index is read once per run (24 bytes a key; the whole table's keys), and
the new rows, sorted once by hash, are looked up in each (binary searches: new rows x dates x
log(keys of a date)); nothing sorts the table's keys.
Pure: the publisher does the I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.dedupe.key_index import KeyedRows, find_keys
from resources.dedupe.word_sort import stable_argsort


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
    indexed_committed_at: Callable[[np.ndarray], np.ndarray] = field(
        default=lambda rows: np.zeros(len(rows), np.int64)
    )
    """Given row ids of `indexed` entries, when their small objects were committed (asked under
    `latest` for the entries a new row contests, only: the ledger read it needs is the date's)."""


@dataclass(frozen=True)
class Moves:
    """What `latest_across_dates` decided."""

    lost: dict[str, np.ndarray]
    """Per date with new rows, a bool mask over its `new`: the rows whose key another date
    keeps."""
    taken: dict[str, np.ndarray]
    """Per date whose index lost a key to another date, a bool mask over its `indexed`."""


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


def latest_across_dates(dates: Sequence[DateKeys]) -> Moves:
    """Under `latest`, which date keeps each key some date has new rows of (see the module
    docstring): the new rows and index entries of the other dates lose. Every date's
    `indexed.order` and `new.order` are given. Deterministic for given inputs. Pure; raises
    nothing."""
    code = np.argsort(np.argsort([d.dt for d in dates], kind="stable")).astype(np.int64)
    h1, h2, date = _concat(
        [(d.new.h1, d.new.h2, np.full(len(d.new), c)) for d, c in zip(dates, code, strict=True)]
    )
    if not len(h1):
        return Moves({}, {})
    order_type = next(d.new.order.type for d in dates if d.new.order is not None)
    rows = np.concatenate([d.new.row for d in dates])
    when = np.concatenate([d.committed_at_ms for d in dates]).astype(np.int64, copy=False)
    orders = [_orders(d.new, order_type) for d in dates]
    entry_parts = _contested_entries(dates, h1, h2)
    for c, (d, at) in enumerate(zip(dates, entry_parts, strict=True)):
        if len(at):
            e = d.indexed
            h1, h2 = np.append(h1, e.h1[at]), np.append(h2, e.h2[at])
            date, rows = np.append(date, np.full(len(at), code[c])), np.append(rows, e.row[at])
            when = np.append(when, d.indexed_committed_at(e.row[at]).astype(np.int64))
            orders.append(_orders(e, order_type).take(pa.array(at)))
    rank = _rank(pa.concat_arrays(orders))
    by = np.lexsort((rows, date, when, rank, h2, h1))
    last = np.ones(len(by), bool)  # the last of each key's run is its best record
    last[:-1] = (h1[by][1:] != h1[by][:-1]) | (h2[by][1:] != h2[by][:-1])
    group = np.cumsum(np.concatenate([[True], last[:-1]])) - 1
    keeper = np.empty(len(by), np.int64)
    keeper[by] = date[by][last][group]
    other = keeper != date  # dates by code: the order of their dt
    n_new, lost, taken, start = sum(len(d.new) for d in dates), {}, {}, 0
    for d in dates:
        if len(d.new):
            lost[d.dt] = other[start : start + len(d.new)]
        start += len(d.new)
    start = n_new
    for d, at in zip(dates, entry_parts, strict=True):
        gone = at[other[start : start + len(at)]]
        if len(gone):
            mask = np.zeros(len(d.indexed), bool)
            mask[gone] = True
            taken[d.dt] = mask
        start += len(at)
    return Moves(lost, taken)


def _contested_entries(
    dates: Sequence[DateKeys], h1: np.ndarray, h2: np.ndarray
) -> list[np.ndarray]:
    """Per date, the positions of its index entries whose key is among the new rows'."""
    by = stable_argsort(h1)
    sorted_h1, sorted_h2 = h1[by], h2[by]
    out = []
    for d in dates:
        at = np.zeros(0, np.int64)
        if len(d.indexed):
            found = find_keys(d.indexed.h1, d.indexed.h2, sorted_h1, sorted_h2)
            at = np.unique(found[found >= 0])
        out.append(at)
    return out


def _orders(rows: KeyedRows, order_type: pa.DataType) -> pa.Array:
    assert rows.order is not None  # `latest` keeps an order value per row and entry
    return rows.order.cast(order_type)


def _rank(order: pa.Array) -> np.ndarray:
    """Dense ranks of `order` from 1, a null below every value (0)."""
    rank: np.ndarray = pc.rank(order, sort_keys="ascending", tiebreaker="dense").to_numpy()
    nulls = order.is_null().to_numpy(zero_copy_only=False)
    return np.where(nulls, 0, rank.astype(np.int64))


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


def no_rows(like: KeyedRows) -> KeyedRows:
    """No rows, of `like`'s kinds (its order type kept): a date's new rows when it has none."""
    order = None if like.order is None else like.order.slice(0, 0)
    return KeyedRows(like.h1[:0], like.h2[:0], like.row[:0], order)
