"""The schema versions every backend keeps (issue 31): version n+1 is version n plus columns,
recorded once, into an empty slot, so writers racing for a version number are ordered and every
column any of them asked for lands; asking again for held columns writes nothing."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from resources.coordination.errors import LeaseStoreError, StoreRefusedError
from resources.ledger.schema_versions import SchemaVersionTakenError
from resources.schema.columns import ColumnSpec
from resources.schema.versions import SchemaOrigin, SchemaVersion
from resources.stores import build_store, open_existing_store
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from resources.stores.sqlite import schema
from tests.support.child_processes import child_processes, spawn_child, wait_for
from tests.support.fakes import FakeClock, StoreFactory

pytestmark = pytest.mark.contract

STREAM = "events"
BASE = [ColumnSpec("event_id", "string"), ColumnSpec("amount", "double")]
ORIGIN = SchemaOrigin(unit="unit-1", object_key="2026/01/01/a.jsonl", line=3)


def cols(*pairs: str) -> list[ColumnSpec]:
    """`cols("a long", "b string")`: columns from "name type" pairs."""
    return [ColumnSpec(*pair.split()) for pair in pairs]


def test_the_first_record_of_a_stream_is_version_1(store: CoordinationStore) -> None:
    assert store.schema_versions(STREAM) == []
    first = store.record_schema(STREAM, BASE, ORIGIN)
    assert first == SchemaVersion(1, tuple(BASE), ("event_id", "amount"), ORIGIN, store.now_ms())
    assert store.schema_versions(STREAM) == [first]


def test_a_superset_is_the_next_version_adding_only_the_new_columns_in_the_order_asked(
    store: CoordinationStore, clock: FakeClock
) -> None:
    first = store.record_schema(STREAM, BASE, ORIGIN)
    clock.advance(5)
    later = SchemaOrigin(unit="unit-2", object_key="2026/01/02/b.jsonl", line=1)
    asked = cols("zeta long", "event_id string", "alpha boolean", "amount double")
    second = store.record_schema(STREAM, asked, later)
    assert second.version == 2 and second.added == ("zeta", "alpha")
    assert second.columns == (*BASE, *cols("zeta long", "alpha boolean"))
    assert (second.origin, second.created_at_ms) == (later, first.created_at_ms + 5000)
    assert store.schema_versions(STREAM) == [first, second]


def test_recording_held_columns_returns_their_version_and_writes_nothing(
    store: CoordinationStore, clock: FakeClock
) -> None:
    """A run that died after recording a version and before committing asks for the same
    columns again when its unit is retried: it gets that version back, as recorded."""
    first = store.record_schema(STREAM, BASE, ORIGIN)
    second = store.record_schema(STREAM, [*BASE, *cols("country string")], ORIGIN)
    clock.advance(60)
    retry = SchemaOrigin(unit="unit-1", object_key="2026/01/01/a.jsonl", line=3)
    assert store.record_schema(STREAM, [*BASE, *cols("country string")], retry) == second
    assert store.record_schema(STREAM, cols("country string"), retry) == second
    assert store.record_schema(STREAM, BASE[:1], retry) == first  # the first holding them
    assert store.record_schema(STREAM, [], retry) == first
    assert store.schema_versions(STREAM) == [first, second]


def test_a_held_name_asked_for_with_another_type_is_not_retyped(store: CoordinationStore) -> None:
    first = store.record_schema(STREAM, BASE, ORIGIN)
    assert store.record_schema(STREAM, cols("amount string"), ORIGIN) == first
    second = store.record_schema(STREAM, cols("amount string", "tags string"), ORIGIN)
    assert second.version == 2 and second.added == ("tags",)
    assert second.columns == (*BASE, ColumnSpec("tags", "string"))
    assert store.schema_versions(STREAM) == [first, second]


def test_versions_are_per_stream(store: CoordinationStore) -> None:
    events = store.record_schema(STREAM, BASE, ORIGIN)
    clicks = store.record_schema("clicks", cols("click_id string"), ORIGIN)
    events_2 = store.record_schema(STREAM, [*BASE, *cols("country string")], ORIGIN)
    assert (events.version, clicks.version, events_2.version) == (1, 1, 2)
    assert store.schema_versions("clicks") == [clicks]
    assert store.schema_versions(STREAM) == [events, events_2]
    assert store.schema_versions("events_quarantine") == []
    assert store.schema_versions("event") == []  # not a prefix match


def test_putting_a_taken_version_number_is_refused_and_writes_nothing(
    store: CoordinationStore,
) -> None:
    first = store.record_schema(STREAM, BASE, ORIGIN)
    other = SchemaVersion(1, tuple(cols("other long")), ("other",), ORIGIN, 7)
    with pytest.raises(SchemaVersionTakenError, match="schema version 1 of 'events'"):
        store._put_schema_version(STREAM, other)
    assert store.schema_versions(STREAM) == [first]
    store._put_schema_version("clicks", other)  # the same number of another stream is free
    assert store.schema_versions("clicks") == [other]


# -- writers racing in their own processes ------------------------------------------------------

WRITERS = 4
REQUESTS = 8
"""Per writer, one after the other, each asking for one new column of its own."""
THINK_S = 0.01
"""Each writer's pause between reading the versions and putting the next: SQLite's read and
put take well under a millisecond, so without it the writers rarely overlap."""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


@pytest.mark.slow
def test_writers_in_processes_adding_columns_at_once_all_land_as_gapless_versions(
    backend: str,
    settings_for: Callable[..., StoreSettings],
    make_store: StoreFactory,
    children: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    """`WRITERS` processes start together (a go file) on one store — one SQLite file, one
    DynamoDB table on the loopback server — each recording `REQUESTS` new columns of its own
    on top of version 1. Every column lands; the versions are 1..n without a gap, each one
    the previous one plus exactly the column one writer asked for, the last holding all; and
    every writer was told a version holding what it asked for."""
    settings = settings_for(backend)
    store = make_store(settings)  # creates the file or table the writers open
    first = store.record_schema(STREAM, BASE, ORIGIN)
    base = [[c.name, c.type] for c in BASE]
    procs = []
    for w in range(WRITERS):
        requests = [[*base, [f"w{w}_c{r}", "long"]] for r in range(REQUESTS)]
        payload = {
            "settings": settings.__dict__,
            "stream": STREAM,
            "writer": f"writer-{w}",
            "requests": requests,
            "think_s": THINK_S,
            "ready": str(tmp_path / f"{w}.ready"),
            "go": str(tmp_path / "go"),
            "out": str(tmp_path / f"{w}.json"),
        }
        procs.append(spawn_child(children, "schema_child", payload))
    for w, proc in enumerate(procs):
        wait_for(tmp_path / f"{w}.ready", proc, limit_s=60)
    (tmp_path / "go").write_text("go")
    for w, proc in enumerate(procs):
        wait_for(tmp_path / f"{w}.json", proc, limit_s=120)
        assert proc.wait(30) == 0

    told = [json.loads((tmp_path / f"{w}.json").read_text()) for w in range(WRITERS)]
    versions = store.schema_versions(STREAM)
    n = 1 + WRITERS * REQUESTS
    assert [v.version for v in versions] == list(range(1, n + 1))
    assert versions[0] == first
    for previous, version in zip(versions, versions[1:], strict=False):
        (added,) = version.added
        assert version.columns == (*previous.columns, ColumnSpec(added, "long"))
    wanted = {f"w{w}_c{r}" for w in range(WRITERS) for r in range(REQUESTS)}
    assert set(versions[-1].names) == {"event_id", "amount", *wanted}
    by_number = {v.version: v for v in versions}
    answered = []
    for w, account in enumerate(told):
        for r, answer in enumerate(account["answers"]):
            # Nobody else asks for this writer's column: the version it was told is the one
            # it wrote, as stored, and its origin names the writer's request.
            version = by_number[answer["version"]]
            assert answer["columns"] == version.names and version.added == (f"w{w}_c{r}",)
            assert (version.origin.unit, version.origin.line) == (f"writer-{w}", r + 1)
            answered.append(answer["version"])
        # A writer's own versions follow each other: each request waits for the one before.
        own = [a["version"] for a in account["answers"]]
        assert own == sorted(own)
    assert sorted(answered) == list(range(2, n + 1))
    # Each lost race is a version another writer landed between a read and a put.
    assert sum(a["lost_races"] for a in told) >= 1, told


# -- what a store that cannot be read or written says -------------------------------------------


def test_a_store_that_cannot_be_written_or_read_raises_a_lease_store_error(
    backend: str,
    settings_for: Callable[..., StoreSettings],
    make_store: StoreFactory,
) -> None:
    """SQLite: opened read-only, then a table gone behind its back; DynamoDB: the table deleted.
    Neither leaks the driver's own error (callers handle `LeaseStoreError`), nor passes for a
    lost race (`SchemaVersionTakenError` would send `record_schema` round again)."""
    settings = settings_for(backend)
    store = make_store(settings)
    first = store.record_schema(STREAM, BASE, ORIGIN)
    if backend == "sqlite":
        reader = open_existing_store(settings)
        try:
            assert reader.schema_versions(STREAM) == [first]
            with pytest.raises(StoreRefusedError, match="opened read-only.*put_schema_version"):
                reader._put_schema_version(STREAM, SchemaVersion(2, (), (), ORIGIN))
            with pytest.raises(LeaseStoreError):
                reader.record_schema(STREAM, [*BASE, *cols("country string")], ORIGIN)
        finally:
            reader.close_store()
        db = sqlite3.connect(settings.sqlite_path)
        db.execute("DROP TABLE schema_versions")
        db.commit()
        db.close()
    else:
        client = boto3.client(
            "dynamodb", region_name=settings.region, endpoint_url=settings.endpoint_url
        )
        client.delete_table(TableName=settings.table_name)
        client.get_waiter("table_not_exists").wait(TableName=settings.table_name)
    with pytest.raises(StoreRefusedError, match="schema_versions"):
        store.schema_versions(STREAM)
    with pytest.raises(StoreRefusedError, match="put_schema_version"):
        store._put_schema_version(STREAM, SchemaVersion(2, (), (), ORIGIN))
    with pytest.raises(LeaseStoreError):
        store.record_schema(STREAM, BASE, ORIGIN)


# -- SQLite: a file from before schema versions ----------------------------------------------------


def before_schema_versions(path: Path) -> None:
    """A store file as the release before schema versions (issue 31) left it."""
    old = re.sub(r"-- A stream's schema versions.*?WITHOUT ROWID;\n", "", schema.SCHEMA, flags=re.S)
    assert "schema_versions" not in old
    db = sqlite3.connect(path)
    db.executescript(old)
    db.close()


def test_an_old_sqlite_file_opened_read_only_reads_as_no_versions(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    before_schema_versions(path)
    settings = StoreSettings(sqlite_path=str(path))
    reader = open_existing_store(settings)
    assert reader.schema_versions(STREAM) == []
    with pytest.raises(StoreRefusedError, match="opened read-only"):
        reader.record_schema(STREAM, BASE, ORIGIN)
    reader.close_store()
    db = sqlite3.connect(path)
    tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    db.close()
    assert "schema_versions" not in tables  # a look alters nothing

    store = build_store(settings, clock=FakeClock())  # a run adds the table
    first = store.record_schema(STREAM, BASE, ORIGIN)
    assert first.version == 1 and store.schema_versions(STREAM) == [first]
    store.close_store()
