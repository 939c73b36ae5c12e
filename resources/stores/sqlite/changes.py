"""The SQLite store's source changes (`resources/coordination/source_changes.py`): one row per
stream, key and new fingerprint in `source_changes`, created at the first write."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from resources.coordination.items import ATTR
from resources.coordination.source_changes import SourceChange

if TYPE_CHECKING:
    from resources.coordination.errors import StoreRefusedError

T = TypeVar("T")

SID, KEY = ATTR["sid"], ATTR["key"]
CREATE = f"""CREATE TABLE IF NOT EXISTS source_changes (
    {SID} TEXT NOT NULL, {KEY} TEXT NOT NULL, etag TEXT NOT NULL, size INTEGER NOT NULL,
    was_etag TEXT NOT NULL, was_size INTEGER NOT NULL, unit TEXT NOT NULL,
    seen_ms INTEGER NOT NULL, state TEXT NOT NULL, PRIMARY KEY ({SID}, {KEY}, etag)
) WITHOUT ROWID"""
COLUMNS = f"{KEY}, etag, size, was_etag, was_size, unit, seen_ms, state"


def _change(row: Sequence[Any]) -> SourceChange:
    key, etag, size, was_etag, was_size, unit, seen_ms, state = row
    return SourceChange(key, etag, int(size), was_etag, int(was_size), unit, int(seen_ms), state)


class SqliteChanges:
    """The source-changes half of `SqliteLeaseStore`, which provides `_run`, `_connection`
    and `_store_error`."""

    if TYPE_CHECKING:  # provided by SqliteLeaseStore (resources/stores/sqlite/store.py)

        def _connection(self) -> sqlite3.Connection: ...
        def _run(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T: ...
        def _store_error(self, action: str, exc: sqlite3.Error) -> StoreRefusedError: ...

    def record_changes(
        self, source_identifier: str, changes: Sequence[SourceChange]
    ) -> list[SourceChange]:
        """One transaction: `INSERT OR IGNORE` each, then each read back."""
        if not changes:
            return []

        def write(db: sqlite3.Connection) -> list[SourceChange]:
            db.execute(CREATE)
            stored = []
            for c in changes:
                db.execute(
                    f"INSERT OR IGNORE INTO source_changes ({SID}, {COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (source_identifier, c.key, c.etag, c.size, c.was_etag, c.was_size, c.unit)
                    + (c.seen_ms, c.state),
                )
                row = db.execute(
                    f"SELECT {COLUMNS} FROM source_changes WHERE {SID} = ? AND {KEY} = ? "
                    "AND etag = ?",
                    (source_identifier, c.key, c.etag),
                ).fetchone()
                stored.append(_change(row))
            return stored

        return self._run("record_changes", write)

    def source_changes(self, source_identifier: str, key: str | None = None) -> list[SourceChange]:
        """One query; a file without the table has none."""
        sql = f"SELECT {COLUMNS} FROM source_changes WHERE {SID} = ?"
        params: tuple[str, ...] = (source_identifier,)
        if key is not None:
            sql, params = sql + f" AND {KEY} = ?", (source_identifier, key)
        try:
            rows = self._connection().execute(sql + f" ORDER BY {KEY}, seen_ms", params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):
                return []
            raise self._store_error("source_changes", exc) from exc
        except sqlite3.Error as exc:
            raise self._store_error("source_changes", exc) from exc
        return [_change(row) for row in rows]

    def set_change_state(self, source_identifier: str, change: SourceChange, state: str) -> bool:
        """One `UPDATE`."""
        change.with_state(state)  # refuses an unknown state

        def write(db: sqlite3.Connection) -> bool:
            db.execute(CREATE)
            cursor = db.execute(
                f"UPDATE source_changes SET state = ? WHERE {SID} = ? AND {KEY} = ? AND etag = ?",
                (state, source_identifier, change.key, change.etag),
            )
            return cursor.rowcount > 0

        return self._run("set_change_state", write)
