"""The rows an ingestion commit reads and writes in the SQLite ledger, each a step of
`SqliteLedger._commit`'s one transaction: the partitions' id counters and merge due times, the
small objects, the commit record."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping, Sequence

from resources.coordination.items import LeaseToken
from resources.ledger.merge import CommitDue, commit_merge_due
from resources.ledger.model import RegisteredObject, SmallObject
from resources.ledger.provenance import sources_json
from resources.stores.sqlite.schema import OBJECT_COLUMNS

Counters = dict[tuple[str, str], tuple[int, int | None]]


def read_counters(
    db: sqlite3.Connection,
    groups: dict[tuple[str, str], list[SmallObject]],
    merge_due: Mapping[str, CommitDue],
) -> tuple[Counters, dict[tuple[str, str], int | None]]:
    """(next id, last live id) of each partition that exists, and the merge due time each
    partition gets."""
    counters: Counters = {}
    dues: dict[tuple[str, str], int | None] = {}
    for table, dt in groups:
        row = db.execute(
            "SELECT next_object_id, last_live_object_id, merge_due_at "
            "FROM table_partitions WHERE tbl = ? AND dt = ?",
            (table, dt),
        ).fetchone()
        if row is not None:
            counters[(table, dt)] = (row[0], row[1])
        # Decided under the write lock: no close or merge commit can land in between.
        dues[(table, dt)] = commit_merge_due(
            None if row is None else row[2],
            row is not None and row[1] is not None,
            merge_due.get(table),
        )
    return counters, dues


def write_counters(
    db: sqlite3.Connection,
    groups: dict[tuple[str, str], list[SmallObject]],
    counters: Counters,
    dues: dict[tuple[str, str], int | None],
) -> None:
    """Each partition's counter moved past its new objects, and its merge due time."""
    db.executemany(
        "INSERT INTO table_partitions (tbl, dt, next_object_id, merge_due_at) "
        "VALUES (?, ?, ?, ?) ON CONFLICT (tbl, dt) DO UPDATE SET "
        "next_object_id = excluded.next_object_id, "
        "merge_due_at = excluded.merge_due_at",
        [
            (
                table,
                dt,
                counters.get((table, dt), (1, None))[0] + len(group),
                dues[(table, dt)],
            )
            for (table, dt), group in groups.items()
        ],
    )


def insert_objects(
    db: sqlite3.Connection, registered: Sequence[RegisteredObject], now: int
) -> None:
    db.executemany(
        f"INSERT INTO small_objects ({', '.join(OBJECT_COLUMNS)}) "
        f"VALUES ({', '.join('?' * len(OBJECT_COLUMNS))})",
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
                o.schema_version,
                sources_json(o.sources),
            )
            for o in registered
        ],
    )


def insert_record(
    db: sqlite3.Connection, token: LeaseToken, registered: Sequence[RegisteredObject], now: int
) -> None:
    """The commit record: which objects the work unit's commit registered."""
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
