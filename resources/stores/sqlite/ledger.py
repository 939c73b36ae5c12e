"""The SQLite store's ledger: commits, commit records and the reads readers rely on.

Part of `SqliteLeaseStore` (a mixin on its connections): a commit is one `BEGIN IMMEDIATE`
transaction that checks the lease's guard, registers the objects and applies the lease change.
"""

from __future__ import annotations

import json
import sqlite3

from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    assign_ids,
)


class SqliteLedger:
    """The ledger half of `SqliteLeaseStore`, which provides `_run`, `_fetch`, `_apply_in`,
    `_connection` and `now_ms`."""

    def _commit(
        self,
        token: LeaseToken,
        groups: dict[tuple[str, str], list[SmallObject]],
        lease_change: Transition,
        record: bool,
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
            counters = {}
            for table, dt in groups:
                row = db.execute(
                    "SELECT next_object_id, last_live_object_id FROM table_partitions "
                    "WHERE tbl = ? AND dt = ?",
                    (table, dt),
                ).fetchone()
                if row is not None:
                    counters[(table, dt)] = (row[0], row[1])
            registered = assign_ids(token, groups, counters)
            db.executemany(
                "INSERT INTO table_partitions (tbl, dt, next_object_id) VALUES (?, ?, ?) "
                "ON CONFLICT (tbl, dt) DO UPDATE SET next_object_id = excluded.next_object_id",
                [
                    (table, dt, counters.get((table, dt), (1, None))[0] + len(group))
                    for (table, dt), group in groups.items()
                ],
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
            if record:
                db.execute(
                    "INSERT INTO commit_records VALUES (?, ?, ?, ?, ?)",
                    (
                        sid,
                        key,
                        token.epoch,
                        json.dumps([[o.table, o.dt, o.object_id] for o in registered]),
                        now,
                    ),
                )
            item, _ = self._apply_in(db, sid, key, lease_change)
            return CommitResult(item, tuple(registered)), None  # type: ignore[arg-type]

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
