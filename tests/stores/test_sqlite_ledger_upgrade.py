"""SQLite-only: a store file written before the ledger knew merges (or publications, or
schema versions) keeps working — a run adds the missing columns and tables on open, a read-only
look reads them as their defaults."""

from __future__ import annotations

import re
import sqlite3
from dataclasses import replace
from pathlib import Path

from resources.ledger.publication import Publication
from resources.stores import build_store, open_existing_store
from resources.stores.settings import StoreSettings
from resources.stores.sqlite import schema
from tests.support.fakes import FakeClock
from tests.support.merge_ledger import DT, INTERVAL, TABLE, acquire_job, ingest, merge, merged, obj

NEW_COLUMNS = "    merged_upper INTEGER NOT NULL DEFAULT 0,\n    merge_due_at INTEGER,\n"
PUBLICATION_COLUMNS = (
    "    published_upper INTEGER NOT NULL DEFAULT 0,\n"
    "    publication_seq INTEGER NOT NULL DEFAULT 0,\n"
)


SCHEMA_VERSION_COLUMN = "    schema_version INTEGER NOT NULL DEFAULT 1,\n"
SOURCES_COLUMN = "    sources TEXT NOT NULL DEFAULT '',\n"


def without_schema_versions(text: str) -> str:
    """The schema as the release before schema versions (issue 31) wrote it: no version per
    small object, no table of a stream's versions."""
    old = text.replace(SCHEMA_VERSION_COLUMN, "").replace(SOURCES_COLUMN, "")
    old = re.sub(r"-- A stream's schema versions.*?WITHOUT ROWID;\n", "", old, flags=re.S)
    assert "schema_version" not in old
    return old


def without_publications(text: str) -> str:
    """The schema as the release before publications (issue 13) wrote it."""
    old = text.replace(PUBLICATION_COLUMNS, "")
    old = re.sub(r"-- One partition's publication history.*?WITHOUT ROWID;\n", "", old, flags=re.S)
    assert PUBLICATION_COLUMNS not in old and "publications" not in old
    return old


def earlier_version(path: Path, *, merges: bool = False) -> None:
    """The file as the release before merges left it (`merges`: the one before publications):
    no merge columns, no merge ranges, no schema versions, one table partition with its two
    committed objects."""
    old = without_publications(without_schema_versions(schema.SCHEMA))
    if not merges:
        old = old.replace(NEW_COLUMNS, "")
        old = re.sub(r"-- One partition's chain.*?WITHOUT ROWID;\n", "", old, flags=re.S)
        assert NEW_COLUMNS not in old and "merge_ranges" not in old
    db = sqlite3.connect(path)
    db.executescript(old)
    db.execute(
        "INSERT INTO table_partitions (tbl, dt, next_object_id) VALUES (?, ?, 3)", (TABLE, DT)
    )
    db.executemany(  # that release's columns, in its order
        "INSERT INTO small_objects VALUES (?, ?, ?, ?, 1000, 10, 'source', ?, 1, 0, ?)",
        [(TABLE, DT, i, obj(f"old-{i}").url, obj(f"old-{i}").url, OLD_COMMIT_MS) for i in (1, 2)],
    )
    db.commit()
    db.close()


OLD_COMMIT_MS = 1_700_000_000_000


def columns(path: Path, table: str = "table_partitions") -> set[str]:
    db = sqlite3.connect(path)
    try:
        return {row[1] for row in db.execute(f"PRAGMA table_info({table})")}
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


def publication(upper: int) -> Publication:
    return Publication(TABLE, DT, 0, False, upper, f"file:///m/live-{upper}/", upper, 1, 1, 0)


def test_a_read_only_look_at_a_file_before_publications(tmp_path: Path) -> None:
    path = tmp_path / "merges.db"
    earlier_version(path, merges=True)
    reader = open_existing_store(StoreSettings(sqlite_path=str(path)))
    partition = reader.table_partition(TABLE, DT)
    assert (partition.published_upper, partition.publication_seq) == (0, 0)
    assert partition.current_manifest_version == -1 and not partition.switched
    assert reader.table_partitions(TABLE) == [partition]
    assert reader.publications(TABLE, DT) == []
    reader.close_store()
    assert "publication_seq" not in columns(path) and "merged_upper" in columns(path)


def test_a_run_upgrades_a_file_before_publications_and_publishes_in_it(tmp_path: Path) -> None:
    path = tmp_path / "merges.db"
    earlier_version(path, merges=True)
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    assert {"published_upper", "publication_seq"} <= columns(path)
    recorded = store.record_publication(publication(2))
    assert recorded.seq == 1 and store.publications(TABLE, DT) == [recorded]
    store.close_store()
    again = build_store(StoreSettings(sqlite_path=str(path)))  # opening again changes nothing
    partition = again.table_partition(TABLE, DT)
    assert (partition.published_upper, partition.publication_seq) == (2, 1)
    assert partition.current_manifest_version == 0
    again.close_store()


def test_a_file_before_merges_gets_every_later_column(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    earlier_version(path)
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    wanted = {"merged_upper", "merge_due_at", "published_upper", "publication_seq"}
    assert wanted <= columns(path)
    assert store.record_publication(publication(2)).seq == 1
    store.close_store()


def test_a_read_only_look_reads_old_objects_as_schema_version_1(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    earlier_version(path, merges=True)
    reader = open_existing_store(StoreSettings(sqlite_path=str(path)))
    objects = reader.ledger_objects(TABLE, DT)
    assert [(o.object_id, o.schema_version) for o in objects] == [(1, 1), (2, 1)]
    assert [o.committed_at_ms for o in objects] == [OLD_COMMIT_MS] * 2
    assert reader.ledger_objects(TABLE, DT, after=1) == objects[1:]
    assert reader.schema_versions(TABLE) == []
    reader.close_store()
    assert "schema_version" not in columns(path, "small_objects")


def test_a_run_upgrades_a_file_before_schema_versions_and_commits_versions_in_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    earlier_version(path, merges=True)
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    assert "schema_version" in columns(path, "small_objects")
    (added,) = ingest(store, replace(obj("new"), schema_version=2))
    assert (added.object_id, added.schema_version) == (3, 2)
    store.close_store()
    again = build_store(StoreSettings(sqlite_path=str(path)))  # opening again changes nothing
    objects = again.ledger_objects(TABLE, DT)
    assert [(o.object_id, o.schema_version) for o in objects] == [(1, 1), (2, 1), (3, 2)]
    assert objects[2] == added
    again.close_store()


def test_merge_ranges_from_before_schema_versions_read_as_version_1_until_rewritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    earlier_version(path, merges=True)
    db = sqlite3.connect(path)
    db.executemany(  # that release's columns, in its order: the sentinel and (0, 2]
        "INSERT INTO merge_ranges VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?)",
        [
            (TABLE, DT, None, 0, None, 0, 0, OLD_COMMIT_MS),
            (TABLE, DT, 0, 2, merged(0, 2).url, 200, 20, OLD_COMMIT_MS),
        ],
    )
    db.execute("UPDATE table_partitions SET merged_upper = 2, desired_manifest_version = 2")
    db.commit()
    db.close()
    reader = open_existing_store(StoreSettings(sqlite_path=str(path)))
    assert [(r.upper, r.schema_version) for r in reader.merge_ranges(TABLE, DT)] == [(0, 1), (2, 1)]
    reader.close_store()
    assert "schema_version" not in columns(path, "merge_ranges")

    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    ingest(store, replace(obj("c"), schema_version=3))
    done = store.commit_merge(
        acquire_job(store).token, merge(2, replace(merged(0, 3), schema_version=3))
    )
    assert done.range is not None and done.range.schema_version == 3
    assert store.merge_ranges(TABLE, DT)[1:] == [done.range]  # the open range, rewritten
    store.close_store()


REVISES_COLUMN = "    revises INTEGER NOT NULL DEFAULT 0,\n"


def test_publication_records_from_before_revisions_read_as_new_versions(tmp_path: Path) -> None:
    path = tmp_path / "before-revisions.db"
    old = schema.SCHEMA.replace(REVISES_COLUMN, "")
    assert REVISES_COLUMN in schema.SCHEMA and "revises" not in old
    db = sqlite3.connect(path)
    db.executescript(old)
    db.execute(
        "INSERT INTO table_partitions (tbl, dt, next_object_id) VALUES (?, ?, 3)", (TABLE, DT)
    )
    db.commit()
    db.close()
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    first = store.record_publication(publication(2))
    store.close_store()
    db = sqlite3.connect(path)  # as a release before revisions left it: no column
    db.executescript(
        "CREATE TABLE p AS SELECT tbl, dt, seq, switched, upper, location, file_count, "
        "row_count, byte_count, published_at FROM publications; DROP TABLE publications; "
        "ALTER TABLE p RENAME TO publications;"
    )
    db.close()
    reader = open_existing_store(StoreSettings(sqlite_path=str(path)))
    assert reader.publications(TABLE, DT) == [first] and first.revises == 0
    reader.close_store()
    assert "revises" not in columns(path, "publications")
    store = build_store(StoreSettings(sqlite_path=str(path)), clock=FakeClock())
    assert "revises" in columns(path, "publications")
    revision = store.record_publication(replace(publication(2), revises=1))
    assert store.publications(TABLE, DT) == [first, revision] and revision.revises == 1
    store.close_store()
