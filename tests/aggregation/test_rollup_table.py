"""A rollup's table, read as an engine reads it (catalog -> symlink manifest -> Parquet): each
publication is a new version holding the state; the catalog never moves back to an older
state; a version goes only once its successor has been current for the safety delay."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from resources.aggregation.rollup_table import RollupTable, rollup_columns
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
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
