"""SQLite lease store: the embedded default.

Dagster runs are separate OS processes, so an in-memory store cannot coordinate them; one
SQLite file in WAL mode can. Every operation is one short `BEGIN IMMEDIATE` transaction: the
write lock is taken up front, so a read-then-write inside it is as good as a conditional write
and two processes can never both acquire the same item.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from resources.coordination import metrics as m
from resources.coordination.errors import (
    PartitionNotFoundError,
    PartitionNotOwnedError,
    PartitionUnavailableError,
    StoreUnavailableError,
)
from resources.coordination.items import (
    ATTR,
    NOT_GIVEN,
    LeaseItem,
    LeaseToken,
    PartitionStatus,
    priority_at,
    to_millis,
)
from resources.coordination.lease_store import LeaseStore
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    check_commit_size,
    group_by_partition,
)
from resources.retry import RetryPolicy, call_with_retries

T = TypeVar("T")

_COLUMNS = (
    "sid",
    "key",
    "owner",
    "progress",
    "ownership_timeout",
    "status",
    "reopen_at",
    "closed_count",
    "version",
    "epoch",
    "priority",
    "expiration",
    "dead_letter",
)
_SELECT = ", ".join(ATTR[c] for c in _COLUMNS)

SCHEMA = f"""
CREATE TABLE IF NOT EXISTS lease_items (
    {ATTR["sid"]} TEXT NOT NULL,
    {ATTR["key"]} TEXT NOT NULL,
    {ATTR["owner"]} TEXT,
    {ATTR["progress"]} TEXT,
    {ATTR["ownership_timeout"]} INTEGER,
    {ATTR["status"]} TEXT NOT NULL,
    {ATTR["reopen_at"]} INTEGER,
    {ATTR["closed_count"]} INTEGER NOT NULL DEFAULT 0,
    {ATTR["version"]} INTEGER NOT NULL,
    {ATTR["epoch"]} INTEGER NOT NULL,
    {ATTR["priority"]} TEXT NOT NULL,
    {ATTR["expiration"]} INTEGER,
    {ATTR["dead_letter"]} TEXT,
    PRIMARY KEY ({ATTR["sid"]}, {ATTR["key"]})
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS source_status
    ON lease_items ({ATTR["sid"]}, {ATTR["status"]}, {ATTR["priority"]});
CREATE TABLE IF NOT EXISTS table_partitions (
    tbl TEXT NOT NULL,
    dt TEXT NOT NULL,
    next_object_id INTEGER NOT NULL,
    last_live_object_id INTEGER,
    current_manifest_version INTEGER NOT NULL DEFAULT -1,
    desired_manifest_version INTEGER NOT NULL DEFAULT -1,
    switched INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, dt)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS small_objects (
    tbl TEXT NOT NULL,
    dt TEXT NOT NULL,
    object_id INTEGER NOT NULL,
    url TEXT NOT NULL,
    content_length INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    {ATTR["sid"]} TEXT NOT NULL,
    {ATTR["key"]} TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    delayed INTEGER NOT NULL,
    committed_at INTEGER NOT NULL,
    PRIMARY KEY (tbl, dt, object_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS commit_records (
    {ATTR["sid"]} TEXT NOT NULL,
    {ATTR["key"]} TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    object_ids TEXT NOT NULL,
    committed_at INTEGER NOT NULL,
    PRIMARY KEY ({ATTR["sid"]}, {ATTR["key"]})
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coordinator_metrics (
    {ATTR["sid"]} TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY ({ATTR["sid"]}, name)
) WITHOUT ROWID;
"""


def _status_ranges(*ranges: tuple[str, str]) -> str:
    """Items of each (status, priority condition or ""), by priority, `:limit` of each: one
    range of the `source_status` index apiece, as Data Prepper queries its GSI. (One WHERE
    with the ranges OR-ed together reads every item of the source instead.)"""
    selects = [
        f"SELECT * FROM (SELECT {_SELECT}, {order} AS _range FROM lease_items "
        f"WHERE {ATTR['sid']} = :sid AND {ATTR['status']} = '{status}' "
        + (f"AND {ATTR['priority']} {condition} " if condition else "")
        + f"ORDER BY {ATTR['priority']} LIMIT :limit)"
        for order, (status, condition) in enumerate(ranges)
    ]
    return " UNION ALL ".join(selects)


# Acquisition order of ARCHITECTURE §4: expired ASSIGNED, reopened CLOSED, then UNASSIGNED.
_AVAILABLE = (
    _status_ranges(("ASSIGNED", "< :now_prio"), ("CLOSED", "<= :now_prio"), ("UNASSIGNED", ""))
    + f" ORDER BY _range, {ATTR['priority']} LIMIT 1"
)
# What earlier attempts left behind, oldest first.
_DUE_FOR_RETRY = (
    _status_ranges(
        ("ASSIGNED", "< :now_prio"), ("CLOSED", "<= :now_prio"), ("UNASSIGNED", "< :waited_prio")
    )
    + f" ORDER BY {ATTR['priority']} LIMIT :limit"
)


def _row_to_item(row: Sequence[Any]) -> LeaseItem:
    v = dict(zip(_COLUMNS, row, strict=True))
    return LeaseItem(
        source_identifier=v["sid"],
        partition_key=v["key"],
        status=PartitionStatus(v["status"]),
        owner=v["owner"],
        progress_state=v["progress"],
        ownership_timeout_ms=v["ownership_timeout"],
        reopen_at_ms=v["reopen_at"],
        closed_count=v["closed_count"],
        version=v["version"],
        epoch=v["epoch"],
        priority=v["priority"],
        expiration_time=v["expiration"],
        dead_letter_reason=v["dead_letter"],
    )


class SqliteLeaseStore(LeaseStore):
    backend = "sqlite"

    def __init__(
        self,
        path: str | Path,
        *,
        retry: RetryPolicy | None = None,
        busy_timeout_s: float = 10.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.retry = retry or RetryPolicy()
        self.busy_timeout_s = busy_timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._seq = 0
        # executescript manages its own transaction; CREATE ... IF NOT EXISTS is idempotent.
        self._connection().executescript(SCHEMA)

    # -- plumbing --------------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        """One connection per thread: the lease renewer runs beside the work."""
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=self.busy_timeout_s, isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
            with self._lock:
                self._connections.append(db)
        return db

    @contextmanager
    def _transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        db = self._connection()
        db.execute("BEGIN IMMEDIATE")
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        else:
            db.execute("COMMIT")

    def _run(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T:
        def attempt() -> T:
            with self._transaction(action) as db:
                return fn(db)

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
        row = db.execute(
            f"SELECT {_SELECT} FROM lease_items WHERE {ATTR['sid']} = ? AND {ATTR['key']} = ?",
            (sid, key),
        ).fetchone()
        return None if row is None else _row_to_item(row)

    def _write(self, db: sqlite3.Connection, item: LeaseItem) -> LeaseItem:
        db.execute(
            f"INSERT OR REPLACE INTO lease_items ({_SELECT}) VALUES ({', '.join('?' * 13)})",
            (
                item.source_identifier,
                item.partition_key,
                item.owner,
                item.progress_state,
                item.ownership_timeout_ms,
                item.status.value,
                item.reopen_at_ms,
                item.closed_count,
                item.version,
                item.epoch,
                item.priority,
                item.expiration_time,
                item.dead_letter_reason,
            ),
        )
        return item

    # -- operations ----------------------------------------------------------------------------

    def create_partitions(
        self,
        source_identifier: str,
        partition_keys: Sequence[str],
        progress_state: str | None = None,
    ) -> int:
        keys = list(dict.fromkeys(partition_keys))
        if not keys:
            return 0

        def create(db: sqlite3.Connection) -> int:
            now = self.now_ms()
            expiration = self.expiration_at(now)
            with self._lock:
                base_seq = self._seq
                self._seq += len(keys)
            before = db.total_changes
            db.executemany(
                f"INSERT OR IGNORE INTO lease_items ({ATTR['sid']}, {ATTR['key']}, "
                f"{ATTR['progress']}, {ATTR['status']}, {ATTR['closed_count']}, "
                f"{ATTR['version']}, {ATTR['epoch']}, {ATTR['priority']}, {ATTR['expiration']}) "
                "VALUES (?, ?, ?, 'UNASSIGNED', 0, 1, 0, ?, ?)",
                [
                    (
                        source_identifier,
                        k,
                        progress_state,
                        priority_at(now, base_seq + i),
                        expiration,
                    )
                    for i, k in enumerate(keys)
                ],
            )
            return db.total_changes - before

        created = self._run("create", create)
        self.metrics.incr(source_identifier, m.PARTITIONS_CREATED, created)
        return created

    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None:
        db = self._connection()
        return self._fetch(db, source_identifier, partition_key)

    def _take(
        self, db: sqlite3.Connection, item: LeaseItem, owner: str, timeout_s: float
    ) -> LeaseItem:
        now = self.now_ms()
        deadline = now + to_millis(timeout_s)
        return self._write(
            db,
            LeaseItem(
                source_identifier=item.source_identifier,
                partition_key=item.partition_key,
                status=PartitionStatus.ASSIGNED,
                owner=owner,
                progress_state=item.progress_state,
                ownership_timeout_ms=deadline,
                reopen_at_ms=None,
                closed_count=item.closed_count,
                version=item.version + 1,
                epoch=item.epoch + 1,
                priority=priority_at(deadline),
                expiration_time=self.expiration_at(now),
                dead_letter_reason=None,
            ),
        )

    def acquire(
        self, source_identifier: str, partition_key: str, owner: str, timeout_s: float
    ) -> LeaseItem:
        def acquire(db: sqlite3.Connection) -> LeaseItem | Exception:
            current = self._fetch(db, source_identifier, partition_key)
            if current is None:
                return PartitionNotFoundError(source_identifier, partition_key)
            if not current.is_available(self.now_ms()):
                return PartitionUnavailableError(current)
            return self._take(db, current, owner, timeout_s)

        result = self._run("acquire", acquire)
        if isinstance(result, PartitionNotFoundError):
            self.metrics.incr(source_identifier, m.PARTITION_NOT_FOUND)
            raise result
        if isinstance(result, Exception):
            raise result
        self.metrics.incr(source_identifier, m.PARTITIONS_ACQUIRED)
        return result

    def acquire_next(
        self, source_identifier: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        def acquire_next(db: sqlite3.Connection) -> LeaseItem | None:
            row = db.execute(
                _AVAILABLE,
                {"sid": source_identifier, "now_prio": priority_at(self.now_ms()), "limit": 1},
            ).fetchone()
            return None if row is None else self._take(db, _row_to_item(row[:-1]), owner, timeout_s)

        item = self._run("acquire_next", acquire_next)
        self.metrics.incr(
            source_identifier, m.PARTITIONS_ACQUIRED if item else m.NO_PARTITIONS_ACQUIRED
        )
        return item

    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        now = self.now_ms()
        # No priority sorts below "": without `unassigned_for_s`, no UNASSIGNED item is due.
        waited = "" if unassigned_for_s is None else priority_at(now - to_millis(unassigned_for_s))
        rows = self._connection().execute(
            _DUE_FOR_RETRY,
            {
                "sid": source_identifier,
                "now_prio": priority_at(now),
                "waited_prio": waited,
                "limit": limit,
            },
        )
        return [_row_to_item(r[:-1]) for r in rows.fetchall()]  # less `_range`

    def _fenced(
        self,
        token: LeaseToken,
        action: str,
        change: Callable[[LeaseItem, int], LeaseItem],
        also: Callable[[sqlite3.Connection, int], None] | None = None,
    ) -> LeaseItem:
        """Apply `change` only while `token` still holds: owner, epoch and ASSIGNED; `also`
        writes more in the same transaction (the ledger part of a commit)."""

        def fenced(db: sqlite3.Connection) -> LeaseItem | Exception:
            current = self._fetch(db, token.source_identifier, token.partition_key)
            if current is None:
                return PartitionNotFoundError(token.source_identifier, token.partition_key)
            if (
                current.status is not PartitionStatus.ASSIGNED
                or current.owner != token.owner
                or current.epoch != token.epoch
            ):
                return PartitionNotOwnedError(token, action)
            now = self.now_ms()
            if also is not None:
                also(db, now)
            return self._write(db, change(current, now))

        try:
            result = self._run(action, fenced)
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(action))
            raise
        if isinstance(result, Exception):
            self.metrics.incr(token.source_identifier, m.update_errors(action))
            self.metrics.incr(
                token.source_identifier,
                m.PARTITION_NOT_FOUND
                if isinstance(result, PartitionNotFoundError)
                else m.PARTITION_NOT_OWNED,
            )
            if isinstance(result, PartitionNotFoundError):
                raise PartitionNotOwnedError(token, action) from result
            raise result
        return result

    def _released(
        self,
        item: LeaseItem,
        now: int,
        status: PartitionStatus,
        progress_state: str | None,
        **changes: Any,
    ) -> LeaseItem:
        values = dict(
            source_identifier=item.source_identifier,
            partition_key=item.partition_key,
            status=status,
            owner=None,
            progress_state=item.progress_state if progress_state is NOT_GIVEN else progress_state,
            ownership_timeout_ms=None,
            reopen_at_ms=None,
            closed_count=item.closed_count,
            version=item.version + 1,
            epoch=item.epoch,
            priority=priority_at(now),
            expiration_time=self.expiration_at(now),
            dead_letter_reason=None,
        )
        values.update(changes)
        return LeaseItem(**values)

    def renew(
        self, token: LeaseToken, timeout_s: float, progress_state: str | None = NOT_GIVEN
    ) -> LeaseItem:
        return self._fenced(
            token,
            "saveState",
            lambda item, now: self._renewed(item, now, timeout_s, progress_state),
        )

    def _renewed(
        self, item: LeaseItem, now: int, timeout_s: float, progress_state: str | None
    ) -> LeaseItem:
        """Still ASSIGNED to the same owner and epoch, ownership and TTL extended."""
        deadline = now + to_millis(timeout_s)
        return LeaseItem(
            **{
                **item.__dict__,
                "progress_state": item.progress_state
                if progress_state is NOT_GIVEN
                else progress_state,
                "ownership_timeout_ms": deadline,
                "priority": priority_at(deadline),
                "version": item.version + 1,
                "expiration_time": self.expiration_at(now),
            }
        )

    def close(
        self,
        token: LeaseToken,
        reopen_after_s: float,
        max_closed_count: int,
        reason: str = "",
        progress_state: str | None = NOT_GIVEN,
    ) -> LeaseItem:
        def change(item: LeaseItem, now: int) -> LeaseItem:
            closed_count = item.closed_count + 1
            if closed_count > max_closed_count:
                return self._released(
                    item,
                    now,
                    PartitionStatus.COMPLETED,
                    progress_state,
                    closed_count=closed_count,
                    dead_letter_reason=reason or f"closed {closed_count} times",
                )
            reopen = now + to_millis(reopen_after_s)
            return self._released(
                item,
                now,
                PartitionStatus.CLOSED,
                progress_state,
                closed_count=closed_count,
                reopen_at_ms=reopen,
                priority=priority_at(reopen),
            )

        item = self._fenced(token, "close", change)
        self.metrics.incr(token.source_identifier, m.PARTITIONS_CLOSED)
        return item

    def give_up(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        return self._fenced(
            token,
            "giveUp",
            lambda item, now: self._released(item, now, PartitionStatus.UNASSIGNED, progress_state),
        )

    def complete(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        item = self._fenced(
            token,
            "complete",
            lambda item, now: self._released(item, now, PartitionStatus.COMPLETED, progress_state),
        )
        self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return item

    def purge_expired(self) -> int:
        """SQLite has no TTL sweeper of its own: this is it, with DynamoDB's semantics (items
        whose `expirationTime` passed are deleted). `leasehold purge` runs it."""
        now_s = self.now_ms() // 1000

        def purge(db: sqlite3.Connection) -> int:
            return db.execute(
                f"DELETE FROM lease_items WHERE {ATTR['expiration']} < ?", (now_s,)
            ).rowcount

        return self._run("purge_expired", purge)

    # -- ledger --------------------------------------------------------------------------------

    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
    ) -> CommitResult:
        objects = list(objects)
        check_commit_size(objects)
        registered: list[RegisteredObject] = []

        def change(item: LeaseItem, now: int) -> LeaseItem:
            if complete:
                return self._released(item, now, PartitionStatus.COMPLETED, progress_state)
            return self._renewed(item, now, timeout_s, progress_state)

        def register(db: sqlite3.Connection, now: int) -> None:
            record = self._commit_record(db, token.source_identifier, token.partition_key)
            if record is not None:
                raise AlreadyCommittedError(record)
            registered.clear()
            for (table, dt), group in group_by_partition(objects).items():
                row = db.execute(
                    "SELECT next_object_id, last_live_object_id FROM table_partitions "
                    "WHERE tbl = ? AND dt = ?",
                    (table, dt),
                ).fetchone()
                next_id, last_live = (1, None) if row is None else row
                for offset, obj in enumerate(group):
                    registered.append(
                        RegisteredObject(
                            table=table,
                            dt=dt,
                            object_id=next_id + offset,
                            url=obj.url,
                            content_length=obj.content_length,
                            row_count=obj.row_count,
                            source_identifier=token.source_identifier,
                            source_partition_key=token.partition_key,
                            epoch=token.epoch,
                            delayed=last_live is not None,
                        )
                    )
                db.execute(
                    "INSERT INTO table_partitions (tbl, dt, next_object_id) VALUES (?, ?, ?) "
                    "ON CONFLICT (tbl, dt) DO UPDATE SET next_object_id = excluded.next_object_id",
                    (table, dt, next_id + len(group)),
                )
            db.executemany(
                "INSERT INTO small_objects VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [
                    (
                        o.table,
                        o.dt,
                        o.object_id,
                        o.url,
                        o.content_length,
                        o.row_count,
                        o.source_identifier,
                        o.source_partition_key,
                        o.epoch,
                        int(o.delayed),
                        now,
                    )
                    for o in registered
                ],
            )
            if complete:
                db.execute(
                    "INSERT INTO commit_records VALUES (?, ?, ?, ?, ?)",
                    (
                        token.source_identifier,
                        token.partition_key,
                        token.epoch,
                        json.dumps([[o.table, o.dt, o.object_id] for o in registered]),
                        now,
                    ),
                )

        item = self._fenced(token, "complete" if complete else "saveState", change, register)
        if complete:
            self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return CommitResult(item, tuple(registered))

    @staticmethod
    def _commit_record(db: sqlite3.Connection, sid: str, key: str) -> CommitRecord | None:
        row = db.execute(
            f"SELECT epoch, object_ids, committed_at FROM commit_records "
            f"WHERE {ATTR['sid']} = ? AND {ATTR['key']} = ?",
            (sid, key),
        ).fetchone()
        if row is None:
            return None
        ids = tuple(tuple(x) for x in json.loads(row[1]))
        return CommitRecord(sid, key, row[0], ids, row[2])  # type: ignore[arg-type]

    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        return self._commit_record(self._connection(), source_identifier, partition_key)

    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        sql = (
            "SELECT tbl, dt, object_id, url, content_length, row_count, "
            f"{ATTR['sid']}, {ATTR['key']}, epoch, delayed FROM small_objects WHERE tbl = ?"
        )
        args: tuple[str, ...] = (table,)
        if dt is not None:
            sql += " AND dt = ?"
            args += (dt,)
        rows = self._connection().execute(sql + " ORDER BY dt, object_id", args).fetchall()
        return [RegisteredObject(*r[:9], delayed=bool(r[9])) for r in rows]

    def table_partitions(self, table: str) -> list[TablePartition]:
        rows = self._connection().execute(
            "SELECT tbl, dt, next_object_id, last_live_object_id, current_manifest_version, "
            "desired_manifest_version, switched FROM table_partitions WHERE tbl = ? ORDER BY dt",
            (table,),
        )
        return [TablePartition(*r[:6], switched=bool(r[6])) for r in rows.fetchall()]

    def iter_items(self, source_identifier: str | None = None) -> Iterator[LeaseItem]:
        db = self._connection()
        if source_identifier is None:
            rows = db.execute(f"SELECT {_SELECT} FROM lease_items ORDER BY 1, {ATTR['priority']}")
        else:
            rows = db.execute(
                f"SELECT {_SELECT} FROM lease_items WHERE {ATTR['sid']} = ? "
                f"ORDER BY {ATTR['priority']}",
                (source_identifier,),
            )
        for row in rows.fetchall():
            yield _row_to_item(row)

    def source_identifiers(self) -> list[str]:
        db = self._connection()
        return [r[0] for r in db.execute(f"SELECT DISTINCT {ATTR['sid']} FROM lease_items")]

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
