"""The SQLite store's object claims (`resources/coordination/object_claims.py`): one row per
claimed source object in `object_claims`, written in one transaction per call. A file whose
table predates fingerprints gets its `etag` column at the first write; until then its claims
read with none (unknown)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from resources.coordination.items import ATTR
from resources.coordination.object_claims import ObjectClaim
from resources.stores.sqlite.schema import KEYS_PER_LOOKUP

if TYPE_CHECKING:
    from resources.coordination.errors import StoreRefusedError

T = TypeVar("T")

CREATE = f"""CREATE TABLE IF NOT EXISTS object_claims (
    {ATTR["sid"]} TEXT NOT NULL, {ATTR["key"]} TEXT NOT NULL, unit TEXT NOT NULL,
    size INTEGER NOT NULL, etag TEXT NOT NULL DEFAULT '',
    PRIMARY KEY ({ATTR["sid"]}, {ATTR["key"]})
) WITHOUT ROWID"""


def has_etag(db: sqlite3.Connection) -> bool:
    """Whether the file's `object_claims` has its `etag` column (absent before fingerprints)."""
    return any(row[1] == "etag" for row in db.execute("PRAGMA table_info(object_claims)"))


class SqliteClaims:
    """The claims half of `SqliteLeaseStore`, which provides `_run`, `_connection` and
    `_store_error`."""

    if TYPE_CHECKING:  # provided by SqliteLeaseStore (resources/stores/sqlite/store.py)

        def _connection(self) -> sqlite3.Connection: ...
        def _run(self, action: str, fn: Callable[[sqlite3.Connection], T]) -> T: ...
        def _store_error(self, action: str, exc: sqlite3.Error) -> StoreRefusedError: ...

    def claim_objects(self, source_identifier: str, claims: Sequence[ObjectClaim]) -> None:
        """One transaction; the table is created if the file predates claims."""
        if not claims:
            return
        rows = [(source_identifier, c.key, c.unit, c.size, c.etag) for c in claims]

        def write(db: sqlite3.Connection) -> None:
            db.execute(CREATE)
            if not has_etag(db):
                db.execute("ALTER TABLE object_claims ADD COLUMN etag TEXT NOT NULL DEFAULT ''")
            db.executemany(
                f"INSERT OR REPLACE INTO object_claims ({ATTR['sid']}, {ATTR['key']}, unit, "
                "size, etag) VALUES (?, ?, ?, ?, ?)",
                rows,
            )

        self._run("claim_objects", write)

    def object_claims(self, source_identifier: str, keys: Sequence[str]) -> dict[str, ObjectClaim]:
        """Primary-key lookups, `KEYS_PER_LOOKUP` at a time; a file without the table (from
        before claims, opened without CREATE) has none."""
        unique = list(dict.fromkeys(keys))
        found: dict[str, ObjectClaim] = {}
        db = self._connection()
        for start in range(0, len(unique), KEYS_PER_LOOKUP):
            batch = unique[start : start + KEYS_PER_LOOKUP]
            try:
                etag = "etag" if has_etag(db) else "''"
                sql = (
                    f"SELECT {ATTR['key']}, unit, size, {etag} FROM object_claims WHERE "
                    f"{ATTR['sid']} = ? AND {ATTR['key']} IN ({', '.join('?' * len(batch))})"
                )
                rows = db.execute(sql, (source_identifier, *batch)).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return {}
                raise self._store_error("object_claims", exc) from exc
            except sqlite3.Error as exc:
                raise self._store_error("object_claims", exc) from exc
            found.update((k, ObjectClaim(k, u, int(s), str(e))) for k, u, s, e in rows)
        return found
