"""The contract every lease store backend passes, parametrized over `[sqlite]` and `[dynamodb]`.

DynamoDB runs against a DynamoDB-compatible server on 127.0.0.1 over HTTP (`aws_server`).
Time is a `FakeClock` shared by the store and the test, so expiry needs no sleeping.
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import pytest

from resources.coordination import metrics as m
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.errors import (
    PartitionNotFoundError,
    PartitionNotOwnedError,
    PartitionUnavailableError,
)
from resources.coordination.items import PartitionStatus, iso_utc
from resources.coordination.lease_store import LeaseStore
from resources.coordination.status import CLOSED_SHOWN, status_json, status_text
from tests.support.fakes import FakeClock, StoreFactory
from tests.support.ttl_sweep import sweep_expired

pytestmark = pytest.mark.contract

T = 60.0  # ownership timeout used throughout


def sid(store: LeaseStore) -> str:
    return store.source_identifier("events")


def test_source_identifier_format(make_store: StoreFactory) -> None:
    assert make_store().source_identifier("events") == "events|partition"
    prefixed = make_store(partition_prefix="blue")
    assert prefixed.source_identifier("events") == "blue|events|partition"


def test_create_is_idempotent_and_batched(store: LeaseStore) -> None:
    keys = [f"bucket|k{i:04d}" for i in range(250)]  # more than one DynamoDB batch
    assert store.create_partitions(sid(store), keys) == 250
    assert store.create_partitions(sid(store), keys[:10] + ["bucket|new"]) == 1
    items = list(store.iter_items(sid(store)))
    assert len(items) == 251
    assert {i.status for i in items} == {PartitionStatus.UNASSIGNED}
    assert all(i.epoch == 0 and i.owner is None and i.closed_count == 0 for i in items)


def test_missing_keys_in_input_order_across_batches(store: LeaseStore) -> None:
    s = sid(store)
    keys = [f"src/{i:04d}.jsonl" for i in range(1100)]  # several batches of either backend
    present = keys[::3]
    store.create_partitions(s, present)
    done = store.acquire(s, present[0], "w1", T)
    store.complete(done.token)  # any status counts as leased
    asked = [*reversed(keys), keys[1], "odd | key, [with] spaces/ü"]  # a repeat, an odd key
    present_set = set(present)
    assert store.missing_keys(s, asked) == [
        k for k in [*reversed(keys), "odd | key, [with] spaces/ü"] if k not in present_set
    ]
    assert store.missing_keys(s, present) == []
    assert store.missing_keys(s, []) == []
    # Items of another source identifier do not count.
    assert store.missing_keys(store.source_identifier("other"), present[:3]) == present[:3]


def test_missing_keys_sees_items_just_created(
    make_store: StoreFactory, settings_for, backend
) -> None:
    """Another node's creation is seen at once (DynamoDB: strongly consistent reads)."""
    settings = settings_for(backend)
    first, second = make_store(settings), make_store(settings)
    s = sid(first)
    assert second.missing_keys(s, ["a", "b"]) == ["a", "b"]
    first.create_partitions(s, ["b"])
    assert second.missing_keys(s, ["a", "b"]) == ["a"]


def test_create_keeps_existing_state(store: LeaseStore) -> None:
    store.create_partitions(sid(store), ["a"])
    lease = store.acquire(sid(store), "a", "w1", T)
    store.complete(lease.token)
    assert store.create_partitions(sid(store), ["a"]) == 0
    assert store.get(sid(store), "a").status is PartitionStatus.COMPLETED


def test_acquire_named(store: LeaseStore, clock: FakeClock) -> None:
    store.create_partitions(sid(store), ["a"], progress_state='{"offset": 0}')
    item = store.acquire(sid(store), "a", "w1", T)
    assert item.status is PartitionStatus.ASSIGNED
    assert item.owner == "w1" and item.epoch == 1
    assert item.ownership_timeout_ms == store.now_ms() + 60_000
    assert item.progress == {"offset": 0}
    with pytest.raises(PartitionUnavailableError) as held:
        store.acquire(sid(store), "a", "w2", T)
    assert held.value.current.owner == "w1"
    clock.advance(T + 1)
    taken = store.acquire(sid(store), "a", "w2", T)
    assert taken.owner == "w2" and taken.epoch == 2 and taken.version > item.version


def test_acquire_missing_and_completed(store: LeaseStore) -> None:
    with pytest.raises(PartitionNotFoundError):
        store.acquire(sid(store), "nope", "w1", T)
    store.create_partitions(sid(store), ["a"])
    store.complete(store.acquire(sid(store), "a", "w1", T).token)
    with pytest.raises(PartitionUnavailableError) as done:
        store.acquire(sid(store), "a", "w2", T)
    assert done.value.current.status is PartitionStatus.COMPLETED


def test_acquire_next_order(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["u1", "u2"])
    clock.advance(1)
    store.create_partitions(s, ["closed", "expired", "live"])
    closed = store.acquire(s, "closed", "w", T)
    store.close(closed.token, ReopenBackoff.fixed(30), max_closed_count=3)
    store.acquire(s, "expired", "w", 10)
    store.acquire(s, "live", "w", 3600)
    clock.advance(5)
    # Nothing expired or reopened yet: UNASSIGNED in creation order.
    assert store.acquire_next(s, "n", T).partition_key == "u1"
    clock.advance(30)  # "expired" (10 s) and "closed" (reopens at 30 s) both due now
    order = [store.acquire_next(s, "n", T).partition_key for _ in range(3)]
    assert order == ["expired", "closed", "u2"]
    assert store.acquire_next(s, "n", T) is None  # "live" is held, the rest taken
    metrics = store.metrics.pending()[s]
    assert metrics[m.NO_PARTITIONS_ACQUIRED] == 1
    assert metrics[m.PARTITIONS_ACQUIRED] == 3 + 4


def test_acquire_next_skips_completed_and_unexpired(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["a", "b"])
    store.complete(store.acquire(s, "a", "w", T).token)
    store.acquire(s, "b", "w", T)
    clock.advance(T - 1)
    assert store.acquire_next(s, "n", T) is None


def test_renew_extends_ownership_ttl_and_saves_progress(
    store: LeaseStore, clock: FakeClock
) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    created = store.get(s, "a")
    assert created.expiration_time == store.now_ms() // 1000 + 86400  # TTL set on create
    item = store.acquire(s, "a", "w1", T)
    clock.advance(50)
    renewed = store.renew(item.token, T, progress_state='{"offset": 42}')
    assert renewed.ownership_timeout_ms == store.now_ms() + 60_000
    assert renewed.expiration_time == store.now_ms() // 1000 + 86400  # TTL extended
    assert renewed.epoch == item.epoch and renewed.progress == {"offset": 42}
    clock.advance(50)  # past the original timeout, inside the renewed one
    with pytest.raises(PartitionUnavailableError):
        store.acquire(s, "a", "w2", T)
    kept = store.renew(renewed.token, T)  # progress untouched when not given
    assert kept.progress == {"offset": 42}


@pytest.mark.parametrize("action", ["renew", "close", "give_up", "complete"])
def test_every_owner_write_is_fenced_by_epoch(
    store: LeaseStore, clock: FakeClock, action: str
) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    zombie = store.acquire(s, "a", "w1", T)
    clock.advance(T + 1)
    successor = store.acquire(s, "a", "w2", T)
    writes = {
        "renew": lambda t: store.renew(t, T, progress_state='{"zombie": true}'),
        "close": lambda t: store.close(t, ReopenBackoff.fixed(10), 3),
        "give_up": lambda t: store.give_up(t),
        "complete": lambda t: store.complete(t),
    }
    with pytest.raises(PartitionNotOwnedError):
        writes[action](zombie.token)
    assert store.get(s, "a") == successor  # the refused write left no trace
    # Same owner name but an old epoch is refused too: fencing is by epoch, not by name.
    clock.advance(T + 1)
    again = store.acquire(s, "a", "w1", T)
    stale = successor.token.__class__(s, "a", "w1", zombie.epoch)
    with pytest.raises(PartitionNotOwnedError):
        writes[action](stale)
    assert store.get(s, "a") == again
    assert store.metrics.pending()[s][m.PARTITION_NOT_OWNED] == 2


def test_close_reopen_and_dead_letter(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    for n in (1, 2):
        item = store.acquire(s, "a", f"w{n}", T)
        closed = store.close(item.token, ReopenBackoff.fixed(100), max_closed_count=2, reason="404")
        assert closed.status is PartitionStatus.CLOSED and closed.owner is None
        assert closed.closed_count == n
        assert closed.reopen_at_ms == store.now_ms() + 100_000
        with pytest.raises(PartitionUnavailableError):
            store.acquire(s, "a", "other", T)
        assert store.acquire_next(s, "other", T) is None
        clock.advance(100)
    item = store.acquire(s, "a", "w3", T)
    dead = store.close(item.token, ReopenBackoff.fixed(100), max_closed_count=2, reason="404 again")
    assert dead.status is PartitionStatus.COMPLETED
    assert dead.dead_letter_reason == "404 again" and dead.closed_count == 3
    clock.advance(10_000)
    assert store.acquire_next(s, "other", T) is None
    with pytest.raises(PartitionUnavailableError):
        store.acquire(s, "a", "other", T)
    assert store.metrics.pending()[s][m.PARTITIONS_CLOSED] == 3


def test_reopen_backs_off_with_closed_count_and_stays_capped(
    store: LeaseStore, clock: FakeClock
) -> None:
    """Both backends size `reOpenAt` by the closes so far: 10, 20, then the cap of 35 s; the
    item reopens exactly then (its GSI priority is that time), not a millisecond earlier."""
    s = sid(store)
    store.create_partitions(s, ["a"])
    backoff = ReopenBackoff(10, 35, draw=lambda: 0.0)  # no jitter: the ceiling itself
    delays = []
    for n in range(1, 6):
        closed = store.close(store.acquire(s, "a", f"w{n}", T).token, backoff, 10)
        assert (closed.status, closed.closed_count) == (PartitionStatus.CLOSED, n)
        assert store.get(s, "a") == closed
        delays.append((closed.reopen_at_ms - store.now_ms()) / 1000)
        clock.advance(delays[-1] - 0.001)
        with pytest.raises(PartitionUnavailableError):
            store.acquire(s, "a", "early", T)
        clock.advance(0.001)
    assert delays == [10, 20, 35, 35, 35]


def test_reopen_jitter_stays_in_the_upper_half(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    backoff = ReopenBackoff(10, 35, draw=random.Random(5).random)
    for n, ceiling in enumerate([10, 20, 35, 35], start=1):
        closed = store.close(store.acquire(s, "a", f"w{n}", T).token, backoff, 10)
        delay = (closed.reopen_at_ms - store.now_ms()) / 1000
        assert ceiling / 2 <= delay <= ceiling, (n, delay)
        clock.advance(delay)


def test_give_up_makes_it_available_at_once_with_progress(store: LeaseStore) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    item = store.acquire(s, "a", "w1", T)
    store.renew(item.token, T, progress_state='{"offset": 7}')
    released = store.give_up(item.token)
    assert released.status is PartitionStatus.UNASSIGNED and released.owner is None
    nxt = store.acquire_next(s, "w2", T)
    assert nxt.partition_key == "a" and nxt.progress == {"offset": 7} and nxt.epoch == 2


def test_takeover_receives_last_saved_progress(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    item = store.acquire(s, "a", "w1", T)
    store.renew(item.token, T, progress_state=json.dumps({"offset": 1000}))
    clock.advance(T + 1)  # w1 crashed
    taken = store.acquire_next(s, "w2", T)
    assert taken.partition_key == "a" and taken.progress == {"offset": 1000}


def test_complete(store: LeaseStore) -> None:
    s = sid(store)
    store.create_partitions(s, ["a"])
    done = store.complete(store.acquire(s, "a", "w1", T).token, progress_state='{"rows": 3}')
    assert done.status is PartitionStatus.COMPLETED and done.owner is None
    assert done.progress == {"rows": 3}
    assert store.metrics.pending()[s][m.PARTITIONS_COMPLETED] == 1


def test_global_state_is_exclusive(make_store: StoreFactory, settings_for, backend, clock) -> None:
    settings = settings_for(backend)
    node_a, node_b = make_store(settings), make_store(settings)
    a = node_a.acquire_global_state("events", "supplier", "node-a", T)
    assert a is not None and node_a.read_global_state("events", "supplier") == {}
    assert node_b.acquire_global_state("events", "supplier", "node-b", T) is None
    node_a.update_global_state(a.token, {"cursor": "k0042"}, T)
    node_a.release_global_state(a.token)
    b = node_b.acquire_global_state("events", "supplier", "node-b", T)
    assert b is not None and b.progress == {"cursor": "k0042"}
    with pytest.raises(PartitionNotOwnedError):  # a's old lease is fenced
        node_a.update_global_state(a.token, {"cursor": "zombie"}, T)
    clock.advance(T + 1)  # node-b died holding it: it is taken over after the timeout
    a2 = node_a.acquire_global_state("events", "supplier", "node-a", T)
    assert a2 is not None and a2.progress == {"cursor": "k0042"}


def test_ttl_expiry_never_reopens_completed_work(
    store: LeaseStore, clock: FakeClock, backend: str
) -> None:
    s = sid(store)
    store.create_partitions(s, ["done", "pending"])
    store.complete(store.acquire(s, "done", "w1", T).token)
    clock.advance(86400 * 2)
    sweep_expired(store)  # what DynamoDB's TTL sweeper (or SQLite's purge) does
    assert store.get(s, "done") is None
    with pytest.raises(PartitionNotFoundError):
        store.acquire(s, "done", "w2", T)
    assert store.acquire_next(s, "w2", T) is None  # nothing came back as available


def test_metrics_flush_and_status(make_store: StoreFactory, settings_for, backend, clock) -> None:
    settings = settings_for(backend)
    one, two = make_store(settings), make_store(settings)
    s = one.source_identifier("events")
    one.create_partitions(s, ["a", "b", "c"])
    one.complete(one.acquire(s, "a", "w1", T).token)
    two.acquire(s, "b", "w2", 10)
    two.close(two.acquire(s, "c", "w2", T).token, ReopenBackoff.fixed(10), 0, reason="unreadable")
    one.flush_metrics()
    two.flush_metrics()
    two.flush_metrics()  # nothing pending: adds nothing
    totals = one.read_metrics()[s]
    assert totals[m.PARTITIONS_CREATED] == 3
    assert totals[m.PARTITIONS_ACQUIRED] == 3
    assert totals[m.PARTITIONS_COMPLETED] == 1
    assert totals[m.PARTITIONS_CLOSED] == 1
    clock.advance(11)
    (summary,) = [x for x in one.status() if x.source_identifier == s]
    assert summary.counts["COMPLETED"] == 2 and summary.counts["ASSIGNED"] == 1
    assert summary.counts["DEAD_LETTERED"] == 1
    assert [d.partition_key for d in summary.dead_letters] == ["c"]
    assert summary.oldest_expired.partition_key == "b"
    assert summary.metrics == dict(sorted(totals.items()))


def test_status_shows_closed_items_with_count_and_reopen_time(
    store: LeaseStore, clock: FakeClock
) -> None:
    s = sid(store)
    keys = [f"k{i:02d}" for i in range(CLOSED_SHOWN + 3)]
    store.create_partitions(s, keys)
    for _ in range(2):  # k00: closed twice, reopens first
        store.close(store.acquire(s, "k00", "w", T).token, ReopenBackoff.fixed(1), 5)
        clock.advance(1)
    for i, key in enumerate(keys[1:], start=1):  # then the highest key first
        store.close(store.acquire(s, key, "w", T).token, ReopenBackoff.fixed(100 - i), 5)
    clock.advance(90)  # k00 and k10..k22 are due
    (summary,) = [x for x in store.status() if x.source_identifier == s]
    assert summary.counts["CLOSED"] == len(keys) and summary.closed_due == 14
    shown = ["k00", *keys[:0:-1]][:CLOSED_SHOWN]
    assert [c.partition_key for c in summary.closed] == shown
    first = summary.closed[0]
    assert first.closed_count == 2 and first.reopen_at_ms == store.now_ms() - 90_000
    text = status_text([summary])
    assert f"{s}: {len(keys)} CLOSED (14 due for a retry run), soonest reopen first:" in text
    assert (
        f"{s}: CLOSED 'k00' after 2 failed reads, reopens at {iso_utc(first.reopen_at_ms)}" in text
    )
    assert f"{s}: ... and 3 more CLOSED" in text
    (rendered,) = status_json([summary])
    assert (rendered["closed"]["count"], rendered["closed"]["due"]) == (len(keys), 14)
    assert len(rendered["closed"]["soonest"]) == CLOSED_SHOWN
    assert {
        k: rendered["closed"]["soonest"][0][k]
        for k in ("sourcePartitionKey", "closedCount", "reOpenAt")
    } == {
        "sourcePartitionKey": "k00",
        "closedCount": 2,
        "reOpenAt": iso_utc(first.reopen_at_ms),
    }


def test_due_for_retry_lists_what_attempts_left_behind(store: LeaseStore, clock: FakeClock) -> None:
    s = sid(store)
    store.create_partitions(s, ["new", "expired", "closed", "held", "done", "later"])
    store.acquire(s, "expired", "dead", 10)
    store.close(store.acquire(s, "closed", "w", T).token, ReopenBackoff.fixed(20), 3)
    store.close(store.acquire(s, "later", "w", T).token, ReopenBackoff.fixed(3600), 3)
    store.acquire(s, "held", "alive", 3600)
    store.complete(store.acquire(s, "done", "w", T).token)
    assert store.due_for_retry(s, 10) == []
    clock.advance(30)
    due = store.due_for_retry(s, 10)
    assert [i.partition_key for i in due] == ["expired", "closed"]  # oldest first
    assert [i.partition_key for i in store.due_for_retry(s, 1)] == ["expired"]
    assert store.get(s, "expired").owner == "dead"  # read-only


def test_due_for_retry_lists_unassigned_items_nobody_came_for(
    store: LeaseStore, clock: FakeClock
) -> None:
    s = sid(store)
    store.create_partitions(s, ["waiting", "handed-back"])
    token = store.acquire(s, "handed-back", "stopping-run", T).token
    clock.advance(20)
    store.give_up(token)  # a stopping run handed its prefetched work back
    clock.advance(20)
    assert store.due_for_retry(s, 10) == []  # only when asked for
    assert [i.partition_key for i in store.due_for_retry(s, 10, unassigned_for_s=30)] == ["waiting"]
    clock.advance(20)
    due = store.due_for_retry(s, 10, unassigned_for_s=30)
    assert [(i.partition_key, i.status) for i in due] == [
        ("waiting", PartitionStatus.UNASSIGNED),
        ("handed-back", PartitionStatus.UNASSIGNED),
    ]


def test_pending_partitions_lists_work_not_done_by_status_never_dead_letters(
    store: LeaseStore, clock: FakeClock
) -> None:
    """What closing asks: UNASSIGNED (creation order), ASSIGNED, CLOSED (by reOpenAt); never
    COMPLETED, dead letters included; bounded by `limit`; other streams do not count."""
    s = sid(store)
    assert store.pending_partitions(s, 10) == []
    store.create_partitions(s, ["done", "dead", "closed-late", "closed-soon", "held", "new"])
    store.complete(store.acquire(s, "done", "w", T).token)
    dead = store.acquire(s, "dead", "w", T)
    store.close(dead.token, ReopenBackoff.fixed(10), max_closed_count=0, reason="broken")
    assert store.get(s, "dead").dead_letter_reason == "broken"  # type: ignore[union-attr]
    store.close(store.acquire(s, "closed-late", "w", T).token, ReopenBackoff.fixed(600), 3)
    store.close(store.acquire(s, "closed-soon", "w", T).token, ReopenBackoff.fixed(60), 3)
    store.acquire(s, "held", "w", T)
    store.create_partitions(store.source_identifier("other"), ["elsewhere"])
    pending = store.pending_partitions(s, 10)
    assert [(i.partition_key, i.status) for i in pending] == [
        ("new", PartitionStatus.UNASSIGNED),
        ("held", PartitionStatus.ASSIGNED),
        ("closed-soon", PartitionStatus.CLOSED),
        ("closed-late", PartitionStatus.CLOSED),
    ]
    assert [i.partition_key for i in store.pending_partitions(s, 1)] == ["new"]
    assert [i.partition_key for i in store.pending_partitions(s, 3)] == [
        "new",
        "held",
        "closed-soon",
    ]
    store.complete(store.acquire(s, "new", "w", T).token)
    store.complete(store.get(s, "held").token)  # type: ignore[union-attr]
    clock.advance(600)
    for key in ("closed-soon", "closed-late"):
        store.complete(store.acquire(s, key, "w", T).token)
    assert store.pending_partitions(s, 10) == []


def test_iter_items_without_progress_is_the_same_items_less_their_progress(
    store: LeaseStore,
) -> None:
    sid = store.source_identifier("s")
    store.create_partitions(sid, ["a", "b"], progress_states=['{"unit": [["a", 1]]}', None])
    store.complete(store.acquire(sid, "b", "w1", T).token, progress_state='{"rows_read": 3}')
    whole = list(store.iter_items(sid))
    bare = list(store.iter_items(sid, progress=False))
    assert [i.progress for i in whole] == [{"unit": [["a", 1]]}, {"rows_read": 3}]
    assert [i.progress for i in bare] == [None, None]
    assert [replace(i, progress_state=None) for i in whole] == bare
    assert [i.partition_key for i in store.iter_items(None, progress=False)] == ["a", "b"]
