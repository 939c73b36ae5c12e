"""Batches cut from a table partition's committed ids, and their results committed strictly in
txid order whatever order Spark finishes them in and whichever commits fail."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.rollup.batches import Batch, StrictOrder, plan_batches


def test_batches_cover_the_ids_above_the_states_txid_in_order() -> None:
    assert plan_batches("d", range(1, 11), after=3, max_objects=3) == [
        Batch("d", 3, 6),
        Batch("d", 6, 9),
        Batch("d", 9, 10),
    ]
    # ids need not be dense: each batch still ends on a committed id
    assert plan_batches("d", [2, 5, 7, 11, 12], after=2, max_objects=2) == [
        Batch("d", 2, 7),
        Batch("d", 7, 12),
    ]
    assert plan_batches("d", [1, 2], after=2, max_objects=5) == []
    with pytest.raises(ValueError):
        plan_batches("d", [1], after=0, max_objects=0)


def test_the_batches_must_be_one_chain() -> None:
    with pytest.raises(ValueError, match="contiguous"):
        StrictOrder([Batch("d", 0, 2), Batch("d", 3, 4)])


@settings(max_examples=200, deadline=None)
@given(
    count=st.integers(1, 8),
    seed=st.integers(0, 2**32 - 1),
    failure_rate=st.sampled_from([0.0, 0.2, 0.5]),
)
def test_results_commit_in_txid_order_once_each_never_from_an_abandoned_computation(
    count: int, seed: int, failure_rate: float
) -> None:
    rng = random.Random(seed)
    batches = plan_batches("d", range(1, count * 3 + 1), after=0, max_objects=3)
    order: StrictOrder[tuple[Batch, int]] = StrictOrder(batches)
    to_start = list(batches)
    in_flight: list[tuple[Batch, int]] = []  # (batch, generation it started under)
    abandoned_at: dict[Batch, int] = {}  # batch -> generation of its last failed commit
    committed: list[int] = []
    for _ in range(10_000):
        if order.done:
            break
        if to_start and (not in_flight or rng.random() < 0.5):
            in_flight.append((to_start.pop(0), order.generation))
            continue
        batch, generation = in_flight.pop(rng.randrange(len(in_flight)))
        ready_now = order.computed(batch, (batch, generation), generation)
        for ready, (computed_batch, started) in ready_now:
            assert ready == computed_batch
            assert started >= abandoned_at.get(ready, 0), "a result of an abandoned computation"
            if rng.random() < failure_rate:
                again = order.failed(ready)
                assert again == [b for b in batches if b >= ready]
                for b in again:
                    abandoned_at[b] = order.generation
                to_start = sorted(set(to_start) | set(again))
                break
            committed.append(ready.txid)
    assert order.done
    assert committed == [b.txid for b in batches]
