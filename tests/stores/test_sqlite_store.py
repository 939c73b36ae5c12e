"""SQLite-only: the queries a sensor tick and an acquisition make stay index range reads; a store
opened without creating reads a live WAL database and creates nothing."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from resources.coordination.errors import StoreNotFoundError
from resources.coordination.items import PartitionStatus
from resources.stores import build_store, open_existing_store
from resources.stores.settings import StoreSettings
from resources.stores.sqlite.schema import AVAILABLE, DUE_FOR_RETRY, existing_keys


@pytest.mark.parametrize("query", [AVAILABLE, DUE_FOR_RETRY], ids=["acquire_next", "retries"])
def test_status_queries_read_index_ranges_not_the_whole_source(tmp_path: Path, query: str) -> None:
    """Done items pile up (COMPLETED stays): a look for work must not read them all, every tick."""
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "c.db")))
    params = {"sid": "s", "now_prio": "1", "waited_prio": "0", "limit": 20}
    plan = [row[3] for row in store._connection().execute(f"EXPLAIN QUERY PLAN {query}", params)]
    reads = [step for step in plan if "lease_items" in step]
    assert len(reads) == 3, plan
    assert all(step.startswith("SEARCH lease_items USING INDEX source_status") for step in reads)


def test_missing_keys_reads_the_primary_key(tmp_path: Path) -> None:
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "c.db")))
    sql = existing_keys(3)
    plan = [row[3] for row in store._connection().execute(f"EXPLAIN QUERY PLAN {sql}", "sabc")]
    assert plan and all("USING PRIMARY KEY" in step for step in plan), plan


def test_read_only_store_reads_a_live_wal_store_and_writes_nothing(tmp_path: Path) -> None:
    settings = StoreSettings(sqlite_path=str(tmp_path / "c.db"))
    writer = build_store(settings)
    sid = writer.source_identifier("events")
    writer.create_partitions(sid, ["a", "b"])
    writer.complete(writer.acquire(sid, "a", "w1", 60).token)
    writer.flush_metrics()
    assert (tmp_path / "c.db-wal").exists()  # the writer is live: its commits sit in the WAL

    reader = open_existing_store(settings)
    assert reader.get(sid, "a").status is PartitionStatus.COMPLETED
    assert reader.missing_keys(sid, ["a", "b", "c"]) == ["c"]
    (summary,) = reader.status()
    assert summary.counts["COMPLETED"] == 1 and summary.counts["UNASSIGNED"] == 1
    writer.create_partitions(sid, ["c"])  # a commit made while the reader is open is seen
    assert reader.missing_keys(sid, ["a", "b", "c"]) == []
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.create_partitions(sid, ["d"])
    reader.close_store()
    writer.close_store()

    # Also after the last writer closed (and checkpointed the WAL away).
    reader = open_existing_store(settings)
    assert sorted(i.partition_key for i in reader.iter_items(sid)) == ["a", "b", "c"]
    reader.close_store()


def test_opening_an_existing_store_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "nested" / "c.db"
    settings = StoreSettings(sqlite_path=str(missing))
    for read_only in (True, False):
        with pytest.raises(StoreNotFoundError) as err:
            open_existing_store(settings, read_only=read_only)
        assert str(err.value) == (
            f"no lease store: SQLite file {missing} (LEASEHOLD_SQLITE_PATH); "
            "`leasehold run` creates it"
        )
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_is_no_lease_store_is_not_opened(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.commit()
    text = tmp_path / "notes.txt"
    text.write_text("not a database, just long enough to have a header " * 4)
    with pytest.raises(StoreNotFoundError, match="no lease_items table"):
        open_existing_store(StoreSettings(sqlite_path=str(other)))
    with pytest.raises(StoreNotFoundError, match="not a lease store"):
        open_existing_store(StoreSettings(sqlite_path=str(text)))
    tables = sqlite3.connect(other).execute("SELECT name FROM sqlite_master").fetchall()
    assert tables == [("t",)]  # no schema added to someone else's database
