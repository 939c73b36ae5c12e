"""Work units: how a listing is cut, and how an object is known to be held by a unit (on both
store backends: the walk reads lease items by key range)."""

from __future__ import annotations

import json

import pytest

from resources.coordination.lease_store import LeaseStore
from resources.ingestion.discovery import Discovery, ListedObject
from resources.ingestion.reconciliation import ReconcileState, Reconciliation
from resources.ingestion.work_units import (
    UnitCoverage,
    UnitObject,
    WorkUnit,
    plan_units,
    unit_of,
)

STREAM = "events"


def test_units_end_at_the_object_count_the_byte_budget_and_alone_for_a_big_object() -> None:
    listed = [("a", 10), ("b", 10), ("c", 10), ("d", 500), ("e", 10), ("f", 60), ("g", 50)]
    units = plan_units(listed, max_objects=2, max_bytes=100)
    assert [[o.key for o in u.objects] for u in units] == [
        ["a", "b"],
        ["c"],  # the next one is too big to join
        ["d"],  # over max_bytes: a unit of its own
        ["e", "f"],
        ["g"],  # e+f+g = 120 > 100
    ]
    assert [u.key for u in units] == ["a", "c", "d", "e", "g"]  # a unit's key is its first's
    assert units[0].size == 20


def test_units_bound_the_bytes_of_their_key_list() -> None:
    listed = [(f"{i:04d}" + "x" * 96, 1) for i in range(10)]  # 100-byte keys
    units = plan_units(listed, max_objects=1000, max_bytes=10**9, max_key_bytes=350)
    assert [len(u.objects) for u in units] == [3, 3, 3, 1]


def test_max_objects_one_is_one_object_per_partition_keyed_by_it() -> None:
    units = plan_units([("k1", 5), ("k2", 5)], max_objects=1, max_bytes=10**9)
    assert [(u.key, len(u.objects)) for u in units] == [("k1", 1), ("k2", 1)]


@pytest.mark.contract
def test_an_item_without_a_unit_list_is_the_object_its_key_names(store: LeaseStore) -> None:
    sid = store.source_identifier(STREAM)
    unit = WorkUnit("a", (UnitObject("a", 3), UnitObject("b", 4)))
    store.create_partitions(sid, ["a", "old"], progress_states=[unit.progress_state(), None])
    assert unit_of(store.get(sid, "a")) == unit  # type: ignore[arg-type]
    assert unit_of(store.get(sid, "old")).objects == (UnitObject("old", -1),)  # type: ignore[arg-type]


@pytest.mark.contract
def test_items_between_is_a_key_range_in_key_order(store: LeaseStore) -> None:
    sid = store.source_identifier(STREAM)
    keys = ["b", "a", "é", "c/d", "c", "z"]
    store.create_partitions(sid, keys)
    store.create_partitions(store.source_identifier("other"), ["b", "c"])
    assert [i.partition_key for i in store.items_between(sid, None, "c/d")] == [
        "a",
        "b",
        "c",
        "c/d",
    ]
    assert [i.partition_key for i in store.items_between(sid, "b", "z")] == ["c", "c/d", "z"]
    assert [i.partition_key for i in store.items_between(sid, "z", "é")] == ["é"]  # UTF-8 order
    assert list(store.items_between(sid, "c", "b")) == []


def create(store: LeaseStore, units: list[list[str]]) -> None:
    sid = store.source_identifier(STREAM)
    planned = [WorkUnit(u[0], tuple(UnitObject(k, 1) for k in u)) for u in units]
    store.create_partitions(
        sid, [u.key for u in planned], progress_states=[u.progress_state() for u in planned]
    )


@pytest.mark.contract
def test_coverage_walks_pages_and_carries_units_across_them(store: LeaseStore) -> None:
    """A unit reaching past a page holds objects of the next; a unit whose first object was
    deleted still holds the rest; interleaved units (a repeated discovery tick) both count."""
    create(store, [["a1", "a2", "a3", "a4"], ["b1", "b3", "b5"], ["b2", "b4"], ["c1"]])
    sid = store.source_identifier(STREAM)
    listing = ["a2", "a3", "a4", "a5", "b1", "b2", "b3", "b4", "b5", "b6", "c1", "c2"]  # a1 gone
    walk = UnitCoverage(store, sid)
    free = []
    for start in range(0, len(listing), 2):
        free += walk.uncovered(listing[start : start + 2])
    assert free == ["a5", "b6", "c2"]


@pytest.mark.contract
def test_coverage_state_survives_between_ticks(store: LeaseStore) -> None:
    create(store, [["a", "b", "c", "d"]])
    sid = store.source_identifier(STREAM)
    first = UnitCoverage(store, sid)
    assert first.uncovered(["a", "b"]) == []
    again = UnitCoverage(store, sid, first.after, first.covering)  # a new tick, from its cursor
    assert again.uncovered(["c", "d", "e"]) == ["e"]


def lister_over(objects: dict[str, int]):  # type: ignore[no-untyped-def]
    def lister(after: str | None, limit: int) -> tuple[list[ListedObject], str | None]:
        new = [k for k in sorted(objects) if after is None or k > after][:limit]
        return [ListedObject(k, objects[k]) for k in new], (new[-1] if new else after)

    return lister


def held_by(store: LeaseStore) -> dict[str, str]:
    sid = store.source_identifier(STREAM)
    owners: dict[str, str] = {}
    for item in store.iter_items(sid):
        for obj in unit_of(item).objects:
            assert obj.key not in owners, f"{obj.key} is in two units"
            owners[obj.key] = item.partition_key
    return owners


@pytest.mark.contract
def test_discovery_cuts_units_and_a_repeated_tick_puts_no_object_in_two(
    store: LeaseStore,
) -> None:
    objects = {f"k{i:02d}": 10 for i in range(10)}
    discovery = Discovery(
        store, STREAM, lister_over(objects), owner="d", unit_max_objects=4, unit_max_bytes=1000
    )
    first = discovery.discover(None)
    assert first.source_keys == ["k00", "k04", "k08"] and first.created == 3 and first.listed == 10
    # The tick died before Dagster kept its cursor; objects landed in between meanwhile.
    objects.update({"k01a": 10, "k10": 10})
    again = discovery.discover(None)
    assert again.created == 1
    assert again.source_keys == ["k00", "k01a", "k04", "k08"]  # the units found, and the new
    owners = held_by(store)
    assert sorted(owners) == sorted(objects)
    assert owners["k01a"] == "k01a" and owners["k10"] == "k01a" and owners["k01"] == "k00"
    progress = json.loads(store.get(store.source_identifier(STREAM), "k00").progress_state)  # type: ignore[union-attr]
    assert progress["unit"] == [["k00", 10], ["k01", 10], ["k02", 10], ["k03", 10]]


@pytest.mark.contract
def test_reconciliation_cuts_late_objects_into_units_and_leaves_held_ones(
    store: LeaseStore,
) -> None:
    objects = {f"k{i:02d}": 10 for i in range(8)}
    lister = lister_over(objects)
    found = Discovery(store, STREAM, lister, owner="d", unit_max_objects=3).discover(None)
    late = {"k00a": 10, "k00b": 10, "k03a": 10, "k05a": 10}
    objects.update(late)
    reconcile = Reconciliation(
        store, STREAM, lister, interval_s=0, max_objects=3, unit_max_objects=2
    )
    created, state = [], ReconcileState()
    for _ in range(10):
        step = reconcile.step(state, found.cursor)
        created += step.created
        state = step.state
        if step.finished_pass:
            break
    assert created == ["k00a", "k03a", "k05a"]
    owners = held_by(store)
    assert sorted(owners) == sorted(objects)
    assert owners["k00b"] == "k00a"
    # A second pass finds nothing new.
    again = reconcile.step(ReconcileState(), found.cursor)
    assert again.created == []
