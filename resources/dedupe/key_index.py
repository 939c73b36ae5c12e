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

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.dedupe.keys import HASH_NAME, HASHES, KeyHashes
from resources.dedupe.word_sort import stable_argsort
from resources.errors import LeaseholdError

ROW_BITS = 32
POSITION_MASK = (1 << ROW_BITS) - 1
INDEX_UPPER_KEY = b"leasehold.keys.upper"
INDEX_HASH_KEY = b"leasehold.keys.hash"
PARQUET_MAGIC = b"PAR1"
RANGE_BITS = 1
RANGES = 1 << RANGE_BITS
"""A large resolution's ranges of h1, resolved at once: the machines leasehold runs on have
at least two cores."""
PARALLEL_ROWS = 1 << 21
"""Index entries and new rows together below which a resolution runs in one thread."""


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
        if bool(keep.all()):
            return cls(keys.h1, keys.h2, rows, order)
        kept_order = None if order is None else order.filter(pa.array(keep))
        return cls(keys.h1[keep], keys.h2[keep], rows[keep], kept_order)


@dataclass(frozen=True)
class KeyIndex:
    """One entry per key, sorted by h1 (keys sharing an h1 in any order): the winning row of
    ids `1..upper`."""

    entries: KeyedRows
    upper: int
    hash_name: str = HASH_NAME
    """The hash its keys are (`resources.dedupe.keys`): rows resolved against it, or looked up
    in it, are hashed with the same one (`hash_ids(ids, index.hash_name)`)."""

    @classmethod
    def empty(cls, order_type: pa.DataType | None, hash_name: str = HASH_NAME) -> KeyIndex:
        none = np.zeros(0, np.uint64)
        order = None if order_type is None else pa.array([], order_type)
        return cls(KeyedRows(none, none.copy(), np.zeros(0, np.int64), order), 0, hash_name)

    def __len__(self) -> int:
        return len(self.entries)

    def to_table(self) -> pa.Table:
        """The index as a Parquet-ready table, its `upper` and hash in the schema metadata."""
        e = self.entries
        columns = {"h1": pa.array(e.h1), "h2": pa.array(e.h2), "row": pa.array(e.row)}
        if e.order is not None:
            columns["order"] = e.order
        meta = {INDEX_UPPER_KEY: str(self.upper).encode(), INDEX_HASH_KEY: self.hash_name.encode()}
        return pa.table(columns).replace_schema_metadata(meta)

    def to_bytes(self) -> memoryview:
        """The index as an Arrow IPC file (`to_table`, one batch, uncompressed): read back by
        `from_bytes` without decoding or copying its columns. Written once into a buffer of
        its exact size (measured by writing it to nowhere first): a growing buffer, or a
        copy into `bytes`, would cost more than the writing (hundreds of MB at 10⁷ keys)."""
        table = self.to_table()
        chunk = max(1, table.num_rows)
        measure = pa.MockOutputStream()
        with pa.ipc.new_file(measure, table.schema) as writer:
            writer.write_table(table, max_chunksize=chunk)
        data = pa.allocate_buffer(measure.size())
        with pa.ipc.new_file(pa.FixedSizeBufferWriter(data), table.schema) as writer:
            writer.write_table(table, max_chunksize=chunk)
        return memoryview(data)

    @classmethod
    def from_bytes(cls, data: bytes | memoryview, order_type: pa.DataType | None) -> KeyIndex:
        """The index `to_bytes` wrote (its arrays views of `data`, read-only), or one an earlier
        version wrote as Parquet (`to_table`'s columns). Raises `KeyIndexError` for anything
        else, and as `from_table` does."""
        try:
            if data[:4] == PARQUET_MAGIC:
                table = pq.read_table(pa.BufferReader(data))
            else:
                table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
        except (pa.ArrowInvalid, OSError) as exc:
            raise KeyIndexError(f"not a key index: {exc}") from exc
        return cls.from_table(table, order_type)

    @classmethod
    def from_table(cls, table: pa.Table, order_type: pa.DataType | None) -> KeyIndex:
        """The index `to_table` wrote. Raises `KeyIndexError` for a table of a hash this version
        does not know or without an `order` column where the policy needs one."""
        meta = table.schema.metadata or {}
        hash_name = meta.get(INDEX_HASH_KEY, b"").decode(errors="replace")
        if hash_name not in HASHES:
            raise KeyIndexError(f"a key index of hash {hash_name!r}")
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
        return cls(entries, int(meta[INDEX_UPPER_KEY]), hash_name)


class Resolution:
    """What resolving new rows did: the rows that lost in this step (old winners beaten and new
    rows that lost), with their hashes, and the index after. The index is built when first
    asked for (from any thread, once): its merge is the step's largest part, so a caller can do
    what needs only the rows that lost meanwhile."""

    def __init__(
        self, lost: KeyedRows, hash_name: str, build_index: Callable[[], KeyIndex]
    ) -> None:
        self.lost = lost
        self.hash_name = hash_name
        """The hash of the rows' keys and of the index after."""
        self._build_index: Callable[[], KeyIndex] | None = build_index
        self._index: KeyIndex | None = None
        self._lock = threading.Lock()

    @property
    def index(self) -> KeyIndex:
        with self._lock:
            if self._index is None:
                assert self._build_index is not None
                self._index, self._build_index = self._build_index(), None
            return self._index


def resolve(index: KeyIndex, new: KeyedRows, upper: int, latest: bool) -> Resolution:
    """`index` (ids `1..index.upper`) with `new` (rows of ids above it, up to `upper`): per key
    the first row committed (`latest` False) or the greatest order value, ties to the later
    row (`latest` True). Sorts the new rows only, then merges them into the sorted index
    (one merge of the two sorted runs; binary searches and an insertion where two keys share an
    h1). Large inputs are resolved as `RANGES` ranges of h1 at once, one thread each (a key
    lies in one range, so each range is resolved alone; numpy's sorts and copies release the
    GIL); `lost` is then in no particular order. Pure."""
    if upper < index.upper:
        raise KeyIndexError(f"resolving up to {upper}, below the index's {index.upper}")
    if latest and (index.entries.order is None or new.order is None):
        raise KeyIndexError("a latest policy needs order values for every row")
    if len(index) + len(new) < PARALLEL_ROWS:
        return _resolve(index.entries, new, upper, latest, index.hash_name)
    with ThreadPoolExecutor(RANGES) as pool:
        parts = list(
            pool.map(lambda r: _resolve(*_in_range(index, new, r), upper, latest, index.hash_name),
                     range(RANGES))
        )  # fmt: skip
    order_type = None if index.entries.order is None else index.entries.order.type

    def build_index() -> KeyIndex:
        with ThreadPoolExecutor(RANGES) as pool:
            indexes = list(pool.map(lambda part: part.index.entries, parts))
        return KeyIndex(concat_rows(indexes, order_type), upper, index.hash_name)

    lost = concat_rows([part.lost for part in parts], order_type)
    return Resolution(lost, index.hash_name, build_index)


def _in_range(index: KeyIndex, new: KeyedRows, r: int) -> tuple[KeyedRows, KeyedRows]:
    """The index entries (a slice: they are sorted by h1) and the new rows whose h1 lies in
    the `r`-th of `RANGES` equal ranges."""
    shift = np.uint64(64 - RANGE_BITS)
    lo, hi = np.searchsorted(index.entries.h1, [np.uint64(r) << shift, np.uint64(r + 1) << shift])
    if r == RANGES - 1:
        hi = len(index)
    old = index.entries
    order = None if old.order is None else old.order.slice(lo, hi - lo)
    part = KeyedRows(old.h1[lo:hi], old.h2[lo:hi], old.row[lo:hi], order)
    return part, take_rows(new, np.flatnonzero((new.h1 >> shift) == r))


def _resolve(
    old: KeyedRows, new: KeyedRows, upper: int, latest: bool, hash_name: str
) -> Resolution:
    """`resolve` in one thread."""
    w, lost_new = _one_per_key(new, latest)
    interleaved = _Interleaved.of(old, w)
    if interleaved is None:  # keys share an h1: found by search, inserted by position
        at, insert_at = _search(old.h1, old.h2, w.h1, w.h2)
    else:
        at = interleaved.at
    matched = at >= 0
    beats = np.zeros(len(w), bool)
    if latest and matched.any():
        assert old.order is not None and w.order is not None
        new_order = w.order.filter(pa.array(matched)).cast(old.order.type)
        beats[matched] = _beats(new_order, old.order.take(pa.array(at[matched])))
    replaced = at[matched & beats]  # index positions whose winner is now a new row
    lost = concat_rows(
        [
            take_rows(new, lost_new),
            take_rows(w, np.nonzero(matched & ~beats)[0]),
            take_rows(old, replaced),
        ]
    )

    def build_index() -> KeyIndex:
        if interleaved is None:
            merged = _merged(old, w, at, insert_at, beats)
        else:
            merged = interleaved.merged(old, w, beats)
        return KeyIndex(merged, upper, hash_name)

    return Resolution(lost, hash_name, build_index)


def _one_per_key(rows: KeyedRows, latest: bool) -> tuple[KeyedRows, np.ndarray]:
    """(winners, losers): the winners sorted by hash, and the losers' positions in `rows`: per
    key the first row (`rows.row` smallest) or the greatest order, ties to the greater row id."""
    h1, h2, row = rows.h1, rows.h2, rows.row
    if latest:
        assert rows.order is not None
        rank = pc.rank(rows.order, sort_keys="descending", tiebreaker="min").to_numpy()
        by = np.lexsort((-row, rank, h1))
    elif len(row) < 2 or bool(np.all(row[1:] > row[:-1])):
        by = stable_argsort(h1)  # rows in commit order: ties keep it
    else:
        by = np.lexsort((row, h1))
    s1 = h1[by]
    same = s1[1:] == s1[:-1]
    at = np.flatnonzero(same)  # h2 is compared only where h1 repeats
    if len(at) and bool(np.any(h2[by[at]] != h2[by[at + 1]])):
        # Two keys share h1 (1 in 10¹² at 10⁷ keys): group by the whole hash instead.
        by = np.lexsort((-row, rank, h2, h1)) if latest else np.lexsort((row, h2, h1))
        s1, s2 = h1[by], h2[by]
        same = (s1[1:] == s1[:-1]) & (s2[1:] == s2[:-1])
    first = np.ones(len(by), bool)
    first[1:] = ~same
    won = by[first]
    keep = slice(None) if bool(first.all()) else first  # no key twice: no copy of the hashes
    order = None if rows.order is None else rows.order.take(pa.array(won))
    return KeyedRows(s1[keep], h2[won], row[won], order), by[~first]


def _find(entries: KeyedRows, h1: np.ndarray, h2: np.ndarray) -> np.ndarray:
    """Per (h1, h2), its position in `entries` (sorted by h1), -1 where it holds no such key."""
    return find_keys(entries.h1, entries.h2, h1, h2)


def find_keys(
    sorted_h1: np.ndarray, sorted_h2: np.ndarray, h1: np.ndarray, h2: np.ndarray
) -> np.ndarray:
    """Per (h1, h2), its position among the keys (`sorted_h1`, `sorted_h2`), sorted by h1;
    -1 where they hold no such key. Pure."""
    return _search(sorted_h1, sorted_h2, h1, h2)[0]


def _search(
    sorted_h1: np.ndarray, sorted_h2: np.ndarray, h1: np.ndarray, h2: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """`find_keys`, and per (h1, h2) where h1 would be inserted among the keys (before an
    equal one)."""
    out = np.full(len(h1), -1, np.int64)
    if not len(sorted_h1) or not len(h1):
        return out, np.zeros(len(h1), np.int64)
    at = np.searchsorted(sorted_h1, h1, side="left")
    clipped = np.minimum(at, len(sorted_h1) - 1)
    same_h1 = sorted_h1[clipped] == h1
    found = same_h1 & (sorted_h2[clipped] == h2)
    out[found] = clipped[found]
    for i in np.nonzero(same_h1 & ~found)[0]:  # h1 shared by two keys: walk its run
        j = int(at[i])
        while j < len(sorted_h1) and sorted_h1[j] == h1[i]:
            if sorted_h2[j] == h2[i]:
                out[i] = j
                break
            j += 1
    return out, at


def _beats(new: pa.Array, old: pa.Array) -> np.ndarray:
    """Per pair, whether the new row wins under `latest`: a greater or equal order (equal: the
    later commit, which the new row is), or any order against a null one."""
    at_least = pc.fill_null(pc.greater_equal(new, old), False)
    wins: np.ndarray = pc.or_(pc.is_null(old), at_least).to_numpy(zero_copy_only=False)
    return wins


@dataclass(frozen=True)
class _Interleaved:
    """An index's entries and new winners (both sorted by h1, each key once) in one h1 order, a
    stable merge (an index entry before a new one of its h1), where no two keys share an h1:
    a key both hold is a pair of adjacent entries."""

    by: np.ndarray
    """Positions into the index's entries then the winners', in merged order."""
    h1: np.ndarray
    """The h1s in merged order."""
    pairs: np.ndarray
    """Each merged position `i` where `by[i]` is an index entry and `by[i + 1]` the winner of
    its key."""
    at: np.ndarray
    """Per winner, its key's index position; -1 for a key the index does not hold."""

    @classmethod
    def of(cls, old: KeyedRows, w: KeyedRows) -> _Interleaved | None:
        """`old` and `w` merged; None where two keys share an h1 (1 in 10¹² at 10⁷ keys)."""
        both = np.concatenate([old.h1, w.h1])
        by = np.argsort(both, kind="stable")  # two sorted runs: one merge pass
        h1 = both[by]
        pairs = np.flatnonzero(h1[1:] == h1[:-1])
        at = np.full(len(w), -1, np.int64)
        if len(pairs):
            first, second = by[pairs], by[pairs + 1] - len(old)
            if bool(np.any(np.diff(pairs) == 1) | np.any(first >= len(old)) | np.any(second < 0)):
                return None  # an h1 three times, or twice in one side
            if bool(np.any(old.h2[first] != w.h2[second])):
                return None
            at[second] = first
        return cls(by, h1, pairs, at)

    def merged(self, old: KeyedRows, w: KeyedRows, beats: np.ndarray) -> KeyedRows:
        """The index after: per pair the index entry, or the winner where it `beats` it (a mask
        over `w`), in its place; every other entry as it is."""
        keep = np.ones(len(self.by), bool)
        wins = beats[self.by[self.pairs + 1] - len(old)]
        keep[self.pairs[wins]] = False  # the index entry beaten
        keep[self.pairs[~wins] + 1] = False  # the new row that lost to it
        at = self.by[keep]
        order = None
        if old.order is not None and w.order is not None:
            both = pa.concat_arrays([old.order, w.order.cast(old.order.type)])
            order = both.take(pa.array(at))
        return KeyedRows(
            self.h1[keep],
            np.concatenate([old.h2, w.h2])[at],
            np.concatenate([old.row, w.row])[at],
            order,
        )


def _merged(
    old: KeyedRows, w: KeyedRows, at: np.ndarray, insert_at: np.ndarray, beats: np.ndarray
) -> KeyedRows:
    """The index after: `old` with the positions a new row beat taking that row, and the new
    keys inserted where they sort (by h1; `insert_at`, their search positions in `old`).
    Places each column once into its final place."""
    matched = at >= 0
    replaced = np.nonzero(matched & beats)[0]
    fresh = np.nonzero(~matched)[0]
    # New keys go before the old entries at their search position; `w` is sorted by h1, so
    # the j-th fresh key lands at its position plus the j fresh keys before it, and old entry
    # i at i plus the fresh keys inserted at or before it.
    fresh_at = insert_at[fresh]
    new_at = fresh_at + np.arange(len(fresh))
    is_old = np.ones(len(old) + len(fresh), bool)
    is_old[new_at] = False
    replaced_at = at[replaced] + np.searchsorted(fresh_at, at[replaced], side="right")

    def column(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.empty(len(is_old), a.dtype)
        out[is_old] = a  # masks copy in order, faster than scattering by position
        out[~is_old] = b[fresh]
        out[replaced_at] = b[replaced]
        return out

    order = None
    if old.order is not None and w.order is not None:
        source = np.empty(len(is_old), np.int64)  # old i, or len(old) + j of w
        source[is_old] = np.arange(len(old))
        source[replaced_at] = len(old) + replaced
        source[new_at] = len(old) + fresh
        both = pa.concat_arrays([old.order, w.order.cast(old.order.type)])
        order = both.take(pa.array(source))
    return KeyedRows(column(old.h1, w.h1), column(old.h2, w.h2), column(old.row, w.row), order)


def take_rows(rows: KeyedRows, at: np.ndarray) -> KeyedRows:
    """The rows of `rows` at the positions `at`, in that order. Pure."""
    order = None if rows.order is None else rows.order.take(pa.array(at, pa.int64()))
    return KeyedRows(rows.h1[at], rows.h2[at], rows.row[at], order)


def concat_rows(parts: Sequence[KeyedRows], order_type: pa.DataType | None = None) -> KeyedRows:
    """`parts` one after the other; order values kept when every part has them (cast to the
    first's type), and of `order_type` for no parts at all. Pure."""
    if not parts:
        none = np.zeros(0, np.uint64)
        empty = None if order_type is None else pa.array([], order_type)
        return KeyedRows(none, none.copy(), np.zeros(0, np.int64), empty)
    orders = [p.order for p in parts if p.order is not None]
    order = None
    if orders and len(orders) == len(parts):
        order = pa.concat_arrays([o.cast(orders[0].type) for o in orders])
    return KeyedRows(
        np.concatenate([p.h1 for p in parts]),
        np.concatenate([p.h2 for p in parts]),
        np.concatenate([p.row for p in parts]),
        order,
    )


def winners_of(index: KeyIndex, keys: KeyHashes) -> np.ndarray:
    """Per row of `keys`, the winning row id of its key in `index`; -1 for a null id or a key
    the index does not hold. Pure."""
    at = _find(index.entries, keys.h1, keys.h2)
    found = keys.present & (at >= 0)
    out = np.full(len(keys), -1, np.int64)
    out[found] = index.entries.row[at[found]]
    return out


def one_per_key(keys: KeyHashes, order: pa.Array | None, latest: bool) -> np.ndarray:
    """Per row of `keys` (rows in commit order), whether it is its key's winner among them: the
    first row of a key, or under `latest` the greatest `order`, ties to the later row. A row
    without a key is always kept. Pure."""
    rows = np.arange(len(keys), dtype=np.int64)
    lost = _one_per_key(KeyedRows.of(keys, rows, order), latest)[1]  # positions among the keyed
    keep: np.ndarray = np.ones(len(keys), bool)
    keep[rows[keys.present][lost]] = False
    return keep
