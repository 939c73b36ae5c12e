"""Every private Dagster name leasehold uses, in one module: the embedded instance's event log.

Dagster's `SqliteEventLogStorage` builds a new SQLAlchemy engine, and opens and closes a new
SQLite connection, for every transaction: twice for each asset event (the run's shard, then the
cross-run index shard), and a range run stores two asset events per source partition. That
pattern — engine set-up, statements compiled into a cache that dies with its engine, a close
that checkpoints and deletes the WAL — not the data written, is what an event costs.
`PooledSqliteEventLogStorage` keeps one engine and one open connection per shard instead.
What it buys, measured, and how to turn it off (`LEASEHOLD_EVENT_LOG=dagster`):
docs/dagster-internals.md.

Two more choices, both about fsync, which is what an event costs once connections are kept:
- `synchronous=NORMAL`, SQLite's advice for WAL mode: a commit no longer waits for the disk. A
  killed process loses nothing; a power cut may lose the newest events, never corrupt the file.
  For this log that is safe: the lease store (fsync on every commit) decides what is ingested,
  and a re-run of a partition whose event was lost records it again as already complete.
- The webserver follows a live run by watching its shard's `.db` file, which only changes when
  the WAL is checkpointed — Dagster's close-per-transaction did that on every close. Here a run
  shard is checkpointed CHECKPOINT_DELAY_SECONDS after a write, by one timer for all shards: a
  live run shows up at most that late, and a burst of events costs one checkpoint, not one each.
  The timer is not a daemon thread, so a run worker that exits still checkpoints its last events.

Everything else is Dagster's own: schema, queries, file layout, WAL journal. An instance written
with this storage reads the same with Dagster's default one and vice versa.

What this module relies on, all of it outside Dagster's public API (`dagster==1.13.*`), each
pinned by tests/dagster/test_dagster_internals.py so that an upgrade that changes one fails
there first:
- the base class `SqliteEventLogStorage`, its constructor `(base_dir, inst_data)` and its
  attributes `_base_dir`, `_db_lock` (held around every transaction), `_initialized_dbs`;
- the private methods it overrides: `_connect(shard)` (every connection of the storage comes
  from it), `_store_asset_event(conn, event, event_id)` (the `asset_keys` row of an asset
  event), `_has_asset_key_col_on_connection(conn, column_name)`;
- the private methods it calls: `_initdb(engine)`, `_get_asset_entry_values(event, event_id,
  has_asset_key_index_cols)`, `_has_asset_key_index_cols_on_connection(conn)`,
  `_store_asset_event_tags(conn, events, event_ids)`;
- what `store_event` writes for an asset event (the row in the run shard, the same row in the
  index shard, its tags, the `asset_keys` row), which `store_event_batch` reproduces;
- the names `ASSET_EVENTS`, `ASSET_CHECK_EVENTS`, `EVENT_TYPE_TO_PIPELINE_RUN_STATUS`,
  `AssetKeyTable`, `INDEX_SHARD_NAME`, `create_db_conn_string`;
- the environment variable `DAGSTER_EVENT_BATCH_SIZE`, which makes Dagster hand a run's planned
  events to `store_event_batch` at once;
- the module paths of Dagster's SQLite run and schedule storages, which a `dagster.yaml` naming
  its own event log storage must name too (Dagster's instance documentation shows them so).

Private Dagster names elsewhere: none in resources/, coordination_assets/, bin/ or bench/ (a
test checks). The tests use a few of their own (a run id, a check's status enum, a sensor's log
records); a change there fails a test, never a run.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

from dagster import EventLogEntry
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import AssetKeyTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.sqlite import create_db_conn_string
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import QueuePool

# Dagster's SQLite run and schedule storages, as a `dagster.yaml` names them (module, class).
SQLITE_RUN_STORAGE = ("dagster._core.storage.runs", "SqliteRunStorage")
SQLITE_SCHEDULE_STORAGE = ("dagster._core.storage.schedules", "SqliteScheduleStorage")

# Dagster's own busy timeout for its SQLite storages.
SQLITE_BUSY_TIMEOUT_SECONDS = 30
# A run's shard receives events only while the run executes; a daemon or webserver that sees
# thousands of runs keeps engines (and open files) for the most recent ones only.
MAX_OPEN_RUN_SHARDS = 16
# How late the webserver's file watcher may see a live run's newest events.
CHECKPOINT_DELAY_SECONDS = 0.2

# Planned events per transaction at run creation: a default range run's (2,000) in one.
EVENT_BATCH_SIZE_VAR = "DAGSTER_EVENT_BATCH_SIZE"
EVENT_BATCH_SIZE = 2000


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """Dagster's SQLite event log with one engine and open connection per shard."""

    def __init__(self, base_dir: str, inst_data: Any = None) -> None:
        # shard -> (engine, inode of the file it was opened on)
        self._engines: OrderedDict[str, tuple[Engine, int]] = OrderedDict()
        self._unchecked: set[str] = set()  # run shards written since their last checkpoint
        self._checkpoint_timer: threading.Timer | None = None
        self._asset_key_columns: set[str] = set()  # seen in the index shard's asset_keys
        super().__init__(base_dir, inst_data)
        # Dagster batches events only where this is set; whichever process uses this storage
        # (`leasehold run`, the daemon creating a sensor's runs) gets `store_event_batch`.
        os.environ.setdefault(EVENT_BATCH_SIZE_VAR, str(EVENT_BATCH_SIZE))
        this = weakref.ref(self)
        os.register_at_fork(after_in_child=lambda: _forget_engines_after_fork(this))

    @classmethod
    def from_config_value(cls, inst_data: Any, config_value: Any) -> PooledSqliteEventLogStorage:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def _connect(self, shard: str) -> Iterator[Connection]:
        with self._db_lock:
            with self._engine(shard).connect() as conn:
                sqlite = cast(sqlite3.Connection, conn.connection.driver_connection)
                changes = sqlite.total_changes
                with conn.begin():
                    yield conn
                if shard != INDEX_SHARD_NAME and sqlite.total_changes != changes:
                    self._checkpoint_soon(shard)

    def store_event_batch(self, events: Sequence[EventLogEntry]) -> None:
        """At run creation Dagster hands over the run's planned events — one per partition of
        a range run — as one batch (`DAGSTER_EVENT_BATCH_SIZE`); the base class stores them one
        by one, two transactions each, before the run can start. Here the batch's rows go into
        the run shard in one transaction and into the index shard in another: the same rows,
        in the same order, as `store_event` writes. Anything but asset events of one run is
        stored one by one, as before."""
        if not events or not all(_asset_event_of(events[0].run_id, e) for e in events):
            super().store_event_batch(events)
            return
        inserts = [self.prepare_insert_event(e) for e in events]
        with self.run_connection(events[0].run_id) as conn:
            for insert in inserts:
                conn.execute(insert)
        with self.index_transaction() as conn:
            ids = [_inserted_id(conn, insert) for insert in inserts]
            self._store_asset_event_tags(conn, events, ids)
            for entry, entry_id in _newest_per_asset_and_type(events, ids):
                self._store_asset_event(conn, entry, entry_id)

    def _store_asset_event(self, conn: Connection, event: EventLogEntry, event_id: int) -> None:
        """Dagster inserts the asset's row and, as it nearly always exists, catches the
        integrity error and updates it: an exception per asset event. Update first instead,
        insert only when there was nothing to update."""
        asset_key = event.get_dagster_event().asset_key
        values = self._get_asset_entry_values(
            event, event_id, self._has_asset_key_index_cols_on_connection(conn)
        )
        if asset_key is None or not values:
            return
        key = asset_key.to_string()
        update = AssetKeyTable.update().values(**values).where(AssetKeyTable.c.asset_key == key)
        if conn.execute(update).rowcount:
            return
        try:
            conn.execute(AssetKeyTable.insert().values(asset_key=key, **values))
        except IntegrityError:  # another process inserted it since
            conn.execute(update)

    def _has_asset_key_col_on_connection(self, conn: Connection, column_name: str) -> bool:
        """Dagster asks this on every asset event, by reading the table's schema. A column,
        once added by a migration, stays: remember it."""
        if column_name in self._asset_key_columns:
            return True
        found = super()._has_asset_key_col_on_connection(conn, column_name)
        if found:
            self._asset_key_columns.add(column_name)
        return found

    def _checkpoint_soon(self, shard: str) -> None:
        """Called holding `_db_lock`."""
        self._unchecked.add(shard)
        if self._checkpoint_timer is None:
            self._checkpoint_timer = threading.Timer(
                CHECKPOINT_DELAY_SECONDS, self._checkpoint_written_shards
            )
            self._checkpoint_timer.start()

    def _checkpoint_written_shards(self) -> None:
        with self._db_lock:
            self._checkpoint_timer = None
            shards, self._unchecked = self._unchecked, set()
            for shard in shards:
                cached = self._engines.get(shard)
                if cached is None:  # closed since: the last close checkpoints by itself
                    continue
                with cached[0].connect() as conn:
                    driver = cast(sqlite3.Connection, conn.connection.driver_connection)
                    driver.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def _engine(self, shard: str) -> Engine:
        """The shard's engine; rebuilt if its file was deleted or replaced since it was opened,
        so that writes never go to an unlinked file (another process may wipe the instance)."""
        path = self.path_for_shard(shard)
        inode = os.stat(path).st_ino if os.path.exists(path) else None
        cached = self._engines.get(shard)
        if cached is not None:
            if cached[1] == inode:
                self._engines.move_to_end(shard)
                return cached[0]
            self._engines.pop(shard)[0].dispose()
            self._initialized_dbs.discard(shard)
            if shard == INDEX_SHARD_NAME:
                self._asset_key_columns.clear()
        engine = create_engine(
            create_db_conn_string(self._base_dir, shard),
            poolclass=QueuePool,
            pool_size=1,  # one transaction at a time per process: `_db_lock`
            max_overflow=2,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS, "check_same_thread": False},
        )
        event.listen(engine, "connect", _commit_without_fsync)
        if shard not in self._initialized_dbs:
            self._initdb(engine)
            self._initialized_dbs.add(shard)
        self._engines[shard] = (engine, os.stat(path).st_ino)
        run_shards = [name for name in self._engines if name != INDEX_SHARD_NAME]
        for name in run_shards[:-MAX_OPEN_RUN_SHARDS]:
            self._engines.pop(name)[0].dispose()
        return engine

    def wipe(self) -> None:
        self._dispose_engines()
        super().wipe()

    def dispose(self) -> None:
        self._dispose_engines()
        super().dispose()

    def _dispose_engines(self) -> None:
        with self._db_lock:
            while self._engines:
                self._engines.popitem()[1][0].dispose()  # closing checkpoints


def _newest_per_asset_and_type(
    events: Sequence[EventLogEntry], ids: Sequence[int]
) -> list[tuple[EventLogEntry, int]]:
    """An asset's row in `asset_keys` takes a fixed set of columns from each event type, and
    overwrites them: writing only each (asset, type)'s newest event, in event order, leaves
    the row as one write per event would."""
    seen: set[tuple[Any, Any]] = set()
    newest: list[tuple[EventLogEntry, int]] = []
    for entry, entry_id in reversed(list(zip(events, ids, strict=True))):
        group = (entry.get_dagster_event().asset_key, entry.dagster_event_type)
        if group not in seen:
            seen.add(group)
            newest.append((entry, entry_id))
    return newest[::-1]


def _asset_event_of(run_id: str, entry: EventLogEntry) -> bool:
    """An event `store_event` writes to the run shard and the index shard only, for `run_id`."""
    event = entry.dagster_event
    return (
        entry.run_id == run_id
        and event is not None
        and event.asset_key is not None
        and event.event_type in ASSET_EVENTS
        and event.event_type not in ASSET_CHECK_EVENTS
        and event.event_type not in EVENT_TYPE_TO_PIPELINE_RUN_STATUS
    )


def _commit_without_fsync(sqlite: Any, _record: Any) -> None:
    sqlite.execute("PRAGMA synchronous=NORMAL")


def _forget_engines_after_fork(ref: weakref.ref[PooledSqliteEventLogStorage]) -> None:
    """A forked child must neither use nor close its parent's SQLite connections."""
    storage = ref()
    if storage is None:
        return
    for engine, _ in storage._engines.values():
        engine.dispose(close=False)
    storage._engines.clear()
    storage._unchecked.clear()
    storage._checkpoint_timer = None  # the parent's timer thread does not exist here
    storage._db_lock = threading.Lock()  # the parent may have held it while forking


def _inserted_id(conn: Connection, insert: Any) -> Any:
    """The primary key `insert` (one row, into a table with one) gave its row."""
    key = conn.execute(insert).inserted_primary_key
    assert key is not None  # an INSERT of one row always has one
    return key[0]
