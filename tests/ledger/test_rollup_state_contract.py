"""The rollup state every backend keeps: batches written in transactions of at most
`KEYS_PER_TRANSACTION` keys, fenced by the rollup job's lease, each key by its txid (Storm's
rule), and replays after a writer died between two transactions of a batch."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from resources.coordination.errors import PartitionNotOwnedError
from resources.coordination.items import ItemType, LeaseItem
from resources.ledger.rollup_state import KEYS_PER_TRANSACTION
from resources.rollup.aggregates import Aggregate, Function, Value, combine, identity
from resources.rollup.state import KeyState, Mode
from resources.stores.base import CoordinationStore
from tests.support.fakes import FakeClock

pytestmark = pytest.mark.contract

ROLLUP = "events|per_user"
DT = "2026-11-20"
T = 30.0
AGGREGATES = (
    Aggregate("events", Function.COUNT),
    Aggregate("amount", Function.SUM, "amount"),
    Aggregate("smallest", Function.MIN, "amount"),
)
KEYS = 2 * KEYS_PER_TRANSACTION + 5  # three transactions


class Killed(Exception):
    """The writer died here."""


def job(store: CoordinationStore, owner: str) -> LeaseItem:
    sid = store.source_identifier(ROLLUP, ItemType.ROLLUP_JOB)
    store.create_partitions(sid, [DT])
    return store.acquire(sid, DT, owner, T)


def partials(keys: range, scale: int = 1) -> dict[str, Value]:
    return {f"user-{k:04d}": (1, k * scale, k * scale) for k in keys}


def write(
    store: CoordinationStore,
    lease: LeaseItem,
    mode: Mode,
    txid: int,
    batch: dict[str, Value],
    die_after: int | None = None,
) -> int:
    return store.write_rollup_batch(
        lease.token, ROLLUP, DT, mode, AGGREGATES, txid, batch, timeout_s=T,
        after_transaction=dying_after(die_after),
    )  # fmt: skip


def dying_after(die_after: int | None) -> Callable[[int], None]:
    """A writer's `after_transaction` that dies after its `die_after`-th transaction."""

    def after(n: int) -> None:
        if n == die_after:
            raise Killed

    return after


def values(store: CoordinationStore) -> dict[str, Value]:
    return {k: s.value for k, s in store.rollup_states(ROLLUP, DT).items()}


def expected(*batches: dict[str, Value]) -> dict[str, Value]:
    out: dict[str, Value] = {}
    for batch in batches:
        for k, v in batch.items():
            out[k] = combine(AGGREGATES, out.get(k, identity(AGGREGATES)), v)
    return out


@pytest.mark.parametrize("mode", list(Mode))
def test_a_batch_larger_than_a_transaction_lands_whole_and_carries_its_txid(
    store: CoordinationStore, mode: Mode
) -> None:
    lease = job(store, "w")
    first, second = partials(range(KEYS)), partials(range(10, KEYS + 10), scale=2)
    assert write(store, lease, mode, 4, first) == KEYS
    assert write(store, lease, mode, 9, second) == KEYS
    assert values(store) == expected(first, second)
    states = store.rollup_states(ROLLUP, DT)
    assert {s.txid for k, s in states.items() if k in second} == {9}
    assert {s.txid for k, s in states.items() if k not in second} == {4}
    previous = states["user-0050"].prev_value
    assert previous == (None if mode is Mode.TRANSACTIONAL else first["user-0050"])
    # Only the keys asked for are read, and a key with no record is simply absent.
    some = store.rollup_states(ROLLUP, DT, ["user-0003", "nobody"])
    assert list(some) == ["user-0003"]


@pytest.mark.parametrize("mode", list(Mode))
def test_a_writer_killed_between_two_transactions_is_completed_by_the_replay(
    store: CoordinationStore, mode: Mode
) -> None:
    lease = job(store, "w")
    base, batch = partials(range(KEYS)), partials(range(KEYS), scale=3)
    write(store, lease, mode, 3, base)
    with pytest.raises(Killed):
        write(store, lease, mode, 7, batch, die_after=1)
    held = store.rollup_states(ROLLUP, DT)
    assert sum(s.txid == 7 for s in held.values()) == KEYS_PER_TRANSACTION
    # The replay writes only the keys the dead attempt did not reach (transactional) or
    # rewrites them from prev_value (opaque); either way each row counts once.
    written = write(store, lease, mode, 7, batch)
    assert written == (KEYS - KEYS_PER_TRANSACTION if mode is Mode.TRANSACTIONAL else KEYS)
    assert values(store) == expected(base, batch)
    assert write(store, lease, mode, 7, batch) == (0 if mode is Mode.TRANSACTIONAL else KEYS)
    assert values(store) == expected(base, batch)


def test_an_opaque_replay_with_other_rows_drops_the_dead_attempts_rows(
    store: CoordinationStore,
) -> None:
    lease = job(store, "w")
    base = partials(range(KEYS))
    attempt = partials(range(KEYS), scale=5)  # every key, first transaction lands
    replay = {k: v for k, v in partials(range(0, KEYS, 2), scale=7).items()}  # other rows
    write(store, lease, Mode.OPAQUE, 3, base)
    with pytest.raises(Killed):
        write(store, lease, Mode.OPAQUE, 8, attempt, die_after=1)
    write(store, lease, Mode.OPAQUE, 8, replay)
    # Keys only the dead attempt wrote are back to their value before batch 8.
    assert values(store) == expected(base, replay)


def test_an_older_batch_never_lands_on_a_newer_one(store: CoordinationStore) -> None:
    lease = job(store, "w")
    write(store, lease, Mode.TRANSACTIONAL, 9, partials(range(3)))
    assert write(store, lease, Mode.TRANSACTIONAL, 5, partials(range(3), scale=4)) == 0
    assert values(store) == partials(range(3))


@pytest.mark.parametrize("mode", list(Mode))
def test_a_zombie_writer_writes_nothing(
    store: CoordinationStore, clock: FakeClock, mode: Mode
) -> None:
    zombie = job(store, "zombie")
    write(store, zombie, mode, 4, partials(range(5)))
    clock.advance(T + 1)
    successor = job(store, "successor")
    before = store.rollup_states(ROLLUP, DT)
    with pytest.raises(PartitionNotOwnedError):
        write(store, zombie, mode, 9, partials(range(KEYS)))
    assert store.rollup_states(ROLLUP, DT) == before
    write(store, successor, mode, 9, partials(range(5)))
    assert values(store) == expected(partials(range(5)), partials(range(5)))


def test_each_transaction_renews_the_lease(store: CoordinationStore, clock: FakeClock) -> None:
    lease = job(store, "w")
    clock.advance(T - 1)
    write(store, lease, Mode.TRANSACTIONAL, 2, partials(range(3)))
    clock.advance(T - 1)  # past the first timeout, not past the renewed one
    write(store, lease, Mode.TRANSACTIONAL, 4, partials(range(3)))
    assert store.rollup_states(ROLLUP, DT)["user-0001"] == KeyState(4, (2, 2, 1))


def test_forgetting_a_partitions_state(store: CoordinationStore) -> None:
    lease = job(store, "w")
    write(store, lease, Mode.OPAQUE, 2, partials(range(7)))
    assert store.forget_rollup(ROLLUP, DT) == 7
    assert store.rollup_states(ROLLUP, DT) == {}


def test_an_opaque_replay_taking_in_later_rows_replaces_the_dead_attempt(
    store: CoordinationStore,
) -> None:
    """The runner's opaque replay: the dead attempt was batch 8; the replay, a bigger batch
    under txid 12 (rows committed since taken in), names 8 among the earlier attempts."""
    lease = job(store, "w")
    base = partials(range(KEYS))
    attempt = partials(range(KEYS), scale=5)
    bigger = partials(range(0, KEYS + 40), scale=6)  # more keys, other values
    write(store, lease, Mode.OPAQUE, 3, base)
    with pytest.raises(Killed):
        write(store, lease, Mode.OPAQUE, 8, attempt, die_after=1)
    store.write_rollup_batch(
        lease.token, ROLLUP, DT, Mode.OPAQUE, AGGREGATES, 12, bigger, timeout_s=T, earlier=[8]
    )
    assert values(store) == expected(base, bigger)
    assert {s.txid for s in store.rollup_states(ROLLUP, DT).values()} == {12}


def set_values(
    store: CoordinationStore,
    lease: LeaseItem,
    txid: int,
    state: dict[str, Value],
    die_after: int | None = None,
) -> int:
    return store.write_rollup_values(
        lease.token, ROLLUP, DT, txid, state, timeout_s=T, after_transaction=dying_after(die_after)
    )


def test_values_set_as_of_a_publication_remove_the_keys_it_no_longer_serves(
    store: CoordinationStore,
) -> None:
    lease = job(store, "w")
    first = partials(range(KEYS))
    assert set_values(store, lease, 3, first) == KEYS
    later = partials(range(KEYS // 2, KEYS + 4), scale=3)  # half the keys gone, four new
    assert set_values(store, lease, 7, later) == KEYS + 4
    assert values(store) == later
    assert {s.txid for s in store.rollup_states(ROLLUP, DT).values()} == {7}
    assert set_values(store, lease, 7, later) == 0  # the same publication again: nothing


def test_a_recomputation_killed_between_two_transactions_is_completed_by_the_next(
    store: CoordinationStore,
) -> None:
    lease = job(store, "w")
    set_values(store, lease, 3, partials(range(KEYS)))
    halved = partials(range(0, KEYS, 2), scale=2)
    with pytest.raises(Killed):
        set_values(store, lease, 8, halved, die_after=1)
    assert values(store) != halved
    set_values(store, lease, 8, halved)  # the replay
    assert values(store) == halved
    newer = partials(range(1, KEYS, 3), scale=5)
    with pytest.raises(Killed):
        set_values(store, lease, 9, newer, die_after=2)
    set_values(store, lease, 11, newer)  # a later publication's, after the dead attempt
    assert values(store) == newer


def test_an_older_recomputation_never_lands_on_a_newer_one_and_a_zombie_writes_nothing(
    store: CoordinationStore, clock: FakeClock
) -> None:
    zombie = job(store, "zombie")
    set_values(store, zombie, 9, partials(range(3)))
    assert set_values(store, zombie, 5, partials(range(5), scale=4)) == 0
    assert values(store) == partials(range(3))
    clock.advance(T + 1)
    successor = job(store, "successor")
    with pytest.raises(PartitionNotOwnedError):
        set_values(store, zombie, 12, {})
    assert values(store) == partials(range(3))
    set_values(store, successor, 12, {})
    assert values(store) == {}
