"""Re-driving a dead letter (`LeaseStore.redrive`), on every backend: the contract `leasehold
redrive` relies on. Parametrized over `[sqlite]` and `[dynamodb]` like the lease store's suite
(DynamoDB on the loopback server), time moved by a `FakeClock`.
"""

from __future__ import annotations

import json

import pytest

from resources.coordination import metrics as m
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.errors import PartitionNotFoundError, PartitionUnavailableError
from resources.coordination.items import LeaseItem, PartitionStatus
from resources.coordination.lease_store import LeaseStore
from tests.support.fakes import FakeClock, StoreFactory

pytestmark = pytest.mark.contract

T = 60.0
MAX_CLOSES = 2


def sid(store: LeaseStore) -> str:
    return store.source_identifier("events")


def dead_letter(store: LeaseStore, key: str, progress: dict | None = None) -> LeaseItem:
    """Close `key` past the maximum, as a unit whose object never reads does."""
    s = sid(store)
    store.create_partitions(s, [key], progress_state=json.dumps(progress or {}))
    backoff = ReopenBackoff.fixed(0)
    while True:
        item = store.acquire(s, key, "w", T)
        closed = store.close(item.token, backoff, MAX_CLOSES, reason=f"{key}: 403 Forbidden")
        if closed.dead_letter_reason is not None:
            return closed


def test_redrive_puts_a_dead_letter_back_due_now_keeping_its_progress(
    store: LeaseStore, clock: FakeClock
) -> None:
    s = sid(store)
    progress = {"unit": [["a", 1], ["b", 1]], "done": ["a"], "failed": "1 object(s) unreadable"}
    dead = dead_letter(store, "a", progress)
    assert dead.closed_count == MAX_CLOSES + 1
    clock.advance(5)
    item = store.redrive(s, "a")
    assert item.status is PartitionStatus.CLOSED
    assert (item.closed_count, item.reopen_at_ms) == (0, store.now_ms())
    assert item.dead_letter_reason is None and item.owner is None
    assert item.epoch == dead.epoch and item.version == dead.version + 1
    assert item.progress == progress  # committed objects stay committed
    assert item.expiration_time is not None and item.expiration_time > dead.expiration_time
    assert store.get(s, "a") == item
    # Due for a retry run at once, and counted as pending work again (closing waits for it).
    assert [i.partition_key for i in store.due_for_retry(s, 10)] == ["a"]
    assert [i.partition_key for i in store.pending_partitions(s, 10)] == ["a"]
    assert store.metrics.pending()[s][m.PARTITIONS_REDRIVEN] == 1
    # The next acquisition fences every earlier owner, and the unit gets its full tries again.
    taken = store.acquire(s, "a", "w2", T)
    assert taken.epoch == dead.epoch + 1 and taken.progress == progress
    for closes in range(1, MAX_CLOSES + 1):
        closed = store.close(taken.token, ReopenBackoff.fixed(0), MAX_CLOSES, reason="again")
        assert (closed.status, closed.closed_count) == (PartitionStatus.CLOSED, closes)
        taken = store.acquire(s, "a", "w2", T)
    again = store.close(taken.token, ReopenBackoff.fixed(0), MAX_CLOSES, reason="still 403")
    assert again.dead_letter_reason == "still 403"


def test_redrive_then_complete(store: LeaseStore) -> None:
    s = sid(store)
    dead_letter(store, "a")
    store.redrive(s, "a")
    done = store.complete(store.acquire(s, "a", "w", T).token)
    assert (done.status, done.dead_letter_reason) == (PartitionStatus.COMPLETED, None)
    assert store.dead_letters(s) == []
    summary = next(x for x in store.status() if x.source_identifier == s)
    assert summary.counts["DEAD_LETTERED"] == 0 and summary.counts["COMPLETED"] == 1


def test_redrive_refuses_everything_but_a_dead_letter(store: LeaseStore) -> None:
    """Conditional: a completed unit's records are in the table (taking it back would ingest
    them twice), and a unit that is pending is being retried already."""
    s = sid(store)
    store.create_partitions(s, ["unassigned", "held", "closed", "completed"])
    store.acquire(s, "held", "w", T)
    store.close(store.acquire(s, "closed", "w", T).token, ReopenBackoff.fixed(60), MAX_CLOSES)
    store.complete(store.acquire(s, "completed", "w", T).token)
    for key, status in [
        ("unassigned", PartitionStatus.UNASSIGNED),
        ("held", PartitionStatus.ASSIGNED),
        ("closed", PartitionStatus.CLOSED),
        ("completed", PartitionStatus.COMPLETED),
    ]:
        before = store.get(s, key)
        with pytest.raises(PartitionUnavailableError) as refused:
            store.redrive(s, key)
        assert refused.value.current.status is status
        assert store.get(s, key) == before  # untouched
    with pytest.raises(PartitionNotFoundError):
        store.redrive(s, "nope")
    with pytest.raises(PartitionNotFoundError):  # another stream's key is another item
        store.redrive(store.source_identifier("other"), "completed")


def test_redrive_twice_or_from_two_nodes_applies_once(
    make_store: StoreFactory, settings_for, backend
) -> None:
    settings = settings_for(backend)
    first, second = make_store(settings), make_store(settings)
    s = sid(first)
    dead_letter(first, "a")
    redriven = first.redrive(s, "a")
    with pytest.raises(PartitionUnavailableError) as refused:
        second.redrive(s, "a")
    assert refused.value.current == redriven
    taken = second.acquire(s, "a", "w2", T)
    with pytest.raises(PartitionUnavailableError):  # a run holds it: never reset under it
        first.redrive(s, "a")
    assert first.get(s, "a") == taken


def test_dead_letters_lists_only_dead_letters_of_one_stream_in_key_order(
    store: LeaseStore,
) -> None:
    s = sid(store)
    assert store.dead_letters(s) == []
    for key in ("c", "a"):
        dead_letter(store, key)
    store.create_partitions(s, ["b", "d"])
    store.complete(store.acquire(s, "b", "w", T).token)
    other = store.source_identifier("other")
    store.create_partitions(other, ["z"])
    store.close(store.acquire(other, "z", "w", T).token, ReopenBackoff.fixed(0), 0, reason="x")
    found = store.dead_letters(s)
    assert [(i.partition_key, i.dead_letter_reason) for i in found] == [
        ("a", "a: 403 Forbidden"),
        ("c", "c: 403 Forbidden"),
    ]
    assert [i.partition_key for i in store.dead_letters(other)] == ["z"]
