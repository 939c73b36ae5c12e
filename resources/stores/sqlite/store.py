"""SQLite store: the embedded default.

Dagster runs are separate OS processes, so an in-memory store cannot coordinate them; one
SQLite file in WAL mode can. Every write is one short `BEGIN IMMEDIATE` transaction: the write
lock is taken up front, so reading an item, checking a transition's guard and writing the result
inside it is as good as a conditional write, and two processes can never both acquire the same
item. The lease operations are here; the ledger's are in `ledger.py`, on the same connections.

Opened without `Opening.CREATE` it creates nothing: no directory, no file, no schema (a
`mode=ro` or `mode=rw` URI). A read-only connection reads a WAL database another process is
writing, committed data included; it leaves the `-wal` and `-shm` files it needed behind (it
may not delete them), and the next writer tidies them up.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from resources.coordination.errors import (
    StoreNotFoundError,
    StoreRefusedError,
    StoreUnavailableError,
)
from resources.coordination.items import ATTR, LeaseItem, PartitionStatus, priority_at, to_millis
from resources.coordination.transitions import Transition
from resources.retry import RetryPolicy, call_with_retries
from resources.stores.base import CoordinationStore
from resources.stores.opening import Opening
from resources.stores.sqlite import schema
from resources.stores.sqlite.changes import SqliteChanges
from resources.stores.sqlite.claims import SqliteClaims
from resources.stores.sqlite.ledger import SqliteLedger

T = TypeVar("T")


class SqliteLeaseStore(SqliteLedger, SqliteClaims, SqliteChanges, CoordinationStore):
    """The coordination store in one SQLite file (the embedded default): leases, ledger, rollup
    state and schema versions."""

    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = 10.0,
        opening: Opening = Opening.CREATE,
        location: str | None = None,
        **kwargs: Any,
    ) -> None:
        """`location` describes the file in a `StoreNotFoundError` (which variable set it)."""
        super().__init__(**kwargs)
        self.path = Path(path)
        self.opening = opening
        self.retry = retry or RetryPolicy()
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        if opening is Opening.CREATE:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            # executescript manages its own transaction; CREATE ... IF NOT EXISTS is idempotent.
            self._connection().executescript(schema.SCHEMA)
            if schema.missing_columns(self._connection()):  # a file from an earlier version
                self._run("upgrade_schema", schema.add_missing_columns)
        else:
            self._check_exists(location or f"SQLite file {self.path.resolve()}")
        db = self._connection()
        self._partition_select = schema.partition_select(db)
        self._object_select = schema.object_select(db)
        self._range_select = schema.range_select(db)
        self._publication_select = schema.publication_select(db)
        self._has_merge_ranges = db.execute(schema.HAS_MERGE_RANGES).fetchone() is not None
        self._has_publications = db.execute(schema.HAS_PUBLICATIONS).fetchone() is not None
        self._has_rollup_keys = db.execute(schema.HAS_ROLLUP_KEYS).fetchone() is not None
        self._has_schema_versions = db.execute(schema.HAS_SCHEMA_VERSIONS).fetchone() is not None

    # -- plumbing --------------------------------------------------------------------------------

    def _check_exists(self, location: str) -> None:
        """The file must exist and hold a lease store; nothing is created to find out."""
        if not self.path.is_file():
            raise StoreNotFoundError(location)
        try:
            found = self._connection().execute(schema.HAS_LEASE_ITEMS).fetchone()
        except sqlite3.DatabaseError as exc:  # not a database, or unreadable
            self.close_store()
            raise StoreNotFoundError(location, f"not a lease store ({exc})") from exc
        if found is None:
            self.close_store()
            raise StoreNotFoundError(location, "not a lease store (no lease_items table)")

    def _connection(self) -> sqlite3.Connection:
        """One connection per thread: the lease renewer runs beside the work."""
        db = getattr(self._local, "db", None)
        if db is None:
            if self.opening is Opening.CREATE:
                db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
            else:  # never creates the file; the journal mode is the file's already
                mode = "ro" if self.opening is Opening.READ_ONLY else "rw"
                uri = f"file:{quote(str(self.path.resolve()))}?mode={mode}"
                db = sqlite3.connect(
                    uri, uri=True, timeout=self.busy_timeout_s, isolation_level=None
                )
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    def _run(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        """`fn` in one `BEGIN IMMEDIATE` transaction, retried (bounded, jittered) while the
        database is locked by another process."""

        def attempt() -> T:
            db = self._connection()
            db.execute("BEGIN IMMEDIATE")
            try:
                result = fn(db)
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
            return result

        def retryable(exc: BaseException) -> bool:
            text = str(exc).lower()
            return isinstance(exc, sqlite3.OperationalError) and (
                "locked" in text or "busy" in text
            )

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return StoreUnavailableError(
                f"SQLite lease store {self.path}: {action} failed after {attempts} attempts: {exc}"
            )

        return call_with_retries(
            attempt, policy=self.retry, is_retryable=retryable, on_give_up=give_up
        )

    def _store_error(self, action: str, exc: sqlite3.Error) -> StoreRefusedError:
        """`exc` — a SQLite error `_run` does not retry (the file opened read-only, a table
        it lacks, a damaged file) — as the `LeaseStoreError` the store's interface promises,
        naming the file and `action`."""
        how = (
            " (opened read-only: a command that only looks)"
            if self.opening is Opening.READ_ONLY
            else ""
        )
        return StoreRefusedError(f"SQLite lease store {self.path}{how}: {action} failed: {exc}")

    def close_store(self) -> None:
        self.flush_metrics()
        with self._lock:
            for db in self._connections:
                try:
                    db.close()
                except sqlite3.ProgrammingError:
                    pass  # closed from its own thread already
            self._connections.clear()
        self._local = threading.local()

    @staticmethod
    def _fetch(db: sqlite3.Connection, sid: str, key: str) -> LeaseItem | None:
        row = db.execute(schema.FETCH, (sid, key)).fetchone()
        return None if row is None else schema.row_to_item(row)

    def _apply_in(
        self, db: sqlite3.Connection, sid: str, key: str, transition: Transition
    ) -> tuple[LeaseItem | None, LeaseItem | None]:
        current = self._fetch(db, sid, key)
        if current is None or not transition.guard.holds(current):
            return None, current
        item = transition.apply(current)
        db.execute(schema.UPSERT, schema.item_row(item))
        return item, None

    # -- what LeaseStore needs -------------------------------------------------------------------

    def _insert_absent(self, items: Sequence[LeaseItem]) -> int:
        def insert(db: sqlite3.Connection) -> int:
            before = db.total_changes
            db.executemany(schema.INSERT_ABSENT, [schema.item_row(i) for i in items])
            return db.total_changes - before

        return self._run("create", insert)

    def _apply(
        self, source_identifier: str, partition_key: str, transition: Transition
    ) -> tuple[LeaseItem | None, LeaseItem | None]:
        return self._run(
            transition.action,
            lambda db: self._apply_in(db, source_identifier, partition_key, transition),
        )

    def _available(self, source_identifier: str, now_ms: int) -> Iterator[LeaseItem]:
        rows = self._connection().execute(
            schema.AVAILABLE,
            {"sid": source_identifier, "now_prio": priority_at(now_ms), "limit": 25},
        )
        for row in rows.fetchall():
            yield schema.row_to_item(row[:-1])  # less `_range`

    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None:
        return self._fetch(self._connection(), source_identifier, partition_key)

    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        now = self.now_ms()
        # No priority sorts below "": without `unassigned_for_s`, no UNASSIGNED item is due.
        waited = "" if unassigned_for_s is None else priority_at(now - to_millis(unassigned_for_s))
        rows = self._connection().execute(
            schema.DUE_FOR_RETRY,
            {
                "sid": source_identifier,
                "now_prio": priority_at(now),
                "waited_prio": waited,
                "limit": limit,
            },
        )
        return [schema.row_to_item(r[:-1]) for r in rows.fetchall()]  # less `_range`

    def pending_partitions(self, source_identifier: str, limit: int) -> list[LeaseItem]:
        # Three ranges of the `source_status` index (sid, status, priority), each LIMITed.
        rows = self._connection().execute(
            schema.PENDING, {"sid": source_identifier, "limit": limit}
        )
        return [schema.row_to_item(r[:-1]) for r in rows.fetchall()]  # less `_range`

    def missing_keys(self, source_identifier: str, partition_keys: Sequence[str]) -> list[str]:
        keys = list(dict.fromkeys(partition_keys))
        db = self._connection()
        found: set[str] = set()
        for start in range(0, len(keys), schema.KEYS_PER_LOOKUP):
            batch = keys[start : start + schema.KEYS_PER_LOOKUP]
            rows = db.execute(schema.existing_keys(len(batch)), (source_identifier, *batch))
            found.update(row[0] for row in rows)
        return [key for key in keys if key not in found]

    def items_between(
        self, source_identifier: str, after: str | None, upto: str
    ) -> Iterator[LeaseItem]:
        # The primary key (sid, key) is the index; BINARY collation compares UTF-8 bytes.
        sql = (
            f"SELECT {schema.SELECT} FROM lease_items WHERE {ATTR['sid']} = ? "
            f"AND {ATTR['key']} > ? AND {ATTR['key']} <= ? ORDER BY {ATTR['key']}"
        )
        rows = self._connection().execute(sql, (source_identifier, after or "", upto))
        for row in rows.fetchall():
            yield schema.row_to_item(row)

    def completed_between(
        self, source_identifier: str, after: str | None, before_ms: int, limit: int
    ) -> list[LeaseItem]:
        sql = (
            f"SELECT {schema.SELECT} FROM lease_items WHERE {ATTR['sid']} = ? "
            f"AND {ATTR['status']} = ? AND {ATTR['priority']} > ? AND {ATTR['priority']} < ? "
            f"ORDER BY {ATTR['priority']} LIMIT ?"
        )
        params = (
            source_identifier,
            PartitionStatus.COMPLETED.value,
            after or "",
            priority_at(before_ms),
            limit,
        )
        return [schema.row_to_item(r) for r in self._connection().execute(sql, params).fetchall()]

    def iter_items(
        self, source_identifier: str | None = None, *, progress: bool = True
    ) -> Iterator[LeaseItem]:
        db = self._connection()
        columns = schema.SELECT if progress else schema.SELECT_WITHOUT_PROGRESS
        if source_identifier is None:
            rows = db.execute(f"SELECT {columns} FROM lease_items ORDER BY 1, {ATTR['priority']}")
        else:
            rows = db.execute(
                f"SELECT {columns} FROM lease_items WHERE {ATTR['sid']} = ? "
                f"ORDER BY {ATTR['priority']}",
                (source_identifier,),
            )
        for row in rows.fetchall():
            yield schema.row_to_item(row)

    def source_identifiers(self) -> list[str]:
        db = self._connection()
        return [r[0] for r in db.execute(f"SELECT DISTINCT {ATTR['sid']} FROM lease_items")]

    def purge_expired(self) -> int:
        """SQLite has no TTL sweeper of its own: this is it, with DynamoDB's semantics (items
        whose `expirationTime` passed are deleted). `leasehold purge-expired` runs it."""
        now_s = self.now_ms() // 1000

        def purge(db: sqlite3.Connection) -> int:
            return db.execute(
                f"DELETE FROM lease_items WHERE {ATTR['expiration']} < ?", (now_s,)
            ).rowcount

        return self._run("purge_expired", purge)

    def _add_metrics(self, deltas: dict[str, dict[str, int]]) -> None:
        rows = [(sid, name, v) for sid, ms in deltas.items() for name, v in ms.items()]

        def add(db: sqlite3.Connection) -> None:
            db.executemany(
                f"INSERT INTO coordinator_metrics ({ATTR['sid']}, name, value) VALUES (?, ?, ?) "
                f"ON CONFLICT ({ATTR['sid']}, name) DO UPDATE SET value = value + excluded.value",
                rows,
            )

        self._run("flush_metrics", add)

    def read_metrics(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for sid, name, value in self._connection().execute(
            f"SELECT {ATTR['sid']}, name, value FROM coordinator_metrics"
        ):
            out.setdefault(sid, {})[name] = value
        return out
