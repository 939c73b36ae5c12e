"""A table partition's key index: for every key its records hold, the row that wins under the
stream's policy — and how rows committed since resolve against it.

A row is named by its row id, `(object id << 32) | position`: the small object's dense ledger
id and the row's position in it. Ids grow with commit order, so a smaller row id was
committed first (`first`'s order; `latest`'s tie-break, reversed). The index holds one entry
per key, sorted by the key's 128-bit hash (`resources.dedupe.keys`): `h1`, `h2`, the winning
`row` and, for `latest`, the winner's `order` value. 24 bytes a key (32 with an order column);
a resolution of n new rows against an index of m keys sorts n + m entries once.

Resolution is deterministic: the index after `resolve` is a function of the rows of ids
`1..upper` alone, whatever steps led there, so two publishers racing compute the same one.
Losing is final (a row that lost never wins later): under `first` a later row cannot be
earlier; under `latest` the row that beat it stays ahead of it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from resources.dedupe.keys import HASH_NAME, KeyHashes
from resources.errors import LeaseholdError

ROW_BITS = 32
POSITION_MASK = (1 << ROW_BITS) - 1
INDEX_UPPER_KEY = b"leasehold.keys.upper"
INDEX_HASH_KEY = b"leasehold.keys.hash"


class KeyIndexError(LeaseholdError):
    """A key index file that is not one this version of leasehold wrote or can read."""


def row_ids(object_id: int, rows: int) -> np.ndarray:
    """The row ids of a small object's `rows` rows, in order."""
    ids: np.ndarray = (np.int64(object_id) << ROW_BITS) | np.arange(rows, dtype=np.int64)
    return ids


def object_of(rows: np.ndarray) -> np.ndarray:
    """The small object id of each row id."""
    return rows >> ROW_BITS


@dataclass(frozen=True)
class KeyedRows:
    """Rows with a key: their hashes, row ids and (for `latest`) order values, aligned."""

    h1: np.ndarray
    h2: np.ndarray
    row: np.ndarray
    order: pa.Array | None

    def __len__(self) -> int:
        return len(self.h1)

    @classmethod
    def of(cls, keys: KeyHashes, rows: np.ndarray, order: pa.Array | None) -> KeyedRows:
        """The rows among `rows` whose id is not null (a null id is no key)."""
        keep = keys.present
        kept_order = None if order is None else order.filter(pa.array(keep))
        return cls(keys.h1[keep], keys.h2[keep], rows[keep], kept_order)


@dataclass(frozen=True)
class KeyIndex:
    """One entry per key, sorted by (h1, h2): the winning row of ids `1..upper`."""

    entries: KeyedRows
    upper: int

    @classmethod
    def empty(cls, order_type: pa.DataType | None) -> KeyIndex:
        none = np.zeros(0, np.uint64)
        order = None if order_type is None else pa.array([], order_type)
        return cls(KeyedRows(none, none.copy(), np.zeros(0, np.int64), order), 0)

    def __len__(self) -> int:
        return len(self.entries)

    def to_table(self) -> pa.Table:
        """The index as a Parquet-ready table, its `upper` and hash in the schema metadata."""
        e = self.entries
        columns = {"h1": pa.array(e.h1), "h2": pa.array(e.h2), "row": pa.array(e.row)}
        if e.order is not None:
            columns["order"] = e.order
        meta = {INDEX_UPPER_KEY: str(self.upper).encode(), INDEX_HASH_KEY: HASH_NAME.encode()}
        return pa.table(columns).replace_schema_metadata(meta)

    @classmethod
    def from_table(cls, table: pa.Table, order_type: pa.DataType | None) -> KeyIndex:
        """The index `to_table` wrote. Raises `KeyIndexError` for a table of another hash or
        without an `order` column where the policy needs one."""
        meta = table.schema.metadata or {}
        if meta.get(INDEX_HASH_KEY) != HASH_NAME.encode():
            raise KeyIndexError(f"a key index of hash {meta.get(INDEX_HASH_KEY)!r}")
        if order_type is not None and "order" not in table.column_names:
            raise KeyIndexError("a key index without order values, for a latest policy")
        order = None
        if order_type is not None:
            order = table.column("order").combine_chunks().cast(order_type)
        entries = KeyedRows(
            table.column("h1").to_numpy(),
            table.column("h2").to_numpy(),
            table.column("row").to_numpy(),
            order,
        )
        return cls(entries, int(meta[INDEX_UPPER_KEY]))


@dataclass(frozen=True)
class Resolution:
    """What resolving new rows did: the index after, and the rows that lost in this step (old
    winners beaten and new rows that lost), with their hashes."""

    index: KeyIndex
    lost: KeyedRows


def resolve(index: KeyIndex, new: KeyedRows, upper: int, latest: bool) -> Resolution:
    """`index` (ids `1..index.upper`) with `new` (rows of ids above it, up to `upper`): per key
    the first row committed (`latest` False) or the greatest order value, ties to the later
    row (`latest` True). Pure."""
    if upper < index.upper:
        raise KeyIndexError(f"resolving up to {upper}, below the index's {index.upper}")
    old = index.entries
    h1 = np.concatenate([old.h1, new.h1])
    h2 = np.concatenate([old.h2, new.h2])
    row = np.concatenate([old.row, new.row])
    order = None
    if latest:
        if old.order is None or new.order is None:
            raise KeyIndexError("a latest policy needs order values for every row")
        order = pa.concat_arrays([old.order, new.order.cast(old.order.type)])
        rank = pc.rank(order, sort_keys="descending", tiebreaker="min").to_numpy()
        by = np.lexsort((-row, rank, h2, h1))
    else:
        by = np.lexsort((row, h2, h1))
    s1, s2 = h1[by], h2[by]
    first = np.ones(len(by), bool)
    first[1:] = (s1[1:] != s1[:-1]) | (s2[1:] != s2[:-1])
    won, lost = by[first], by[~first]
    pick = (lambda at: order.take(pa.array(at))) if order is not None else (lambda at: None)
    entries = KeyedRows(h1[won], h2[won], row[won], pick(won))
    return Resolution(KeyIndex(entries, upper), KeyedRows(h1[lost], h2[lost], row[lost], None))


def winners_of(index: KeyIndex, keys: KeyHashes) -> np.ndarray:
    """Per row of `keys`, the winning row id of its key in `index`; -1 for a null id or a key
    the index does not hold. Pure."""
    e = index.entries
    out = np.full(len(keys), -1, np.int64)
    if not len(e) or not len(keys):
        return out
    at = np.searchsorted(e.h1, keys.h1, side="left")
    at_clipped = np.minimum(at, len(e) - 1)
    found = keys.present & (e.h1[at_clipped] == keys.h1)
    # Equal h1 with another h2 (1 in 10¹¹ for 10⁷ keys): look along the run of that h1.
    for i in np.nonzero(found & (e.h2[at_clipped] != keys.h2))[0]:
        j = at[i]
        while j < len(e) and e.h1[j] == keys.h1[i] and e.h2[j] != keys.h2[i]:
            j += 1
        at_clipped[i] = j if j < len(e) and e.h1[j] == keys.h1[i] else 0
        found[i] = j < len(e) and e.h1[j] == keys.h1[i]
    out[found] = e.row[at_clipped[found]]
    return out


def one_per_key(keys: KeyHashes, order: pa.Array | None, latest: bool) -> np.ndarray:
    """Per row of `keys` (rows in commit order), whether it is its key's winner among them: the
    first row of a key, or under `latest` the greatest `order`, ties to the later row. A row
    without a key is always kept. Pure."""
    rows = np.arange(len(keys), dtype=np.int64)
    empty = KeyIndex.empty(None if order is None else order.type)
    won = resolve(empty, KeyedRows.of(keys, rows, order), 1, latest).index.entries.row
    keep: np.ndarray = ~keys.present
    keep[won] = True
    return keep
