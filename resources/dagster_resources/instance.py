"""The embedded default Dagster instance: SQLite storage whose event log keeps its connections.

Dagster's `SqliteEventLogStorage` builds a new SQLAlchemy engine, and opens and closes a new
SQLite connection, for every transaction: twice for each asset event (the run's shard, then the
cross-run index shard), and a range run stores two asset events per source partition. That
pattern — engine set-up, statements compiled into a cache that dies with its engine, a close
that checkpoints and deletes the WAL — not the data written, is what an event costs
(BENCHMARKS.md, "Dagster's floor per partition").
`PooledSqliteEventLogStorage` keeps one engine and one open connection per shard instead.

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
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

from dagster import DagsterInstance
from dagster._core.events import ASSET_CHECK_EVENTS, ASSET_EVENTS, EVENT_TYPE_TO_PIPELINE_RUN_STATUS
from dagster._core.events.log import EventLogEntry
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.schema import AssetKeyTable
from dagster._core.storage.event_log.sqlite.sqlite_event_log import INDEX_SHARD_NAME
from dagster._core.storage.sqlite import create_db_conn_string
from sqlalchemy import create_engine, event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError
from sqlalchemy.pool import QueuePool

from resources.dagster_resources.runs import GC_TAG, MERGE_TAG, PUBLISH_TAG

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

# Dagster's default SQLite layout under DAGSTER_HOME (history/, history/runs/, schedules/),
# with this module's event log storage.
# Runs that may start a SparkSession (ingestion, merges) running at once, over all streams.
SPARK_RUN_LIMIT = 2
SPARK_POOL = "leasehold_spark"
"""The Dagster pool of every asset whose step may start a SparkSession. A pool, not a run tag:
the run queue counts a run in it by what the run executes, so a Materialize or backfill from
the UI (which carries no leasehold tag) waits for a slot like a sensor's run."""

INSTANCE_YAML = f"""\
# Written by leasehold: the embedded default instance. No network here, so no telemetry.
telemetry:
  enabled: false
run_storage:
  module: dagster._core.storage.runs
  class: SqliteRunStorage
  config:
    base_dir: {{runs}}
event_log_storage:
  module: {__name__}
  class: PooledSqliteEventLogStorage
  config:
    base_dir: {{events}}
schedule_storage:
  module: dagster._core.storage.schedules
  class: SqliteScheduleStorage
  config:
    base_dir: {{schedules}}
# What leasehold logs in a run (a failed lease renewal, a partition not ingested, an S3 retry)
# goes to the run's logs.
python_logs:
  managed_python_loggers:
    - resources
# A run stuck starting or canceling is failed by Dagster's run monitoring (in the daemon) after
# 3 minutes. A STARTED run whose worker died is failed by the code server that launched it; one
# `leasehold run` executed in process, or whose code server died too, by the discovery sensor at
# its next tick (resources/dagster_resources/runs.py).
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  poll_interval_seconds: 30
# A run that ingests starts a SparkSession (~1 GB driver, all cores); one that merges may (a
# merge too large for memory) and otherwise sorts in memory. Both execute assets of the pool
# {SPARK_POOL}: at most {SPARK_RUN_LIMIT} such runs at once, however launched (sensor, UI,
# backfill), the rest wait in the queue without starting a process. Merge runs: besides, one
# at a time per stream; the merge job leases decide within. Publication runs and garbage
# collections: one at a time per stream each. The ledger's conditional write keeps racing
# publishers safe; the limit keeps them from racing at all.
concurrency:
  pools:
    granularity: run
    default_limit: {SPARK_RUN_LIMIT}
  runs:
    max_concurrent_runs: 10
    tag_concurrency_limits:
      - key: {MERGE_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
      - key: {PUBLISH_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
      - key: {GC_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
"""


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


def written_by_leasehold(home: Path) -> bool:
    """Whether `home`'s `dagster.yaml` is one `write_instance_yaml` wrote (its first line)."""
    path = home / "dagster.yaml"
    if not path.exists():
        return False
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith(INSTANCE_YAML.splitlines()[0])


def write_instance_yaml(home: Path) -> Path:
    """Write `dagster.yaml` for the embedded default instance at `home`, overwriting it."""
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    home = home.resolve()
    dirs = {"runs": "history", "events": "history/runs", "schedules": "schedules"}
    # JSON strings are YAML strings: paths with spaces, colons or quotes stay intact
    quoted = {key: json.dumps(str(home / sub)) for key, sub in dirs.items()}
    path.write_text(INSTANCE_YAML.format(**quoted), encoding="utf-8")
    return path


def ensure_spark_pool(instance: DagsterInstance) -> int | None:
    """The Spark pool's limit, created from the instance's `concurrency.pools.default_limit` if
    the pool has none yet; None if it has no limit (no default, and nobody set one).

    Why ahead of time: Dagster's run queue creates a pool's limit the first time it sees a
    queued run in it, but only after it read the limits for that pass, so every run queued
    before that pass starts at once (seen: four Materializes from the UI all started). Called
    by `leasehold run`, every discovery tick and the doctor: one query when the limit exists.
    """
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return None

    def limit() -> int | None:
        return next((p.limit for p in storage.get_pool_limits() if p.name == SPARK_POOL), None)

    if limit() is None and instance.global_op_concurrency_default_limit is not None:
        storage.initialize_concurrency_limit_to_default(SPARK_POOL)
    return limit()


def _inserted_id(conn: Connection, insert: Any) -> Any:
    """The primary key `insert` (one row, into a table with one) gave its row."""
    key = conn.execute(insert).inserted_primary_key
    assert key is not None  # an INSERT of one row always has one
    return key[0]
