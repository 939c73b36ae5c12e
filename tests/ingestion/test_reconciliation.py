"""Reconciliation listing finds objects behind the discovery cursor, on both backends."""

from __future__ import annotations

import pytest

from resources.ingestion.discovery import ListedObject
from resources.ingestion.reconciliation import ReconcileState, Reconciliation
from tests.support.fakes import FakeClock, StoreFactory

STREAM = "events"


class SortedSource:
    """A source listed in key order after a cursor, like S3 and the local object store."""

    def __init__(self, keys: list[str]) -> None:
        self.keys = sorted(keys)
        self.calls = 0

    def __call__(self, after: str | None, limit: int) -> tuple[list[ListedObject], str | None]:
        self.calls += 1
        page = [k for k in self.keys if after is None or k > after][:limit]
        return [ListedObject(k, 100) for k in page], page[-1] if page else after


@pytest.mark.contract
def test_a_pass_finds_late_objects_in_bounded_resumable_steps(
    make_store: StoreFactory, clock: FakeClock
) -> None:
    store = make_store()
    sid = store.source_identifier(STREAM)
    known = [f"2026/01/01/part-{i:03d}" for i in range(10)]
    store.create_partitions(sid, known)
    late = ["2026/01/01/part-003a", "2026/01/01/part-007a"]
    after_cursor = "2026/01/02/part-000"  # discovery's business, not reconciliation's
    source = SortedSource([*known, *late, after_cursor])
    reconcile = Reconciliation(store, STREAM, source, interval_s=600, max_objects=5)

    state, created, steps = ReconcileState(), [], 0
    while True:
        step = reconcile.step(state, discovery_cursor=known[-1])
        created += step.created
        state, steps = step.state, steps + 1
        if step.finished_pass:
            break
    assert created == late and steps == 3  # 12 keys before the cursor, 5 per step
    assert store.missing_keys(sid, [*known, *late]) == []
    assert store.get(sid, after_cursor) is None

    # The next pass waits for its interval, then finds nothing new.
    calls = source.calls
    assert reconcile.step(state, known[-1]).created == [] and source.calls == calls
    clock.advance(601)
    step = reconcile.step(state, known[-1])
    assert step.state.in_pass and source.calls == calls + 1 and step.created == []

    # A shorter interval configured later counts from the end of the last pass, at once.
    hurry = Reconciliation(store, STREAM, source, interval_s=0, max_objects=5)
    assert hurry.step(state, known[-1]).state.in_pass


@pytest.mark.contract
def test_before_anything_is_discovered_a_pass_lists_nothing(make_store: StoreFactory) -> None:
    store = make_store()
    source = SortedSource(["a", "b"])
    step = Reconciliation(store, STREAM, source, interval_s=60, max_objects=10).step(
        ReconcileState(), discovery_cursor=None
    )
    assert step.finished_pass and step.created == [] and source.calls == 0


def test_state_round_trips_through_json() -> None:
    state = ReconcileState("2026/01/01/x", 123, True)
    assert ReconcileState.from_json(state.to_json()) == state
    assert ReconcileState.from_json(None) == ReconcileState()


@pytest.mark.contract
def test_keys_not_ordered_the_whole_source_pass_is_the_discovery(
    make_store: StoreFactory, clock: FakeClock
) -> None:
    """`discovery.ordered_keys: false`: no cursor; each pass lists everything, a bounded page
    per tick, and when it ends every object that landed before it started has a unit."""
    from resources.coordination.supplier import caught_up_ms, record_caught_up

    store = make_store()
    sid = store.source_identifier(STREAM)
    first = [f"{h}/part.jsonl" for h in ("e3", "07", "c1", "5a", "9f", "22", "b8")]
    source = SortedSource(first)
    reconcile = Reconciliation(
        store, STREAM, source, interval_s=600, max_objects=3, unit_max_objects=2, whole_source=True
    )

    def full_pass(state: ReconcileState) -> tuple[ReconcileState, list[str]]:
        created: list[str] = []
        while True:
            step = reconcile.step(state, discovery_cursor=None)
            created, state = created + step.created, step.state
            if step.finished_pass:
                return state, created

    started = store.now_ms()
    state, created = full_pass(ReconcileState())
    assert len(created) == 5 and state.started_ms == started  # pages of 3, units of <= 2
    assert store.missing_keys(sid, created) == []
    assert record_caught_up(store, STREAM, "node", 60, state.started_ms)
    assert caught_up_ms(store, STREAM) == started

    source.keys = sorted([*first, "00/new.jsonl", "d0/new.jsonl"])  # before and after all
    clock.advance(601)
    state, created = full_pass(state)
    assert created == ["00/new.jsonl", "d0/new.jsonl"]
    assert state.started_ms == started + 601_000
