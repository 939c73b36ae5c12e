"""SQLite-only: a store file written before the ledger knew merges keeps working — a run adds
the missing columns and table on open, a read-only look reads them as their defaults."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from resources.stores import build_store, open_existing_store
from resources.stores.settings import StoreSettings
from resources.stores.sqlite import schema
from tests.support.fakes import FakeClock
from tests.support.merge_ledger import DT, INTERVAL, TABLE, acquire_job, ingest, merge, merged, obj

NEW_COLUMNS = "    merged_upper INTEGER NOT NULL DEFAULT 0,\n    merge_due_at INTEGER,\n"


def earlier_version(path: Path) -> None:
    """The file as the release before merges left it: no merge columns, no merge ranges, one
    table partition with two committed ids."""
    old = schema.SCHEMA.replace(NEW_COLUMNS, "")
    old = re.sub(r"-- One partition's chain.*?WITHOUT ROWID;\n", "", old, flags=re.S)
    assert NEW_COLUMNS not in old and "merge_ranges" not in old
    db = sqlite3.connect(path)
    db.executescript(old)
    db.execute(
        "INSERT INTO table_partitions (tbl, dt, next_object_id) VALUES (?, ?, 3)", (TABLE, DT)
    )
    db.commit()
    db.close()


def columns(path: Path) -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[1] for row in db.execute("PRAGMA table_info(table_partitions)")}
    finally:
        db.close()


def test_a_read_only_look_reads_an_old_file_without_altering_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    earlier_version(path)
    reader = open_existing_store(StoreSettings(sqlite_path=str(path)))
    (partition,) = reader.table_partitions(TABLE)
    assert partition == reader.table_partition(TABLE, DT)
    assert (partition.next_object_id, partition.merged_upper, partition.merge_due_at_ms) == (
        3,
        0,
        None,
    )
    assert reader.merge_ranges(TABLE, DT) == []
    reader.close_store()
    assert "merged_upper" not in columns(path)


def test_a_run_upgrades_an_old_file_and_merges_in_it(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    earlier_version(path)
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    assert {"merged_upper", "merge_due_at"} <= columns(path)
    assert store.table_partition(TABLE, DT).merged_upper == 0
    now = store.now_ms()
    ingest(store, obj("c"))
    assert store.table_partition(TABLE, DT).merge_due_at_ms == now + int(INTERVAL * 1000)
    result = store.commit_merge(acquire_job(store).token, merge(0, merged(0, 3)))
    assert result.desired_manifest_version == 3 and result.merge_due_at_ms is None
    assert [r.upper for r in store.merge_ranges(TABLE, DT)] == [0, 3]
    store.close_store()
    again = build_store(StoreSettings(sqlite_path=str(path)))  # opening again changes nothing
    assert again.table_partition(TABLE, DT).merged_upper == 3
    again.close_store()
