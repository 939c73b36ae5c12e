"""The SQLite store's tables, the item row codec and the index-range queries.

One table per kind of record: lease items (Data Prepper's attribute names as columns), the
ledger's table partitions, small objects, merge ranges, publications and commit records, and
the metrics counters. Files written by an earlier version get the columns added since on open
(`ADDED_COLUMNS`): `CREATE TABLE IF NOT EXISTS` leaves an existing table as it was.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from resources.coordination.items import ATTR, LeaseItem, PartitionStatus

COLUMNS = (
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
SELECT = ", ".join(ATTR[c] for c in COLUMNS)
SELECT_WITHOUT_PROGRESS = ", ".join("NULL" if c == "progress" else ATTR[c] for c in COLUMNS)
INSERT_ABSENT = f"INSERT OR IGNORE INTO lease_items ({SELECT}) VALUES ({', '.join('?' * 13)})"
UPSERT = f"INSERT OR REPLACE INTO lease_items ({SELECT}) VALUES ({', '.join('?' * 13)})"
FETCH = f"SELECT {SELECT} FROM lease_items WHERE {ATTR['sid']} = ? AND {ATTR['key']} = ?"
HAS_LEASE_ITEMS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'lease_items'"
# Keys per `IN (...)` lookup: SQLite before 3.32 allows 999 parameters per statement.
KEYS_PER_LOOKUP = 500


def existing_keys(count: int) -> str:
    """Which of `count` keys of one source identifier have an item: primary-key lookups."""
    return (
        f"SELECT {ATTR['key']} FROM lease_items WHERE {ATTR['sid']} = ? "
        f"AND {ATTR['key']} IN ({', '.join('?' * count)})"
    )


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
    merged_upper INTEGER NOT NULL DEFAULT 0,
    merge_due_at INTEGER,
    published_upper INTEGER NOT NULL DEFAULT 0,
    publication_seq INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, dt)
) WITHOUT ROWID;
-- One partition's chain; keyed by `upper` so rewriting the open range is one UPDATE of its row.
-- The sentinel is the row with `lower` NULL and `upper` 0.
CREATE TABLE IF NOT EXISTS merge_ranges (
    tbl TEXT NOT NULL,
    dt TEXT NOT NULL,
    lower INTEGER,
    upper INTEGER NOT NULL,
    url TEXT,
    content_length INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    epoch INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    schema_version INTEGER NOT NULL DEFAULT 1,
    PRIMARY KEY (tbl, dt, upper)
) WITHOUT ROWID;
-- One partition's publication history, by `seq`; the last is current.
CREATE TABLE IF NOT EXISTS publications (
    tbl TEXT NOT NULL,
    dt TEXT NOT NULL,
    seq INTEGER NOT NULL,
    switched INTEGER NOT NULL,
    upper INTEGER NOT NULL,
    location TEXT NOT NULL,
    file_count INTEGER NOT NULL,
    row_count INTEGER NOT NULL,
    byte_count INTEGER NOT NULL,
    published_at INTEGER NOT NULL,
    revises INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (tbl, dt, seq)
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
    schema_version INTEGER NOT NULL DEFAULT 1,
    sources TEXT NOT NULL DEFAULT '',
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
-- One rollup's state of one table partition: a row per aggregate key (JSON values).
CREATE TABLE IF NOT EXISTS rollup_keys (
    rollup TEXT NOT NULL,
    dt TEXT NOT NULL,
    key TEXT NOT NULL,
    txid INTEGER NOT NULL,
    value TEXT NOT NULL,
    prev_value TEXT,
    PRIMARY KEY (rollup, dt, key)
) WITHOUT ROWID;
-- A stream's schema versions: written once each, into an empty slot (the primary key).
CREATE TABLE IF NOT EXISTS schema_versions (
    stream TEXT NOT NULL,
    version INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (stream, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS coordinator_metrics (
    {ATTR["sid"]} TEXT NOT NULL,
    name TEXT NOT NULL,
    value INTEGER NOT NULL,
    PRIMARY KEY ({ATTR["sid"]}, name)
) WITHOUT ROWID;
"""


PARTITION_COLUMNS = (
    "tbl",
    "dt",
    "next_object_id",
    "last_live_object_id",
    "current_manifest_version",
    "desired_manifest_version",
    "switched",
    "merged_upper",
    "merge_due_at",
    "published_upper",
    "publication_seq",
)
OBJECT_COLUMNS = (
    "tbl",
    "dt",
    "object_id",
    "url",
    "content_length",
    "row_count",
    ATTR["sid"],
    ATTR["key"],
    "epoch",
    "delayed",
    "committed_at",
    "schema_version",
    "sources",
)
RANGE_COLUMNS = (
    "tbl",
    "dt",
    "lower",
    "upper",
    "url",
    "content_length",
    "row_count",
    "epoch",
    "updated_at",
    "schema_version",
)
PUBLICATION_COLUMNS = (
    "tbl",
    "dt",
    "seq",
    "switched",
    "upper",
    "location",
    "file_count",
    "row_count",
    "byte_count",
    "published_at",
    "revises",
)
ADDED_COLUMNS = {
    "table_partitions": (
        ("merged_upper", "INTEGER NOT NULL DEFAULT 0", "0"),
        ("merge_due_at", "INTEGER", "NULL"),
        ("published_upper", "INTEGER NOT NULL DEFAULT 0", "0"),
        ("publication_seq", "INTEGER NOT NULL DEFAULT 0", "0"),
    ),
    "small_objects": (
        ("schema_version", "INTEGER NOT NULL DEFAULT 1", "1"),
        ("sources", "TEXT NOT NULL DEFAULT ''", "''"),
    ),
    "merge_ranges": (("schema_version", "INTEGER NOT NULL DEFAULT 1", "1"),),
    "publications": (("revises", "INTEGER NOT NULL DEFAULT 0", "0"),),
}
"""Columns added to existing tables since the first release: (column, definition, the value
a reader of a file that lacks it sees). A table's `CREATE` lists them last, in this order, as
`ALTER TABLE ... ADD COLUMN` appends them."""
HAS_MERGE_RANGES = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'merge_ranges'"
HAS_PUBLICATIONS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'publications'"
HAS_ROLLUP_KEYS = "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'rollup_keys'"
HAS_SCHEMA_VERSIONS = (
    "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_versions'"
)


def missing_columns(db: sqlite3.Connection) -> list[tuple[str, str, str, str]]:
    """(table, column, definition, read as) of every `ADDED_COLUMNS` entry the file lacks."""
    missing = []
    for table, columns in ADDED_COLUMNS.items():
        present = {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
        missing += [(table, *column) for column in columns if column[0] not in present]
    return missing


def add_missing_columns(db: sqlite3.Connection) -> int:
    """Add what `missing_columns` finds; called inside a write transaction, so two processes
    opening an old file at once add each column once."""
    missing = missing_columns(db)
    for table, column, definition, _ in missing:
        db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {definition}")
    return len(missing)


def partition_select(db: sqlite3.Connection) -> str:
    """The partition row's columns as the ledger selects them. A file from an earlier version
    opened without `Opening.CREATE` is never altered: its missing columns read as their
    defaults, so `leasehold status` works on it before any run upgraded it."""
    return _select(db, "table_partitions", PARTITION_COLUMNS)


def object_select(db: sqlite3.Connection) -> str:
    """A small object's row as the ledger selects it (`OBJECT_COLUMNS`), read as
    `partition_select` reads a partition's: a column an old file lacks as its default."""
    return _select(db, "small_objects", OBJECT_COLUMNS)


def range_select(db: sqlite3.Connection) -> str:
    """A merge range's row as the ledger selects it (`RANGE_COLUMNS`), a column an old file
    lacks read as its default."""
    return _select(db, "merge_ranges", RANGE_COLUMNS)


def publication_select(db: sqlite3.Connection) -> str:
    """A publication record as the ledger selects it (`PUBLICATION_COLUMNS`), a column an old
    file lacks read as its default."""
    return _select(db, "publications", PUBLICATION_COLUMNS)


def _select(db: sqlite3.Connection, table: str, columns: Sequence[str]) -> str:
    read_as = {c: value for t, c, _, value in missing_columns(db) if t == table}
    return ", ".join(f"{read_as[c]} AS {c}" if c in read_as else c for c in columns)


def _status_ranges(*ranges: tuple[str, str]) -> str:
    """Items of each (status, priority condition or ""), by priority, `:limit` of each: one
    range of the `source_status` index apiece, as Data Prepper queries its GSI. (One WHERE
    with the ranges OR-ed together reads every item of the source instead.)"""
    selects = [
        f"SELECT * FROM (SELECT {SELECT}, {order} AS _range FROM lease_items "
        f"WHERE {ATTR['sid']} = :sid AND {ATTR['status']} = '{status}' "
        + (f"AND {ATTR['priority']} {condition} " if condition else "")
        + f"ORDER BY {ATTR['priority']} LIMIT :limit)"
        for order, (status, condition) in enumerate(ranges)
    ]
    return " UNION ALL ".join(selects)


# Acquisition order of docs/architecture.md: expired ASSIGNED, reopened CLOSED, then UNASSIGNED.
AVAILABLE = (
    _status_ranges(("ASSIGNED", "< :now_prio"), ("CLOSED", "<= :now_prio"), ("UNASSIGNED", ""))
    + f" ORDER BY _range, {ATTR['priority']} LIMIT :limit"
)
# What earlier attempts left behind, oldest first.
DUE_FOR_RETRY = (
    _status_ranges(
        ("ASSIGNED", "< :now_prio"), ("CLOSED", "<= :now_prio"), ("UNASSIGNED", "< :waited_prio")
    )
    + f" ORDER BY {ATTR['priority']} LIMIT :limit"
)

# Work not done yet, in the order `LeaseStore.pending_partitions` promises.
PENDING = (
    _status_ranges(("UNASSIGNED", ""), ("ASSIGNED", ""), ("CLOSED", ""))
    + f" ORDER BY _range, {ATTR['priority']} LIMIT :limit"
)


def row_to_item(row: Sequence[Any]) -> LeaseItem:
    v = dict(zip(COLUMNS, row, strict=True))
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


def item_row(item: LeaseItem) -> tuple[Any, ...]:
    return (
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
    )
