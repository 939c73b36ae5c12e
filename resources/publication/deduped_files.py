"""`DedupedFiles`: the files a publication serves under the stream's dedupe policy, so that every
published snapshot — live small objects included — holds each key once
(docs/concepts/keys-and-changes.md).

The publisher decides which ledger files a publication covers (ids `1..upper`); this turns them
into what readers are served, copy-on-write:
1. Start from the current publication's state (its `dedupe.json` and key index `keys.arrow`,
   covering `1..base`), or from nothing.
2. Read the key (and `order_by`) of every row committed above `base` and resolve them against
   the index (`resources.dedupe.key_index.resolve`): the new index, and the rows that lost now.
3. Per file: unchanged since the last publication — served as it was; a new small object none
   of whose rows lost — served itself; otherwise a copy without the rows that lost is written
   under `deduped/dt=<dt>/` and served. A merged object (the merge kept one row per key of its
   range) serves the rows whose key's winner lies in its range.
4. The new state and index are written into the publication's own directory, before the ledger
   records it: a publication that is never recorded leaves orphans only.

Under `first` a row can only lose to an earlier one, so only new small objects are ever copied
(re-sends of records already published); under `latest` an older file loses the rows a newer
record beats, and is copied again.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.dedupe.key_index import (
    POSITION_MASK,
    ROW_BITS,
    KeyedRows,
    KeyIndex,
    KeyIndexError,
    Resolution,
    concat_rows,
    object_of,
    one_per_key,
    resolve,
    row_ids,
    take_rows,
    winners_of,
)
from resources.dedupe.keys import HASH_NAME, KeyHashes, hash_ids
from resources.dedupe.retracted_keys import RETRACTED_NAME, RetractedKeys
from resources.dedupe.served import INDEX_NAME, NOTHING, STATE_NAME, ServedFile, ServedState
from resources.dedupe.word_sort import stable_argsort_small
from resources.key_settings import LATEST
from resources.ledger.model import RegisteredObject
from resources.ledger.publication import DataFile, Publication
from resources.objects.base import ObjectStore, ObjectStoreError
from resources.publication.pending_date import PendingDate, Span
from resources.publication.publication_state import served_state
from resources.publication.retraction import retracted_keys, retracted_rows
from resources.schema.arrow import arrow_type
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

COPIES_PREFIX = "deduped/"
"""Where copies without the rows that lost are written (under the table's root)."""
HASH_GROUP_ROWS = 1 << 20
"""Ids hashed in one call: large enough that a call's overhead is nothing, small enough that
their text stays far below Arrow's 2 GiB string offsets."""
READ_THREADS = 16
"""Objects fetched (or copied) at once: a publication reads every new small object's key
column, and an object store answers one GET in tens of milliseconds."""
HASH_THREADS = 2
"""Groups of ids hashed at once (the machines leasehold runs on have at least two cores)."""

RowMask = Callable[[pa.Table], np.ndarray]
"""Which rows of a file's table to serve."""


class DedupedFiles:
    """What a table partition's publication serves under the stream's dedupe policy."""

    def __init__(self, config: StreamConfig, objects: ObjectStore) -> None:
        """`objects` is the table's object store; `config.dedupe` is active."""
        self.config = config
        self.objects = objects
        self.record_id = config.record_id or ""
        self.latest = config.dedupe.mode == LATEST
        order_by = config.dedupe.order_by
        columns = {c.name: c.type for c in config.columns}
        self.order_by = order_by if self.latest else None
        self.order_type = arrow_type(columns[order_by]) if self.latest and order_by else None

    # -- the state of a publication --------------------------------------------------------------

    def state(
        self, publication: Publication | None, hash_name: str = HASH_NAME
    ) -> tuple[ServedState | None, KeyIndex]:
        """`served_state(publication)` and its key index (empty, of the hash `hash_name`,
        without a state). Raises `ObjectStoreError`, `ServedStateError`, `KeyIndexError`."""
        state = None if publication is None else served_state(self.objects, publication)
        return state, self._index(publication, state, hash_name)

    def key_index(self, publication: Publication, state: ServedState) -> KeyIndex:
        """The key index beside `publication`'s `state`. Raises `ObjectStoreError`,
        `KeyIndexError`."""
        return self._index(publication, state, HASH_NAME)

    def _index(
        self, publication: Publication | None, state: ServedState | None, hash_name: str
    ) -> KeyIndex:
        """The key index beside `state` (`publication`'s), empty of `hash_name` without one."""
        if state is None or publication is None:
            return KeyIndex.empty(self.order_type, hash_name)
        data = self.objects.get_buffer(self.objects.key_of(publication.location + state.index))
        index = KeyIndex.from_bytes(data, self.order_type)
        if index.upper != state.upper:
            raise KeyIndexError(
                f"a key index of ids 1..{index.upper} beside a state of ids 1..{state.upper}"
            )
        return index

    # -- serving ---------------------------------------------------------------------------------

    def serve(
        self,
        dt: str,
        base: Publication | None,
        small: Sequence[RegisteredObject],
        files: Sequence[DataFile],
        spans: dict[str, Span],
        upper: int,
        version_key: str,
    ) -> tuple[list[DataFile], ServedState]:
        """The files to serve instead of `files` (the ledger's, covering ids `1..upper`;
        `spans[url]` = the ids a ledger file covers), and the state written under
        `version_key` with the new key index. `small` is the partition's small objects (the
        ledger's). Raises the object store's errors and `KeyIndexError`/`ServedStateError`
        (the publication fails and is retried)."""
        return self.finish(self.prepare(dt, base, small, files, spans, upper), version_key)

    def prepare(
        self,
        dt: str,
        base: Publication | None,
        small: Sequence[RegisteredObject],
        files: Sequence[DataFile],
        spans: dict[str, Span],
        upper: int,
        hash_name: str = HASH_NAME,
    ) -> PendingDate:
        """`serve`'s reads: the state and key index `base` left (a new one of the hash
        `hash_name` without `base`), and the keyed rows committed since. Raises what `serve`
        raises."""
        state = None if base is None else served_state(self.objects, base)
        above = 0 if state is None else state.upper
        named = sorted(
            ((o.url, o.object_id) for o in small if above < o.object_id <= upper),
            key=lambda n: n[1],
        )
        with ThreadPoolExecutor(1) as pool:
            # The index and the new rows' key columns are read at once: neither needs the other.
            reading = pool.submit(self._index, base, state, hash_name)
            try:
                tables: list[pa.Table] | None = list(self._read_all([url for url, _ in named]))
            except (ObjectStoreError, FileNotFoundError):  # S3's missing key, a local one
                if state is not None or all(f.url in {o.url for o in small} for f in files):
                    raise
                tables = None
            index = reading.result()
        if tables is None:
            new = self._from_merged(files, spans, index.hash_name, upper)
        else:
            new = self._keyed(named, tables, index.hash_name)
        retracted = retracted_rows(small, above, upper)
        before = self._retracted_keys(base, state, index.hash_name)
        return PendingDate(dt, state, index, new, small, files, spans, upper, retracted, before)

    def finish(
        self,
        p: PendingDate,
        version_key: str,
        foreign: np.ndarray | None = None,
        taken: np.ndarray | None = None,
        retracted: np.ndarray | None = None,
    ) -> tuple[list[DataFile], ServedState]:
        """`serve`'s resolution and writes for `p`; under `scope: table`, `foreign` (a mask over
        `p.new`) marks the rows that lost to another date before the date's own resolution,
        and `taken` (a mask over `p.index`'s entries, under `latest`) the keys another date
        took: they leave the index and the files that served them. `retracted` (row ids,
        `resources.publication.retraction`) lose wherever they are: new rows and index entries.
        Raises what `serve` raises."""
        if len(p.retracted):
            retracted = p.retracted if retracted is None else np.union1d(retracted, p.retracted)
        if retracted is not None and len(retracted):
            foreign = _or(foreign, np.isin(p.new.row, retracted))
            taken = _or(taken, np.isin(p.index.entries.row, retracted))
        index, new, lost_elsewhere = self._left_out(p, foreign, taken)
        resolution = resolve(index, new, p.upper, self.latest)
        lost = _by_object(concat_rows([resolution.lost, lost_elsewhere], self.order_type))
        small_urls = {o.url for o in p.small}
        before = p.state.by_source() if p.state is not None else {}

        def served_for(f: DataFile) -> ServedFile:
            return self._served(
                p.dt,
                f,
                p.spans[f.url],
                f.url in small_urls,
                before.get(f.url),
                p.index.upper,
                resolution,
                _within(lost, p.spans[f.url]),
            )

        # Copies read and write whole objects: in parallel, as the key columns are read (an
        # object store answers one request in tens of milliseconds). The new key index is
        # merged and written meanwhile (the state that names the copies after them).
        with ThreadPoolExecutor(READ_THREADS) as pool:
            index_written = pool.submit(lambda: self._write_index(version_key, resolution.index))
            served = list(pool.map(served_for, p.files))
            index_written.result()
        result = self._write_state(p, version_key, served, retracted)
        copies = sum(1 for f in served if f.copied)
        if copies or result.dropped_rows:
            log.info(
                "%s dt=%s: %d rows lost to another record of their key (%s%s); %d files copied",
                self.config.name, p.dt, result.dropped_rows, self.config.dedupe.mode,
                f", {len(lost_elsewhere)} to other dates" if len(lost_elsewhere) else "", copies,
            )  # fmt: skip
        return [DataFile(f.url, f.bytes, f.rows) for f in served if f.served], result

    def _write_state(
        self,
        p: PendingDate,
        version_key: str,
        served: list[ServedFile],
        retracted: np.ndarray | None,
    ) -> ServedState:
        """The state (and the keys replacements retracted) written under `version_key`."""
        committed = sum(o.row_count for o in p.small if o.object_id <= p.upper)
        gone, taken_out = retracted_keys(p, retracted)
        if len(gone):
            self.objects.put_bytes(version_key + RETRACTED_NAME, gone.to_bytes())
        result = ServedState(
            p.upper, tuple(served), committed, retracted=RETRACTED_NAME if len(gone) else "",
            retracted_rows=taken_out,
        )  # fmt: skip
        self.objects.put_bytes(version_key + STATE_NAME, result.to_json())
        return result

    def _left_out(
        self, p: PendingDate, foreign: np.ndarray | None, taken: np.ndarray | None
    ) -> tuple[KeyIndex, KeyedRows, KeyedRows]:
        """`p`'s index without the `taken` entries, its new rows without the `foreign` ones,
        and both of those, which lose whatever the date's own resolution says."""
        new, lost_elsewhere = p.new, take_rows(p.new, np.zeros(0, np.int64))
        if foreign is not None and foreign.any():
            lost_elsewhere = take_rows(p.new, np.nonzero(foreign)[0])
            new = take_rows(p.new, np.nonzero(~foreign)[0])
        index = p.index
        if taken is not None and taken.any():
            entries = index.entries
            lost_elsewhere = concat_rows(
                [lost_elsewhere, take_rows(entries, np.nonzero(taken)[0])], self.order_type
            )
            index = replace(index, entries=take_rows(entries, np.nonzero(~taken)[0]))
        return index, new, lost_elsewhere

    def _from_merged(
        self, files: Sequence[DataFile], spans: dict[str, Span], hash_name: str, upper: int
    ) -> KeyedRows:
        """The keyed rows of a partition first published under a policy after its small
        objects were collected (the policy turned on for a table already switched to merged
        objects): its merged objects, each row named by its range's end (ranges are in commit
        order, and a merge kept one row per key). Otherwise the new rows are the small objects
        committed since the index (their files are kept until a publication covering them is
        current), so that a row id names a small object's row (what rollups count by)."""
        log.warning(
            "%s: small objects of 1..%d are gone: the key index starts from the merged objects",
            self.config.name, upper,
        )  # fmt: skip
        named = sorted(((f.url, spans[f.url][1]) for f in files), key=lambda n: n[1])
        return self._keyed(named, list(self._read_all([url for url, _ in named])), hash_name)

    def _keyed(
        self, named: list[tuple[str, int]], tables: list[pa.Table], hash_name: str
    ) -> KeyedRows:
        """The keyed rows of `tables`, the key columns of the files `named` (URL, the object id
        their rows are named by, ascending), their ids hashed with `hash_name` together in a few
        large calls (which cost less than one per file), into arrays of all their rows."""
        sizes = [t.num_rows for t in tables]
        h1, h2 = np.empty(sum(sizes), np.uint64), np.empty(sum(sizes), np.uint64)
        present = np.empty(sum(sizes), bool)
        rows = np.concatenate(
            [row_ids(object_id, n) for n, (_, object_id) in zip(sizes, named, strict=True)]
            or [np.zeros(0, np.int64)]
        )
        starts = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)

        def hash_group(group: tuple[int, int]) -> None:
            lo, hi = group
            ids = _same_type([self._ids(t) for t in tables[lo:hi]])
            keys = hash_ids(pa.chunked_array(ids, ids[0].type), hash_name)
            start, end = starts[lo], starts[hi]
            h1[start:end], h2[start:end], present[start:end] = keys.h1, keys.h2, keys.present

        # Hashing is numpy's work on large arrays, which releases the GIL: one thread a core.
        with ThreadPoolExecutor(HASH_THREADS) as pool:
            list(pool.map(hash_group, _groups(sizes, HASH_GROUP_ROWS)))
        order = None
        if self.order_type is not None:
            orders = [self._order(t) for t in tables]
            order = pa.concat_arrays(orders) if orders else pa.array([], self.order_type)
        return KeyedRows.of(KeyHashes(h1, h2, present), rows, order)

    def _served(
        self,
        dt: str,
        f: DataFile,
        span: Span,
        is_small: bool,
        prev: ServedFile | None,
        base: int,
        resolution: Resolution,
        lost: KeyedRows,
    ) -> ServedFile:
        """What to serve for the ledger file `f` (ids `span`), given what the publication
        before served for it (`prev`) and its rows that lost now (`lost`); `resolution`'s
        index is asked for only by a merged object first served under the policy."""
        if prev is not None and (not len(lost) or not prev.served):
            return prev
        if prev is None and is_small and span[1] > base:
            # A new small object: the rows of it that lost, by position (nothing of one of no
            # rows, a retraction marker's: an engine has no use for it).
            if not f.row_count:
                return ServedFile(f.url, NOTHING, 0, 0, *span)
            if not len(lost):
                return ServedFile(f.url, f.url, f.row_count, f.content_length, *span)
            gone = lost.row & POSITION_MASK
            if len(np.unique(gone)) == f.row_count:
                # Every row lost (a producer's retry of a whole object): nothing to read.
                return ServedFile(f.url, NOTHING, 0, 0, *span)
            return self._copy(dt, f, span, f.url, lambda t: _positions_kept(t, gone))
        if prev is not None:
            # Rows of it beaten now (latest): their keys go, from what it served.
            return self._copy(
                dt, f, span, prev.url, lambda t: self._keys_kept(t, lost, resolution.hash_name)
            )
        return self._copy(dt, f, span, f.url, lambda t: self._winners_kept(t, span, resolution))

    # -- row masks ---------------------------------------------------------------------------

    def _keys_kept(self, table: pa.Table, lost: KeyedRows, hash_name: str) -> np.ndarray:
        """The rows whose key is none of the keys of `lost` (hashed with `hash_name`)."""
        keys = hash_ids(self._ids(table), hash_name)
        keep = np.ones(table.num_rows, bool)
        gone = set(zip(lost.h1.tolist(), lost.h2.tolist(), strict=True))
        for i in np.nonzero(keys.present & np.isin(keys.h1, lost.h1))[0]:
            keep[i] = (int(keys.h1[i]), int(keys.h2[i])) not in gone
        return keep

    def _winners_kept(self, table: pa.Table, span: Span, resolution: Resolution) -> np.ndarray:
        """A merged object's rows to serve: one per key (the best of the file by the policy,
        as its merge kept), and only where the key's winner lies in its range."""
        index = resolution.index
        keys = hash_ids(self._ids(table), index.hash_name)
        winners = object_of(winners_of(index, keys))
        in_range = (winners > span[0]) & (winners <= span[1])
        best = one_per_key(keys, self._order(table), self.latest)
        keep: np.ndarray = best & (in_range | ~keys.present)
        return keep

    # -- I/O -----------------------------------------------------------------------------------

    def _copy(
        self, dt: str, f: DataFile, span: Span, read_from: str, mask_of: RowMask
    ) -> ServedFile:
        """`read_from` without the rows `mask_of(table)` says go; served as-is when none go."""
        table = self._read(read_from)
        keep = mask_of(table)
        if keep.all():
            size = f.content_length if read_from == f.url else self._size(read_from)
            return ServedFile(f.url, read_from, table.num_rows, size, *span)
        if not keep.any():
            return ServedFile(f.url, NOTHING, 0, 0, *span)
        kept = table.take(pa.array(np.nonzero(keep)[0]))
        sink = io.BytesIO()
        # As ingestion writes a table object: dictionary pages only where they pay (a third of
        # the time of Parquet's default of all columns).
        dictionary = [c for c in self.config.dictionary_columns if c in kept.column_names]
        pq.write_table(kept, sink, use_dictionary=dictionary or False)
        name = f.url.rstrip("/").rsplit("/", 1)[-1]
        key = f"{COPIES_PREFIX}dt={dt}/{uuid.uuid4().hex[:12]}-{name}"
        url = self.objects.put_bytes(key, sink.getvalue())
        return ServedFile(f.url, url, kept.num_rows, len(sink.getvalue()), *span)

    def _size(self, url: str) -> int:
        return self.objects.size(self.objects.key_of(url)) or 0

    def _read(self, url: str) -> pa.Table:
        data = self.objects.get_bytes(self.objects.key_of(url))
        # One file read in each of `READ_THREADS`: Arrow's own threads would only contend.
        with pq.ParquetFile(pa.BufferReader(data)) as file:
            return file.read(use_threads=False)

    def _read_keys(self, url: str) -> pa.Table:
        data = self.objects.get_bytes(self.objects.key_of(url))
        with pq.ParquetFile(pa.BufferReader(data)) as file:
            wanted = [c for c in (self.record_id, self.order_by) if c]
            present = [c for c in wanted if c in file.schema_arrow.names]
            return file.read(columns=present, use_threads=False)

    def _read_all(self, urls: list[str]) -> Iterator[pa.Table]:
        with ThreadPoolExecutor(READ_THREADS) as pool:
            yield from pool.map(self._read_keys, urls)

    def _ids(self, table: pa.Table) -> pa.Array:
        if self.record_id in table.column_names:
            return table.column(self.record_id).combine_chunks()
        return pa.nulls(table.num_rows, pa.string())

    def _order(self, table: pa.Table) -> pa.Array | None:
        if self.order_type is None or self.order_by is None:
            return None
        if self.order_by not in table.column_names:
            return pa.nulls(table.num_rows, self.order_type)
        return table.column(self.order_by).combine_chunks().cast(self.order_type)

    def _retracted_keys(
        self, base: Publication | None, state: ServedState | None, hash_name: str
    ) -> RetractedKeys:
        if base is None or state is None or not state.retracted:
            return RetractedKeys.empty(hash_name)
        key = self.objects.key_of(base.location + state.retracted)
        return RetractedKeys.from_bytes(self.objects.get_bytes(key))

    def _write_index(self, version_key: str, index: KeyIndex) -> None:
        # An Arrow file: the next publication reads it without decoding it (hashes are random:
        # compressing them would only cost time).
        self.objects.put_bytes(version_key + INDEX_NAME, index.to_bytes())


def _groups(sizes: Sequence[int], rows: int) -> Iterator[tuple[int, int]]:
    """Consecutive `(lo, hi)` ranges over `sizes`, each of about `rows` rows (at least one)."""
    lo, held = 0, 0
    for i, size in enumerate(sizes):
        held += size
        if held >= rows:
            yield lo, i + 1
            lo, held = i + 1, 0
    if lo < len(sizes):
        yield lo, len(sizes)


def _same_type(ids: list[pa.Array]) -> list[pa.Array]:
    """`ids` as arrays of one type (the text they are hashed as, where files differ)."""
    if all(a.type == ids[0].type for a in ids):
        return ids
    return [a.cast(pa.string()) for a in ids]


def _or(mask: np.ndarray | None, more: np.ndarray) -> np.ndarray:
    return more if mask is None else mask | more


def _positions_kept(table: pa.Table, gone: np.ndarray) -> np.ndarray:
    keep = np.ones(table.num_rows, bool)
    keep[gone] = False
    return keep


def _by_object(rows: KeyedRows) -> KeyedRows:
    """`rows` sorted by small object id (so a file's rows are one slice: `_within`)."""
    at = stable_argsort_small(object_of(rows.row))
    return KeyedRows(rows.h1[at], rows.h2[at], rows.row[at], None)


def _within(rows: KeyedRows, span: Span) -> KeyedRows:
    """The rows of `rows` (sorted by small object id: `_by_object`) whose small object id lies
    in `span`."""
    lo, hi = np.searchsorted(rows.row, [(span[0] + 1) << ROW_BITS, (span[1] + 1) << ROW_BITS])
    return KeyedRows(rows.h1[lo:hi], rows.h2[lo:hi], rows.row[lo:hi], None)
