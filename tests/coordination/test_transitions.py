"""The lease item's state machine driven without any store: guards, changes and refusals.

The contract suite (`test_lease_store_contract.py`) is the proof that both backends apply these
decisions alike; this is the proof of the decisions themselves.
"""

from __future__ import annotations

import pytest

from resources.coordination import transitions as t
from resources.coordination.items import LeaseItem, LeaseToken, PartitionStatus, priority_at
from resources.coordination.transitions import Refusal

SID, KEY = "events|partition", "bucket|day1/a.jsonl"
NOW = 1_000_000


def new_item(progress: str | None = None) -> LeaseItem:
    return t.created(SID, KEY, now_ms=NOW, seq=3, progress_state=progress, expiration_time=None)


def step(item: LeaseItem | None, transition: t.Transition) -> LeaseItem:
    """What a backend does: apply only if the guard holds."""
    assert transition.guard.holds(item), t.refusal(transition, item)
    return transition.apply(item)  # type: ignore[arg-type]


def acquire(item: LeaseItem, owner: str = "w1", now: int = NOW, timeout: int = 60_000):
    return step(item, t.acquire(owner, now_ms=now, timeout_ms=timeout, expiration_time=None))


def test_created_item_is_unassigned_in_creation_order() -> None:
    item = new_item('{"offset": 0}')
    assert item.status is PartitionStatus.UNASSIGNED
    assert (item.owner, item.epoch, item.version, item.closed_count) == (None, 0, 1, 0)
    assert item.priority == priority_at(NOW, 3) < priority_at(NOW, 4)
    assert item.progress == {"offset": 0}


def test_acquire_bumps_epoch_and_sets_ownership() -> None:
    item = acquire(new_item(), now=NOW, timeout=60_000)
    assert item.status is PartitionStatus.ASSIGNED
    assert (item.owner, item.epoch, item.version) == ("w1", 1, 2)
    assert item.ownership_timeout_ms == NOW + 60_000
    assert item.priority == priority_at(NOW + 60_000)


def test_a_held_lease_is_unavailable_until_it_expires() -> None:
    held = acquire(new_item())
    early = t.acquire("w2", now_ms=NOW + 59_999, timeout_ms=60_000, expiration_time=None)
    assert not early.guard.holds(held)
    assert t.refusal(early, held) is Refusal.UNAVAILABLE
    taken = acquire(held, owner="w2", now=NOW + 60_001)
    assert (taken.owner, taken.epoch) == ("w2", 2)


def test_owner_writes_are_fenced_by_owner_and_epoch() -> None:
    first = acquire(new_item())
    stale = first.token
    taken = acquire(first, owner="w2", now=NOW + 60_001)
    renewal = t.renew(stale, now_ms=NOW + 60_002, timeout_ms=60_000, expiration_time=None)
    assert t.refusal(renewal, taken) is Refusal.NOT_OWNED
    for write in (
        t.complete(stale, now_ms=NOW, expiration_time=None),
        t.give_up(stale, now_ms=NOW, expiration_time=None),
        t.close(stale, now_ms=NOW, reopen_after_ms=1, max_closed_count=5, expiration_time=None),
    ):
        assert not write.guard.holds(taken)
    same_owner_old_epoch = LeaseToken(SID, KEY, "w2", 1)
    assert not t.renew(
        same_owner_old_epoch, now_ms=NOW, timeout_ms=1, expiration_time=None
    ).guard.holds(taken)


def test_absent_items_pass_no_guard() -> None:
    token = LeaseToken(SID, KEY, "w1", 1)
    for transition in (
        t.acquire("w1", now_ms=NOW, timeout_ms=1, expiration_time=None),
        t.renew(token, now_ms=NOW, timeout_ms=1, expiration_time=None),
    ):
        assert not transition.guard.holds(None)
        assert t.refusal(transition, None) is Refusal.NOT_FOUND


def test_renew_extends_ownership_and_saves_progress_only_when_given() -> None:
    held = acquire(new_item('{"offset": 0}'))
    kept = step(held, t.renew(held.token, now_ms=NOW + 10, timeout_ms=60_000, expiration_time=None))
    assert kept.progress == {"offset": 0}
    assert kept.ownership_timeout_ms == NOW + 60_010
    assert (kept.epoch, kept.version) == (held.epoch, held.version + 1)
    saved = step(
        kept,
        t.renew(
            kept.token,
            now_ms=NOW,
            timeout_ms=1,
            progress_state='{"offset": 9}',
            expiration_time=None,
        ),
    )
    assert saved.progress == {"offset": 9}
    cleared = step(
        saved,
        t.renew(saved.token, now_ms=NOW, timeout_ms=1, progress_state=None, expiration_time=None),
    )
    assert cleared.progress_state is None


def test_close_reopens_later_and_counts() -> None:
    held = acquire(new_item())
    closed = step(
        held,
        t.close(
            held.token, now_ms=NOW, reopen_after_ms=5_000, max_closed_count=2, expiration_time=None
        ),
    )
    assert closed.status is PartitionStatus.CLOSED
    assert (closed.owner, closed.ownership_timeout_ms) == (None, None)
    assert (closed.reopen_at_ms, closed.closed_count) == (NOW + 5_000, 1)
    assert closed.priority == priority_at(NOW + 5_000)
    assert (
        t.refusal(t.acquire("w2", now_ms=NOW + 4_999, timeout_ms=1, expiration_time=None), closed)
        is Refusal.UNAVAILABLE
    )
    reopened = acquire(closed, owner="w2", now=NOW + 5_000)
    assert (reopened.reopen_at_ms, reopened.closed_count, reopened.epoch) == (None, 1, 2)


def test_closing_past_the_maximum_is_refused_and_dead_letters_instead() -> None:
    item = new_item()
    for n in range(1, 3):
        held = acquire(item, now=NOW + n * 10_000)
        item = step(
            held,
            t.close(
                held.token,
                now_ms=NOW + n * 10_000,
                reopen_after_ms=1,
                max_closed_count=2,
                expiration_time=None,
            ),
        )
        assert item.closed_count == n
    held = acquire(item, now=NOW + 50_000)
    closing = t.close(
        held.token, now_ms=NOW + 50_000, reopen_after_ms=1, max_closed_count=2, expiration_time=None
    )
    assert t.refusal(closing, held) is Refusal.CLOSED_TOO_OFTEN
    dead = step(
        held, t.dead_letter(held.token, now_ms=NOW + 50_000, reason="gone", expiration_time=None)
    )
    assert dead.status is PartitionStatus.COMPLETED
    assert (dead.dead_letter_reason, dead.closed_count, dead.owner) == ("gone", 3, None)
    assert not t.acquire("w3", now_ms=NOW * 9, timeout_ms=1, expiration_time=None).guard.holds(dead)


@pytest.mark.parametrize("final", ["complete", "give_up"])
def test_releasing_writes(final: str) -> None:
    held = acquire(new_item())
    write = getattr(t, final)(held.token, now_ms=NOW + 7, expiration_time=None)
    done = step(held, write)
    assert (done.owner, done.ownership_timeout_ms, done.epoch) == (None, None, held.epoch)
    assert done.priority == priority_at(NOW + 7)
    if final == "complete":
        assert done.status is PartitionStatus.COMPLETED
        assert not t.acquire("w2", now_ms=NOW * 9, timeout_ms=1, expiration_time=None).guard.holds(
            done
        )
    else:
        assert done.status is PartitionStatus.UNASSIGNED
        assert acquire(done, owner="w2").epoch == held.epoch + 1


def test_ttl_is_set_when_configured_and_kept_otherwise() -> None:
    item = t.created(SID, KEY, now_ms=NOW, seq=0, progress_state=None, expiration_time=500)
    kept = acquire(item)
    assert kept.expiration_time == 500
    extended = step(kept, t.renew(kept.token, now_ms=NOW, timeout_ms=1, expiration_time=900))
    assert extended.expiration_time == 900


def test_every_transition_bumps_the_version_once() -> None:
    item = new_item()
    held = acquire(item)
    renewed = step(held, t.renew(held.token, now_ms=NOW, timeout_ms=1, expiration_time=None))
    done = step(renewed, t.complete(renewed.token, now_ms=NOW, expiration_time=None))
    assert [i.version for i in (item, held, renewed, done)] == [1, 2, 3, 4]


def test_redrive_takes_back_only_a_dead_letter() -> None:
    """A dead letter comes back CLOSED and due now with its tries reset and progress kept; a
    plain COMPLETED item (its records are in the table) and every pending one are refused."""
    item = new_item(progress='{"done": ["a"]}')
    held = acquire(item)
    dead = step(held, t.dead_letter(held.token, now_ms=NOW + 5, reason="403", expiration_time=1))
    redrive = t.redrive(now_ms=NOW + 9, expiration_time=2)
    back = step(dead, redrive)
    assert (back.status, back.closed_count, back.reopen_at_ms) == (
        PartitionStatus.CLOSED,
        0,
        NOW + 9,
    )
    assert (back.dead_letter_reason, back.owner, back.epoch) == (None, None, dead.epoch)
    assert (back.progress, back.expiration_time, back.priority) == (
        {"done": ["a"]},
        2,
        priority_at(NOW + 9),
    )
    assert t.acquire("w2", now_ms=NOW + 9, timeout_ms=1, expiration_time=None).guard.holds(back)
    assert t.refusal(redrive, back) is Refusal.NOT_DEAD_LETTERED  # not twice
    completed = step(held, t.complete(held.token, now_ms=NOW, expiration_time=None))
    for other in (item, held, completed):
        assert t.refusal(redrive, other) is Refusal.NOT_DEAD_LETTERED
    assert t.refusal(redrive, None) is Refusal.NOT_FOUND
