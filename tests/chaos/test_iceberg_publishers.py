"""Two `Publisher`s in processes of their own committing to one Iceberg table at the same moment
(issue 33's acceptance), on both store backends, the table on the SQL catalog (SQLite).

Each child's first switch plan waits until the other has planned too
(`publication_child.publish_at_once`): both planned on the same table head, so one commit
lands first and the other is refused by the catalog and must re-plan on the new head — the
race the acceptance names, made to happen every time rather than by luck.

- Different dates: both land, each its own snapshot; each date's table seq is the ledger's and
  the table serves exactly the records committed on it.
- The same date (a publisher SIGKILLed after recording its publication, so the ledger is ahead
  of the table, and two publishers repairing it at once): it lands once, one snapshot for it;
  the other finds nothing left to switch.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.publication.outcome import CATALOG_REPAIRED, PUBLISHED
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from tests.chaos.test_publication_race import Account, World, commit, upto
from tests.support.child_processes import child_processes, spawn_child
from tests.support.merge_child import TABLE, Lake, read_lines
from tests.support.target_lake import TargetSpec

pytestmark = pytest.mark.slow

D1, D2 = "2099-01-01", "2099-01-02"
MEET_S = 60.0
"""How long a child's first plan waits for the other's (both start at once: seconds)."""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


@pytest.fixture
def world(
    backend: str, settings_for: Callable[..., StoreSettings], tmp_path: Path
) -> Iterator[tuple[World, TargetSpec]]:
    lake = Lake(settings=settings_for(backend).__dict__, root=str(tmp_path), max_objects=5,
                max_bytes=9000)  # fmt: skip
    settings = CatalogSettings(iceberg_catalog_path=str(tmp_path / "iceberg" / "catalog.db"))
    spec = TargetSpec(settings, ICEBERG, f"file://{lake.table_dir}")
    store = lake.store()  # created here, before any child opens it
    yield World(lake, {}, store), spec
    store.close_store()


def catalog(spec: TargetSpec) -> dict[str, Any]:
    return {"kind": "iceberg", "spec": spec.as_json()}


def at_once(
    children: list[subprocess.Popen[bytes]],
    world: World,
    spec: TargetSpec,
    tmp_path: Path,
    dts: list[list[str] | None],
) -> list[dict[str, Any]]:
    """Two publishers (of `dts[0]` and `dts[1]`; None: what is due), started together, their
    first plans met; what each wrote."""
    names = ["a", "b"]
    go = tmp_path / "go"
    procs = []
    for name, mine in zip(names, dts, strict=True):
        payload = {
            "role": "publish_at_once", "lake": world.lake.__dict__, "catalog": catalog(spec),
            "dts": mine, "go": str(go), "meet_s": MEET_S,
            "planned": str(tmp_path / f"{name}.planned"),
            "peers": [str(tmp_path / f"{n}.planned") for n in names if n != name],
            "out": str(tmp_path / f"{name}.json"),
        }  # fmt: skip
        procs.append(spawn_child(children, "publication_child", payload))
    go.write_text("go")
    assert [p.wait(120) for p in procs] == [0, 0]
    return [json.loads((tmp_path / f"{n}.json").read_text()) for n in names]


def opened(spec: TargetSpec) -> IcebergTarget:
    target = spec.open()
    assert isinstance(target, IcebergTarget)
    return target


def ledger_seqs(store: CoordinationStore) -> dict[str, int]:
    return {tp.dt: tp.publication_seq for tp in store.table_partitions(TABLE)}


def served(target: IcebergTarget, dt: str | None, snapshot_id: int | None = None) -> list[str]:
    """The record ids the table serves (of `dt`; at `snapshot_id`, default the current one)."""
    read = target.read(TABLE, dt, snapshot_id, columns=["event_id"])
    return sorted(read.column(0).to_pylist())


def committed(world: World, seed: int, counts: dict[str, int]) -> Account:
    """`counts[dt]` source objects committed on each date, one by one; their record ids."""
    rng, account = random.Random(seed), {}
    for dt, count in counts.items():
        commit(world, dt, count, rng, account)
    return account


def raced(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Both met after their first plan (on the same head), and exactly one planned again: the
    catalog refused the second commit and it re-planned on the first one's snapshot."""
    return a["plans"][0] and b["plans"][0] and sorted(len(x["plans"]) for x in (a, b)) == [1, 2]


def test_two_publishers_of_different_dates_at_once_both_land(
    world: tuple[World, TargetSpec], tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    w, spec = world
    account = committed(w, 1, {D1: 3, D2: 4})
    a, b = at_once(children, w, spec, tmp_path, [[D1], [D2]])

    assert [(o["dt"], o["outcome"]) for o in a["outcomes"] + b["outcomes"]] == [
        (D1, PUBLISHED),
        (D2, PUBLISHED),
    ]
    assert raced(a, b), (a, b)  # one committed first, the other re-planned and landed
    target = opened(spec)
    ledger = ledger_seqs(w.store)
    assert {p.dt: p.seq for p in target.partitions(TABLE)} == ledger == {D1: 1, D2: 1}
    snapshots = target.snapshots(TABLE)
    assert sorted(tuple(s.seqs.items()) for s in snapshots) == [((D1, 1),), ((D2, 1),)]
    # The later snapshot kept the earlier one's date: the table serves both.
    assert snapshots[-1].snapshot_id == target.load(TABLE).metadata.current_snapshot_id
    for dt in (D1, D2):
        assert served(target, dt) == upto(account, dt)
    (only,) = snapshots[0].seqs  # the first snapshot: its date only
    assert served(target, None, snapshots[0].snapshot_id) == upto(account, only)


def test_the_same_date_switched_by_two_publishers_at_once_lands_once(
    world: tuple[World, TargetSpec], tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    w, spec = world
    account = committed(w, 2, {D1: 3})
    # A publisher killed after recording D1's publication: the ledger is ahead of the table.
    killed = spawn_child(children, "publication_child", {
        "role": "publish", "lake": w.lake.__dict__, "catalog": catalog(spec),
        "step": "recorded", "nth": 1, "marker": str(tmp_path / "killed.json"),
        "out": str(tmp_path / "killed-out.json"),
    })  # fmt: skip
    assert killed.wait(120) == -9
    assert read_lines(tmp_path / "killed.json") == [{"step": "recorded", "dt": D1}]
    assert ledger_seqs(w.store) == {D1: 1}

    a, b = at_once(children, w, spec, tmp_path, [None, None])

    # Both found D1 lagging and switched it: one commit landed, the other re-planned on its
    # head and found the date already at the ledger's seq.
    assert [(o["dt"], o["outcome"]) for o in a["outcomes"] + b["outcomes"]] == [
        (D1, CATALOG_REPAIRED)
    ] * 2
    assert raced(a, b), (a, b)
    target = opened(spec)
    assert [s.seqs for s in target.snapshots(TABLE)] == [{D1: 1}]
    assert {p.dt: p.seq for p in target.partitions(TABLE)} == ledger_seqs(w.store) == {D1: 1}
    assert served(target, D1) == upto(account, D1)
