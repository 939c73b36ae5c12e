"""`FirstRecords`: under `dedupe: first`, the rows of a rollup batch that count — each key's
first record, as the published table serves it (docs/concepts/keys-and-changes.md).

A record's fate under `first` is final once the ids before it are known: a later record of its
key never wins. So a batch `(after, upto]` counts a row exactly when the key index of a
publication covering `upto` names that row as its key's winner, and a replayed batch counts the
same rows: Storm's transactional rule holds. The runner therefore plans batches only up to the
current publication's ids (`upper`): rollups of a deduplicated stream follow its publications.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.dedupe.key_index import KeyIndex, row_ids, winners_of
from resources.dedupe.keys import hash_ids
from resources.objects.base import ObjectStore
from resources.publication.deduped_files import DedupedFiles
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)


class FirstRecords:
    """The first record of each key, per small object of a batch."""

    def __init__(
        self, config: StreamConfig, store: CoordinationStore, objects: ObjectStore, table: str
    ) -> None:
        """`config` keeps the first record of a key (`dedupe.mode` first); `objects` is its
        table's object store, `table` its ledger table."""
        self.config = config
        self.store = store
        self.table = table
        self.deduped = DedupedFiles(config, objects)

    def index(self, dt: str) -> KeyIndex:
        """The key index of `dt`'s current publication (empty, `upper` 0, before the first).
        Raises the store's and object store's errors, `KeyIndexError`, `ServedStateError`."""
        publications = self.store.publications(self.table, dt)
        return self.deduped.state(publications[-1] if publications else None)[1]

    def kept(self, path: str, object_id: int, index: KeyIndex, scratch: Path) -> str:
        """`path` (small object `object_id`, a local file), or a copy under `scratch` without
        its rows that are not their key's first record in `index` (which covers the id)."""
        rows = pq.read_table(path)
        keys = hash_ids(self._ids(rows), index.hash_name)
        keep = ~keys.present | (winners_of(index, keys) == row_ids(object_id, rows.num_rows))
        if keep.all():
            return path
        out = scratch / "first" / f"{object_id}.parquet"
        out.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows.filter(pa.array(keep)), out)
        log.debug("small object %d: %d re-sent rows not counted", object_id, (~keep).sum())
        return str(out)

    def _ids(self, rows: pa.Table) -> pa.Array:
        name = self.config.record_id or ""
        if name in rows.column_names:
            return rows.column(name).combine_chunks()
        return pa.nulls(rows.num_rows, pa.string())
