"""The SQLite store's ledger: commits, closing, merge commits, and the reads readers rely on.

Part of `SqliteLeaseStore` (a mixin on its connections): a commit is one `BEGIN IMMEDIATE`
transaction that checks the lease's guard, registers the objects and applies the lease change;
a merge commit is one too, over the merge job's lease, the chain and the partition row, and
so is recording a publication, over the partition row and its history (and the lease that
fences it, when it is).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.merge import (
    CommitDue,
    MergeCommit,
    MergeCommitResult,
    MergeRange,
    check_merge,
)
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    assign_ids,
)
from resources.ledger.provenance import sources_of
from resources.ledger.publication import Publication
from resources.ledger.rollup_state import KeyWrite, RollupKeyMovedError, decode_value, encode_value
from resources.ledger.schema_versions import SchemaVersionTakenError
from resources.rollup.state import KeyState
from resources.schema.versions import SchemaVersion
from resources.stores.base import forget_bound, merge_writes, stamped_publication
from resources.stores.sqlite.commit_rows import (
    insert_objects,
    insert_record,
    read_counters,
    write_counters,
)
from resources.stores.sqlite.schema import KEYS_PER_LOOKUP, PUBLICATION_COLUMNS, RANGE_COLUMNS

if TYPE_CHECKING:
    from resources.coordination.errors import StoreRefusedError

T = TypeVar("T")


def _partition(row: Any) -> TablePartition:
    return TablePartition(
        row[0],
        row[1],
        row[2],
        row[3],
        row[4],
        row[5],
        switched=bool(row[6]),
        merged_upper=row[7],
        merge_due_at_ms=row[8],
        published_upper=row[9],
        publication_seq=row[10],
    )


def _publication(row: Any) -> Publication:
    return Publication(
        table=row[0],
        dt=row[1],
        seq=row[2],
        switched=bool(row[3]),
        upper=row[4],
        location=row[5],
        files=row[6],
        rows=row[7],
        bytes=row[8],
        published_at_ms=row[9],
        revises=row[10],
    )


class SqliteLedger:
    """The ledger half of `SqliteLeaseStore`, which provides `_run`, `_fetch`, `_apply_in`,
    `_connection`, `_store_error`, `now_ms`, and what the file holds: `_partition_select`,
    `_object_select`, `_range_select` and `_publication_select` (the columns of a partition,
    a small object, a merge range and a publication record, defaults for those an old file
    lacks), `_has_merge_ranges`, `_has_publications`, `_has_rollup_keys` and
    `_has_schema_versions`."""

    _partition_select: str
    _object_select: str
    _range_select: str
    _publication_select: str
    _has_merge_ranges: bool
    _has_publications: bool
    _has_rollup_keys: bool
    _has_schema_versions: bool

    if TYPE_CHECKING:  # provided by SqliteLeaseStore (resources/stores/sqlite/store.py)

        def _connection(self) -> sqlite3.Connection: ...
        def _run(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T: ...
        def _store_error(self, action: str, exc: sqlite3.Error) -> StoreRefusedError: ...
        def now_ms(self) -> int: ...
        @staticmethod
        def _fetch(db: sqlite3.Connection, sid: str, key: str) -> LeaseItem | None: ...
        def _apply_in(
            self, db: sqlite3.Connection, sid: str, key: str, transition: Transition
        ) -> tuple[LeaseItem | None, LeaseItem | None]: ...

    def _commit(
        self,
        token: LeaseToken,
        groups: dict[tuple[str, str], list[SmallObject]],
        lease_change: Transition,
        record: bool,
        merge_due: Mapping[str, CommitDue],
    ) -> tuple[CommitResult | None, LeaseItem | None]:
        sid, key = token.source_identifier, token.partition_key

        def commit(db: sqlite3.Connection) -> tuple[CommitResult | None, LeaseItem | None]:
            current = self._fetch(db, sid, key)
            if not lease_change.guard.holds(current):
                return None, current
            existing = self._commit_record(db, sid, key)
            if existing is not None:
                raise AlreadyCommittedError(existing)
            now = self.now_ms()
            counters, dues = read_counters(db, groups, merge_due)
            registered = assign_ids(token, groups, counters, now)
            write_counters(db, groups, counters, dues)
            insert_objects(db, registered, now)
            if record:
                insert_record(db, token, registered, now)
            item, _ = self._apply_in(db, sid, key, lease_change)
            assert item is not None  # the guard held at the top of this same transaction
            return CommitResult(item, tuple(registered)), None

        return self._run(lease_change.action, commit)

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
        return CommitRecord(sid, key, row[0], ids, row[2])

    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        return self._commit_record(self._connection(), source_identifier, partition_key)

    def ledger_objects(
        self, table: str, dt: str | None = None, *, after: int = 0
    ) -> list[RegisteredObject]:
        sql = f"SELECT {self._object_select} FROM small_objects WHERE tbl = ?"
        args: tuple[str | int, ...] = (table,)
        if dt is not None:
            sql += " AND dt = ?"
            args += (dt,)
        if after:
            sql += " AND object_id > ?"
            args += (after,)
        rows = self._connection().execute(sql + " ORDER BY dt, object_id", args).fetchall()
        return [
            RegisteredObject(
                *(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]),
                delayed=bool(r[9]),
                committed_at_ms=r[10],
                schema_version=r[11],
                sources=sources_of(r[12]),
            )
            for r in rows
        ]

    def table_partitions(self, table: str) -> list[TablePartition]:
        rows = self._connection().execute(
            f"SELECT {self._partition_select} FROM table_partitions WHERE tbl = ? ORDER BY dt",
            (table,),
        )
        return [_partition(r) for r in rows.fetchall()]

    def table_partition(self, table: str, dt: str) -> TablePartition | None:
        return self._table_partition(self._connection(), table, dt)

    def _table_partition(
        self, db: sqlite3.Connection, table: str, dt: str
    ) -> TablePartition | None:
        row = db.execute(
            f"SELECT {self._partition_select} FROM table_partitions WHERE tbl = ? AND dt = ?",
            (table, dt),
        ).fetchone()
        return None if row is None else _partition(row)

    def merge_ranges(self, table: str, dt: str) -> list[MergeRange]:
        return self._merge_ranges(self._connection(), table, dt)

    def _merge_ranges(self, db: sqlite3.Connection, table: str, dt: str) -> list[MergeRange]:
        if not self._has_merge_ranges:  # an earlier version's file, opened without CREATE
            return []
        rows = db.execute(
            f"SELECT {self._range_select} FROM merge_ranges WHERE tbl = ? AND dt = ? "
            "ORDER BY upper",
            (table, dt),
        )
        return [MergeRange(*r) for r in rows.fetchall()]

    def close_partition(self, table: str, dt: str) -> TablePartition | None:
        """One conditional UPDATE inside `BEGIN IMMEDIATE`: an ingestion commit holds the same
        write lock, so it lands wholly before the close (live) or after it (delayed)."""
        now = self.now_ms()

        def close(db: sqlite3.Connection) -> TablePartition | None:
            db.execute(
                "UPDATE table_partitions SET last_live_object_id = next_object_id - 1, "
                "merge_due_at = ? WHERE tbl = ? AND dt = ? AND last_live_object_id IS NULL",
                (now, table, dt),
            )
            return self._table_partition(db, table, dt)

        return self._run("close_partition", close)

    def _commit_merge(
        self, token: LeaseToken, merge: MergeCommit, lease_change: Transition
    ) -> tuple[MergeCommitResult | None, LeaseItem | None]:
        sid, key = token.source_identifier, token.partition_key
        table, dt = merge.table, merge.dt

        def commit(db: sqlite3.Connection) -> tuple[MergeCommitResult | None, LeaseItem | None]:
            current = self._fetch(db, sid, key)
            if not lease_change.guard.holds(current):
                return None, current
            ranges = self._merge_ranges(db, table, dt)
            partition = self._table_partition(db, table, dt)
            next_id = 1 if partition is None else partition.next_object_id
            rewritten = check_merge(ranges, merge, next_id)
            w = merge_writes(merge, partition, ranges, token.epoch, self.now_ms())
            if w.sentinel is not None:
                self._insert_range(db, w.sentinel)
            if w.written is not None:
                if rewritten is None:
                    self._insert_range(db, w.written)
                else:
                    self._rewrite_range(db, w.written, rewritten.upper)
            db.execute(
                "UPDATE table_partitions SET merged_upper = ?, desired_manifest_version = ?, "
                "merge_due_at = ? WHERE tbl = ? AND dt = ?",
                (w.merged_upper, w.desired_manifest_version, w.due_at_ms, table, dt),
            )
            self._apply_in(db, sid, key, lease_change)
            return w.result(), None

        return self._run(lease_change.action, commit)

    @staticmethod
    def _rewrite_range(db: sqlite3.Connection, r: MergeRange, old_upper: int) -> None:
        """The open range extended in place: its row, found by the `upper` the merge read,
        takes the new `upper` (the key) and object."""
        db.execute(
            "UPDATE merge_ranges SET upper = ?, url = ?, content_length = ?, row_count = ?, "
            "epoch = ?, updated_at = ?, schema_version = ? "
            "WHERE tbl = ? AND dt = ? AND upper = ?",
            (
                r.upper,
                r.url,
                r.content_length,
                r.row_count,
                r.epoch,
                r.updated_at_ms,
                r.schema_version,
                r.table,
                r.dt,
                old_upper,
            ),
        )

    @staticmethod
    def _insert_range(db: sqlite3.Connection, r: MergeRange) -> None:
        db.execute(
            f"INSERT INTO merge_ranges ({', '.join(RANGE_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(RANGE_COLUMNS))})",
            (
                r.table,
                r.dt,
                r.lower,
                r.upper,
                r.url,
                r.content_length,
                r.row_count,
                r.epoch,
                r.updated_at_ms,
                r.schema_version,
            ),
        )

    def _record_publications(
        self,
        publications: Sequence[Publication],
        token: LeaseToken | None,
        lease_change: Transition | None,
    ) -> tuple[list[Publication] | None, LeaseItem | None]:
        """One `BEGIN IMMEDIATE` transaction: each partition as stored is checked and updated
        under the write lock, so of two racing publishers of one version the second reads the
        first's row and is refused; a refusal of any rolls back all. Fenced, the lease's guard
        is checked first and the lease changed in the same transaction."""

        def record(db: sqlite3.Connection) -> tuple[list[Publication] | None, LeaseItem | None]:
            if lease_change is not None:
                assert token is not None  # a lease change is always given with its token
                current = self._fetch(db, token.source_identifier, token.partition_key)
                if not lease_change.guard.holds(current):
                    return None, current
            stored = [self._record_in(db, p) for p in publications]
            if lease_change is not None:
                assert token is not None
                self._apply_in(db, token.source_identifier, token.partition_key, lease_change)
            return stored, None

        return self._run("record_publication", record)

    def _record_in(self, db: sqlite3.Connection, publication: Publication) -> Publication:
        table, dt = publication.table, publication.dt
        stored = stamped_publication(
            self._table_partition(db, table, dt), publication, self.now_ms()
        )
        db.execute(
            "UPDATE table_partitions SET current_manifest_version = ?, switched = ?, "
            "published_upper = ?, publication_seq = ? WHERE tbl = ? AND dt = ?",
            (stored.manifest_version, int(stored.switched), stored.upper, stored.seq, table, dt),
        )
        db.execute(
            f"INSERT INTO publications ({', '.join(PUBLICATION_COLUMNS)}) "
            f"VALUES ({', '.join('?' * len(PUBLICATION_COLUMNS))})",
            (
                table,
                dt,
                stored.seq,
                int(stored.switched),
                stored.upper,
                stored.location,
                stored.files,
                stored.rows,
                stored.bytes,
                stored.published_at_ms,
                stored.revises,
            ),
        )
        return stored

    def publications(self, table: str, dt: str) -> list[Publication]:
        if not self._has_publications:  # an earlier version's file, opened without CREATE
            return []
        rows = self._connection().execute(
            f"SELECT {self._publication_select} FROM publications WHERE tbl = ? AND dt = ? "
            "ORDER BY seq",
            (table, dt),
        )
        return [_publication(r) for r in rows.fetchall()]

    def forget_publications(self, table: str, dt: str, before_seq: int) -> int:
        def forget(db: sqlite3.Connection) -> int:
            bound = forget_bound(self._table_partition(db, table, dt), before_seq)
            return db.execute(
                "DELETE FROM publications WHERE tbl = ? AND dt = ? AND seq < ?",
                (table, dt, bound),
            ).rowcount

        return self._run("forget_publications", forget)

    # -- rollup state ----------------------------------------------------------------------------

    def rollup_states(
        self, rollup: str, dt: str, keys: Sequence[str] | None = None
    ) -> dict[str, KeyState]:
        if not self._has_rollup_keys:  # an earlier version's file, opened without CREATE
            return {}
        return self._rollup_states(self._connection(), rollup, dt, keys)

    @staticmethod
    def _rollup_states(
        db: sqlite3.Connection, rollup: str, dt: str, keys: Sequence[str] | None
    ) -> dict[str, KeyState]:
        select = "SELECT key, txid, value, prev_value FROM rollup_keys WHERE rollup = ? AND dt = ?"
        if keys is None:
            rows = db.execute(select, (rollup, dt)).fetchall()
        else:
            rows = []
            for start in range(0, len(keys), KEYS_PER_LOOKUP):
                part = list(keys[start : start + KEYS_PER_LOOKUP])
                rows += db.execute(
                    f"{select} AND key IN ({', '.join('?' * len(part))})", (rollup, dt, *part)
                ).fetchall()
        return {
            k: KeyState(txid, decode_value(value), decode_value(prev))
            for k, txid, value, prev in rows
        }

    def _write_rollup_keys(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        writes: Sequence[KeyWrite],
        lease_change: Transition,
    ) -> tuple[bool, LeaseItem | None]:
        sid, key = token.source_identifier, token.partition_key

        def write(db: sqlite3.Connection) -> tuple[bool, LeaseItem | None]:
            current = self._fetch(db, sid, key)
            if not lease_change.guard.holds(current):
                return False, current
            stored = self._rollup_states(db, rollup, dt, [w.key for w in writes])
            for w in writes:
                if (None if w.key not in stored else stored[w.key].txid) != w.expected_txid:
                    raise RollupKeyMovedError(f"rollup {rollup} dt={dt}: key {w.key} moved")
            db.executemany(
                "INSERT OR REPLACE INTO rollup_keys VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (
                        rollup,
                        dt,
                        w.key,
                        w.state.txid,
                        encode_value(w.state.value),
                        encode_value(w.state.prev_value),
                    )
                    for w in writes
                    if isinstance(w.state, KeyState)
                ],
            )
            db.executemany(
                "DELETE FROM rollup_keys WHERE rollup = ? AND dt = ? AND key = ?",
                [(rollup, dt, w.key) for w in writes if not isinstance(w.state, KeyState)],
            )
            self._apply_in(db, sid, key, lease_change)
            return True, None

        return self._run("write_rollup_keys", write)

    def schema_versions(self, stream: str) -> list[SchemaVersion]:
        """One primary-key range read. A file from before schema versions, opened without
        CREATE, has none; an error reading the file is `StoreRefusedError`."""
        if not self._has_schema_versions:  # an earlier version's file, opened without CREATE
            return []
        select = "SELECT body FROM schema_versions WHERE stream = ? ORDER BY version"
        try:
            rows = self._connection().execute(select, (stream,)).fetchall()
        except sqlite3.Error as exc:
            raise self._store_error("schema_versions", exc) from exc
        return [SchemaVersion.from_json(json.loads(body)) for (body,) in rows]

    def _put_schema_version(self, stream: str, version: SchemaVersion) -> None:
        """One INSERT inside `BEGIN IMMEDIATE`: the primary key (stream, version) is the
        empty-slot condition, so a taken one is `SchemaVersionTakenError`. A file opened
        read-only, or one without the table, is `StoreRefusedError`: nothing written."""

        def put(db: sqlite3.Connection) -> None:
            try:
                db.execute(
                    "INSERT INTO schema_versions (stream, version, body) VALUES (?, ?, ?)",
                    (stream, version.version, json.dumps(version.to_json())),
                )
            except sqlite3.IntegrityError:
                raise SchemaVersionTakenError(
                    f"schema version {version.version} of {stream!r} is recorded already"
                ) from None

        try:
            self._run("put_schema_version", put)
        except sqlite3.Error as exc:
            raise self._store_error("put_schema_version", exc) from exc

    def forget_rollup(self, rollup: str, dt: str) -> int:
        return self._run(
            "forget_rollup",
            lambda db: (
                db.execute(
                    "DELETE FROM rollup_keys WHERE rollup = ? AND dt = ?", (rollup, dt)
                ).rowcount
            ),
        )
