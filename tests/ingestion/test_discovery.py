"""Discovery: O(new) per tick, under the supplier lease, with bounded run planning."""

from __future__ import annotations

import pytest

from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.coordination.supplier import caught_up_ms
from resources.ingestion.discovery import Discovery, ListedObject
from resources.ingestion.run_planner import plan_runs
from tests.support.fakes import FakeClock, StoreFactory


class CountingStore:
    """Counts calls into the real store: the test's view of 'store work'."""

    def __init__(self, store: LeaseStore) -> None:
        self._store = store
        self.calls: list[str] = []

    def __getattr__(self, name: str):
        attr = getattr(self._store, name)
        if callable(attr) and name in {
            "get",
            "acquire",
            "create_partitions",
            "renew",
            "give_up",
            "iter_items",
            "due_for_retry",
        }:

            def counted(*args, **kwargs):
                self.calls.append(name)
                return attr(*args, **kwargs)

            return counted
        return attr

    # the base-class helpers call these through `self`, so route them through the counter
    def acquire_global_state(self, *a, **k):
        return LeaseStore.acquire_global_state(self, *a, **k)  # type: ignore[arg-type]

    def update_global_state(self, *a, **k):
        return LeaseStore.update_global_state(self, *a, **k)  # type: ignore[arg-type]

    def release_global_state(self, *a, **k):
        return LeaseStore.release_global_state(self, *a, **k)  # type: ignore[arg-type]


def lister_over(keys: list[str]):
    listed: list[int] = []

    def lister(after: str | None, limit: int) -> tuple[list[ListedObject], str | None]:
        new = [k for k in sorted(keys) if after is None or k > after][:limit]
        listed.append(len(new))
        return [ListedObject(k, 100) for k in new], (new[-1] if new else after)

    return lister, listed


def test_discovery_creates_new_items_and_advances_the_cursor(store: LeaseStore) -> None:
    keys = [f"2026/01/{d:02d}/obj-{i:04d}.json" for d in (1, 2) for i in range(150)]
    lister, _ = lister_over(keys)
    d = Discovery(store, "events", lister, owner="node-a", max_objects_per_tick=200)
    first = d.discover(None)
    assert first.created == 200 and first.source_keys == sorted(keys)[:200]
    second = d.discover(first.cursor)
    assert second.created == 100 and second.cursor == sorted(keys)[-1]
    assert store.read_global_state("events", "discovery")["cursor"] == second.cursor
    items = list(store.iter_items(store.source_identifier("events")))
    assert len(items) == 300 and {i.status for i in items} == {PartitionStatus.UNASSIGNED}


def test_caught_up_is_when_a_tick_that_reached_the_end_of_the_listing_started(
    store: LeaseStore, clock: FakeClock
) -> None:
    """A tick whose listing was cut at its limit has not caught up; one that got fewer keys
    has, as of when it started listing (the clock is read before the lister runs)."""
    keys = [f"k{i:03d}" for i in range(5)]
    inner, _ = lister_over(keys)

    def slow_lister(after: str | None, limit: int) -> tuple[list[str], str | None]:
        clock.advance(7)  # the listing takes time: caught up as of its start
        return inner(after, limit)

    d = Discovery(store, "events", slow_lister, owner="node-a", max_objects_per_tick=3)
    first = d.discover(None)
    assert len(first.source_keys) == 3 and caught_up_ms(store, "events") is None
    started = store.now_ms()
    second = d.discover(first.cursor)  # 2 keys < 3: the end
    assert len(second.source_keys) == 2 and caught_up_ms(store, "events") == started
    clock.advance(60)
    started = store.now_ms()
    idle = d.discover(second.cursor)  # nothing new: caught up again, later
    assert idle.source_keys == [] and caught_up_ms(store, "events") == started
    assert store.read_global_state("events", "discovery")["cursor"] == second.cursor


def test_a_relisted_range_is_not_recreated(store: LeaseStore) -> None:
    lister, _ = lister_over(["a", "b", "c"])
    d = Discovery(store, "events", lister, owner="node-a")
    assert d.discover(None).created == 3
    again = d.discover(None)  # the daemon lost the last tick's cursor
    assert again.source_keys == ["a", "b", "c"] and again.created == 0


def test_nothing_new_costs_constant_store_work(make_store: StoreFactory) -> None:
    counting = CountingStore(make_store())
    keys = [f"k{i:05d}" for i in range(500)]
    lister, _ = lister_over(keys)
    d = Discovery(counting, "events", lister, owner="node-a")  # type: ignore[arg-type]
    cursor = d.discover(None).cursor
    per_tick = []
    # The calls do not grow with what was discovered before. (moto copies the whole table on
    # every transaction, so the DynamoDB run stays small; SQLite shows the same at scale.)
    for extra in (0, 300 if counting.backend == "dynamodb" else 5000):
        keys.extend(f"z{i:05d}" for i in range(extra))
        cursor = d.discover(cursor).cursor
        counting.calls.clear()
        result = d.discover(cursor)
        assert result.source_keys == [] and result.created == 0
        per_tick.append(list(counting.calls))
    assert per_tick[0] == per_tick[1]
    assert len(per_tick[0]) <= 3 and "create_partitions" not in per_tick[0]


def test_only_one_node_supplies_at_a_time(make_store: StoreFactory, settings_for, backend) -> None:
    settings = settings_for(backend)
    a, b = make_store(settings), make_store(settings)
    held = a.acquire_global_state("events", "discovery", "node-a", 60)
    lister, listed = lister_over(["x"])
    result = Discovery(b, "events", lister, owner="node-b").discover(None)
    assert result.skipped_reason and listed == []  # b did not even list
    a.release_global_state(held.token)
    assert Discovery(b, "events", lister, owner="node-b").discover(None).created == 1


def test_plan_runs_bounds_partitions_per_run() -> None:
    keys = [f"p{i}" for i in range(2001)]
    plans = plan_runs("events", keys, 1000)
    assert [(p.first, p.last, p.count) for p in plans] == [
        ("p0", "p999", 1000),
        ("p1000", "p1999", 1000),
        ("p2000", "p2000", 1),
    ]
    assert len({p.run_key for p in plans}) == 3
    with pytest.raises(ValueError):
        plan_runs("events", keys, 0)
