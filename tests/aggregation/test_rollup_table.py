"""A rollup's table, read as an engine reads it (catalog -> symlink manifest -> Parquet): each
publication is a new version holding the state; the catalog never moves back to an older
state; a version goes only once its successor has been current for the safety delay. On an
Iceberg table, each publication is a snapshot, older snapshots read the older states, and a
version a retained snapshot references stays until the snapshot expires."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from resources.aggregation.rollup_table import RollupTable, rollup_columns
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.local import LocalCatalog
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.coordination.items import ItemType
from resources.objects.local import LocalObjectStore
from resources.publication.reader import read_partition
from resources.rollup.cursor import rollup_id
from resources.rollup.spec import parse_rollups
from resources.stores.base import CoordinationStore
from resources.streams import ColumnSpec, StreamConfig
from tests.support.fakes import FakeClock

DT = "2026-01-01"
DELAY_S = 3600.0
CONFIG = StreamConfig(
    name="events",
    source="file:///nowhere",
    format="jsonl",
    columns=(
        ColumnSpec("user_id", "string"),
        ColumnSpec("amount", "long"),
        ColumnSpec("price", "double"),
        ColumnSpec("at", "timestamp"),
    ),
    event_time="at",
    table="file:///lake/events",
    quarantine="file:///nowhere/q",
)
SPEC = parse_rollups(
    {
        "per_user": {
            "group_by": ["user_id"],
            "aggregates": {"n": "count", "total": "sum(amount)", "cheapest": "min(price)"},
        }
    },
    {c.name: c.type for c in CONFIG.columns},
)[0]
ROLLUP = rollup_id("events", SPEC)


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def clock() -> FakeClock:
    """Starts at the real now: versions' ages are their files' real mtimes against it."""
    return FakeClock(start=time.time())


@pytest.fixture
def table(store: CoordinationStore, tmp_path: Path, clock: FakeClock) -> RollupTable:
    return RollupTable(
        CONFIG,
        SPEC,
        store,
        HiveManifestsTarget(LocalCatalog(tmp_path / "catalog.json")),
        LocalObjectStore(tmp_path / "events_per_user"),
        safety_delay_s=DELAY_S,
        clock_ms=lambda: int(clock.now * 1000),
    )


def commit(store: CoordinationStore, txid: int, partials: dict) -> None:
    sid = store.source_identifier(ROLLUP, ItemType.ROLLUP_JOB)
    store.create_partitions(sid, [DT])
    job = store.acquire(sid, DT, "writer", 60)
    store.write_rollup_batch(job.token, ROLLUP, DT, SPEC.mode, SPEC.aggregates, txid, partials)
    store.give_up(job.token)


def rows(table: RollupTable) -> list[dict]:
    return read_partition(table.target, table.name, DT).to_pylist()


def test_the_table_serves_the_state_and_never_moves_back(
    store: CoordinationStore, table: RollupTable
) -> None:
    assert [(c.name, c.type) for c in rollup_columns(CONFIG, SPEC)] == [
        ("user_id", "string"),
        ("n", "long"),
        ("total", "long"),
        ("cheapest", "double"),
    ]
    commit(store, 3, {'["a"]': (2, 10, 1.5), '["b"]': (1, 4, None)})
    assert table.publish(DT, 3)
    assert rows(table) == [
        {"user_id": "a", "n": 2, "total": 10, "cheapest": 1.5},
        {"user_id": "b", "n": 1, "total": 4, "cheapest": None},
    ]
    commit(store, 7, {'["a"]': (1, 1, 0.5)})
    assert table.publish(DT, 7)
    assert rows(table)[0] == {"user_id": "a", "n": 3, "total": 11, "cheapest": 0.5}
    # A writer holding an older state (a zombie) cannot move readers back.
    assert not table.publish(DT, 3)
    assert table.published_upto(DT) == 7
    assert rows(table)[0]["n"] == 3


def test_a_version_goes_once_its_successor_was_current_for_the_safety_delay(
    store: CoordinationStore, table: RollupTable, clock: FakeClock
) -> None:
    commit(store, 1, {'["a"]': (1, 1, 1.0)})
    table.publish(DT, 1)
    first = {o.key for o in table.objects.list_prefix("")}
    commit(store, 2, {'["a"]': (1, 1, 1.0)})
    table.publish(DT, 2)
    assert first <= {o.key for o in table.objects.list_prefix("")}  # a reader may hold it
    for path in Path(table.objects.root_url[len("file://") :]).rglob("*"):
        os.utime(path, (time.time() - 2 * DELAY_S,) * 2)  # both versions became old
    commit(store, 3, {'["a"]': (1, 1, 1.0)})
    table.publish(DT, 3)
    left = {o.key for o in table.objects.list_prefix("")}
    assert not first & left
    assert len({k.split("/")[1] for k in left}) == 2  # the current version and its predecessor
    assert rows(table)[0]["n"] == 3


def iceberg_table(
    store: CoordinationStore, tmp_path: Path, clock: FakeClock, max_snapshots: int
) -> RollupTable:
    """The rollup table on an Iceberg SQL catalog (SQLite) under `tmp_path`."""
    settings = CatalogSettings(
        iceberg_catalog_path=str(tmp_path / "iceberg" / "catalog.db"),
        iceberg_max_snapshots=max_snapshots,
    )
    return RollupTable(
        CONFIG,
        SPEC,
        store,
        target_for(settings, ICEBERG),
        LocalObjectStore(tmp_path / "events_per_user"),
        safety_delay_s=DELAY_S,
        clock_ms=lambda: int(clock.now * 1000),
    )


def age_files(table: RollupTable) -> None:
    """Every version written so far becomes older than the safety delay."""
    for path in Path(table.objects.root_url[len("file://") :]).rglob("*"):
        os.utime(path, (time.time() - 2 * DELAY_S,) * 2)


def test_on_iceberg_each_publication_is_a_snapshot_and_a_retained_one_keeps_its_version(
    store: CoordinationStore, tmp_path: Path, clock: FakeClock
) -> None:
    table = iceberg_table(store, tmp_path, clock, max_snapshots=3)
    target = table.target
    assert isinstance(target, IcebergTarget)  # the 4th publication's commit expires the 1st
    commit(store, 3, {'["a"]': (2, 10, 1.5), '["b"]': (1, 4, None)})
    assert table.publish(DT, 3)
    commit(store, 7, {'["a"]': (1, 1, 0.5)})
    assert table.publish(DT, 7)

    old, new = target.snapshots(table.name)
    assert (old.seqs, new.seqs) == ({DT: 3}, {DT: 7})
    assert new.summary["leasehold.rollup_state"] == f"{DT}:7"

    def state(snapshot_id: int | None = None) -> list[dict]:
        read = target.read(table.name, DT, snapshot_id, ["user_id", "n", "total", "cheapest"])
        return read.sort_by("user_id").to_pylist()

    before = [
        {"user_id": "a", "n": 2, "total": 10, "cheapest": 1.5},
        {"user_id": "b", "n": 1, "total": 4, "cheapest": None},
    ]
    after = [
        {"user_id": "a", "n": 3, "total": 11, "cheapest": 0.5},
        {"user_id": "b", "n": 1, "total": 4, "cheapest": None},
    ]
    assert state() == after == state(new.snapshot_id)
    assert state(old.snapshot_id) == before

    def versions() -> list[str]:
        return sorted({o.key.split("/")[1] for o in table.objects.list_prefix(f"dt={DT}/")})

    # Both versions are past the safety delay once their successor is; the 3rd publication's
    # commit keeps all three snapshots, so the first version, which the oldest one serves,
    # stays: time travel to it still reads it.
    age_files(table)
    commit(store, 9, {'["b"]': (1, 1, 2.0)})
    assert table.publish(DT, 9)
    assert len(target.snapshots(table.name)) == 3
    assert len(versions()) == 3
    assert state(old.snapshot_id) == before

    # The 4th publication's commit expires the oldest snapshot: only then does its version go;
    # the 2nd version, past its delay too but served by a retained snapshot, stays.
    age_files(table)
    commit(store, 12, {'["c"]': (1, 1, 3.0)})
    assert table.publish(DT, 12)
    retained = target.snapshots(table.name)
    assert [s.seqs for s in retained] == [{DT: 7}, {DT: 9}, {DT: 12}]
    assert [v[:20] for v in versions()] == [f"v{n:019d}" for n in (7, 9, 12)]
    assert state(new.snapshot_id) == after
    assert [r["user_id"] for r in state()] == ["a", "b", "c"]
