"""The publication half of the ledger every backend passes: a partition's current publication
only moves forward, each recorded version gets the next `seq`, the history is kept until
garbage collection forgets it, and racing publishers of one version cannot both win
(docs/architecture.md)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import replace

import pytest

from resources.coordination.errors import PartitionNotOwnedError
from resources.coordination.items import ItemType, LeaseItem
from resources.errors import LeaseholdError
from resources.ledger.publication import (
    LIVE,
    MERGED,
    Publication,
    StalePublicationError,
    publication_due,
)
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from tests.support.fakes import FakeClock, StoreFactory
from tests.support.merge_ledger import DT, TABLE, acquire_job, ingest, merge, merged, obj
from tests.support.publication_ledger import publication, published_state

pytestmark = pytest.mark.contract


def test_live_then_newer_live_then_switched(store: CoordinationStore, clock: FakeClock) -> None:
    ingest(store, obj("a"), obj("b"))
    assert publication_due(store.table_partition(TABLE, DT)) == LIVE
    now = store.now_ms()
    first = store.record_publication(replace(publication(2), seq=41, published_at_ms=7))
    assert first == replace(publication(2), seq=1, published_at_ms=now)  # the ledger's, not ours
    assert published_state(store) == (0, False, 2, 1)
    assert publication_due(store.table_partition(TABLE, DT)) is None

    clock.advance(60)
    ingest(store, obj("c"))
    second = store.record_publication(publication(3))
    assert (second.seq, second.published_at_ms) == (2, store.now_ms())
    assert published_state(store) == (0, False, 3, 2)

    clock.advance(60)
    store.close_partition(TABLE, DT)
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 3)))
    assert publication_due(store.table_partition(TABLE, DT)) == MERGED
    switched = store.record_publication(publication(3, switched=True))
    assert switched.seq == 3 and switched.manifest_version == 3
    assert published_state(store) == (3, True, 3, 3)
    assert store.publications(TABLE, DT) == [first, second, switched]
    assert [p.publication_seq for p in store.table_partitions(TABLE)] == [3]
    assert publication_due(store.table_partition(TABLE, DT)) is None


def test_a_stale_or_equal_version_is_refused_and_writes_nothing(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"), obj("c"))
    store.record_publication(publication(2))
    before = (store.table_partition(TABLE, DT), store.publications(TABLE, DT))
    for stale in (publication(2, token="again"), publication(1)):
        with pytest.raises(StalePublicationError) as refused:
            store.record_publication(stale)
        assert refused.value.current == (False, 2)
        assert refused.value.publication == stale
    assert (store.table_partition(TABLE, DT), store.publications(TABLE, DT)) == before

    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2)))
    store.record_publication(publication(2, switched=True))
    before = (store.table_partition(TABLE, DT), store.publications(TABLE, DT))
    # Switched beats live whatever the upper: a partition never goes back to small objects.
    for stale in (publication(3), publication(2, switched=True, token="again")):
        with pytest.raises(StalePublicationError) as refused:
            store.record_publication(stale)
        assert refused.value.current == (True, 2)
    assert (store.table_partition(TABLE, DT), store.publications(TABLE, DT)) == before


def test_a_publication_beyond_what_the_ledger_holds_is_refused(store: CoordinationStore) -> None:
    with pytest.raises(LeaseholdError, match="no such table partition"):
        store.record_publication(publication(1))
    assert store.table_partition(TABLE, DT) is None
    ingest(store, obj("a"), obj("b"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 1)))
    before = store.table_partition(TABLE, DT)
    for bad in (
        publication(3),  # past the committed ids
        publication(0),
        publication(2, switched=True),  # past the chain's end
    ):
        with pytest.raises(LeaseholdError, match="outside") as error:
            store.record_publication(bad)
        assert not isinstance(error.value, StalePublicationError)
    assert store.table_partition(TABLE, DT) == before and before.publication_seq == 0
    assert store.publications(TABLE, DT) == []
    assert store.record_publication(publication(1, switched=True)).seq == 1


def test_a_never_merged_partition_refuses_a_merged_publication(store: CoordinationStore) -> None:
    ingest(store, obj("a"))
    with pytest.raises(LeaseholdError, match=r"outside the chain, which ends at 0"):
        store.record_publication(publication(1, switched=True))
    assert store.publications(TABLE, DT) == []


def test_history_is_per_partition_and_by_seq(store: CoordinationStore, clock: FakeClock) -> None:
    other = "2026-01-02"
    ingest(store, obj("a"), obj("a", dt=other))
    ingest(store, obj("b"), obj("b", dt=other))
    store.record_publication(publication(1))
    store.record_publication(publication(1, dt=other))
    clock.advance(5)
    store.record_publication(publication(2))
    store.record_publication(publication(2, dt=other))
    ours = store.publications(TABLE, DT)
    assert [(p.seq, p.upper, p.dt) for p in ours] == [(1, 1, DT), (2, 2, DT)]
    assert ours[0].published_at_ms < ours[1].published_at_ms
    assert [p.dt for p in store.publications(TABLE, other)] == [other, other]
    assert store.publications(TABLE, "2026-01-03") == []
    assert store.publications("other", DT) == []


def test_forgetting_never_deletes_the_current_record(store: CoordinationStore) -> None:
    assert store.forget_publications(TABLE, DT, 10) == 0
    ingest(store, obj("a"), obj("b"), obj("c"))
    records = [store.record_publication(publication(upper)) for upper in (1, 2, 3)]
    assert store.forget_publications(TABLE, DT, 2) == 1
    assert store.publications(TABLE, DT) == records[1:]
    assert store.forget_publications(TABLE, DT, 100) == 1  # up to, never including, seq 3
    assert store.publications(TABLE, DT) == records[2:]
    assert store.forget_publications(TABLE, DT, 100) == 0
    assert published_state(store) == (0, False, 3, 3)
    ingest(store, obj("d"))
    assert store.record_publication(publication(4)).seq == 4  # seq never reused


def race(
    stores: list[CoordinationStore], attempts: list[Publication]
) -> tuple[list[Publication], list[StalePublicationError]]:
    """Each attempt recorded from its own thread and store, all released at once."""
    barrier = threading.Barrier(len(attempts))
    won: list[Publication] = []
    lost: list[StalePublicationError] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def publish(store: CoordinationStore, attempt: Publication) -> None:
        barrier.wait()
        try:
            result = store.record_publication(attempt)
        except StalePublicationError as exc:
            with lock:
                lost.append(exc)
        except BaseException as exc:  # surfaced below, with the thread's traceback
            with lock:
                errors.append(exc)
        else:
            with lock:
                won.append(result)

    threads = [
        threading.Thread(target=publish, args=(stores[i % len(stores)], a))
        for i, a in enumerate(attempts)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return won, lost


@pytest.fixture
def racing_stores(
    backend: str, settings_for: Callable[..., StoreSettings], make_store: StoreFactory
) -> list[CoordinationStore]:
    """Four stores on one table or file: four publishers on different nodes."""
    settings = settings_for(backend)
    return [make_store(settings) for _ in range(4)]


def test_racing_publishers_of_one_version_exactly_one_wins(
    racing_stores: list[CoordinationStore],
) -> None:
    store = racing_stores[0]
    ingest(store, obj("a"), obj("b"))
    won, lost = race(racing_stores, [publication(2, token=f"p{i}") for i in range(4)])
    assert len(won) == 1 and len(lost) == 3
    assert all(exc.current == (False, 2) for exc in lost)
    assert store.publications(TABLE, DT) == won
    assert won[0].seq == 1 and published_state(store) == (0, False, 2, 1)


def test_racing_publishers_of_different_versions_keep_the_order(
    racing_stores: list[CoordinationStore],
) -> None:
    store = racing_stores[0]
    ingest(store, *(obj(name) for name in "abcdef"))
    store.record_publication(publication(2))
    attempts = [publication(upper, token=f"u{upper}") for upper in (3, 4, 5, 6)]
    won, lost = race(racing_stores, attempts)
    assert len(won) + len(lost) == 4 and won
    history = store.publications(TABLE, DT)
    assert [p.seq for p in history] == list(range(1, len(history) + 1))
    uppers = [p.upper for p in history]
    assert uppers == sorted(set(uppers))  # each version at most once, only ever newer
    assert sorted(history[1:], key=lambda p: p.seq) == sorted(won, key=lambda p: p.seq)
    assert history[-1].upper == 6  # the newest is never refused: it wins or was there first
    assert published_state(store) == (0, False, 6, len(history))


def test_ingestion_and_merge_commits_keep_the_publication(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"))
    store.record_publication(publication(2))
    ingest(store, obj("c"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 3)))
    store.close_partition(TABLE, DT)
    assert published_state(store) == (0, False, 2, 1)
    switched = store.record_publication(publication(3, switched=True))
    late = ingest(store, obj("late"))
    assert [o.delayed for o in late] == [True]
    assert published_state(store) == (3, True, 3, 2)
    assert publication_due(store.table_partition(TABLE, DT)) is None  # late data waits for a merge
    store.commit_merge(acquire_job(store).token, merge(3, merged(0, 4)))
    partition = store.table_partition(TABLE, DT)
    assert published_state(store) == (3, True, 3, 2)
    assert partition.desired_manifest_version == partition.merged_upper == 4
    assert publication_due(partition) == MERGED
    again = store.record_publication(publication(4, switched=True))
    assert store.publications(TABLE, DT)[-2:] == [switched, again]
    assert published_state(store) == (4, True, 4, 3)


KEYS_TIMEOUT = 30.0


def keys_job(store: CoordinationStore, owner: str) -> LeaseItem:
    """The table's key index lease (`ItemType.KEYS_JOB`, key = the table), acquired by `owner`."""
    sid = store.source_identifier(TABLE, ItemType.KEYS_JOB)
    store.create_partitions(sid, [TABLE])
    return store.acquire(sid, TABLE, owner, KEYS_TIMEOUT)


def lease_now(store: CoordinationStore, lease: LeaseItem) -> LeaseItem:
    item = store.get(lease.source_identifier, lease.partition_key)
    assert item is not None
    return item


def test_a_fenced_record_under_a_held_lease_records_and_renews_it(
    store: CoordinationStore, clock: FakeClock
) -> None:
    ingest(store, obj("a"), obj("b"))
    lease = keys_job(store, "publisher")
    clock.advance(KEYS_TIMEOUT - 1)
    now = store.now_ms()
    recorded = store.record_fenced_publication(lease.token, publication(2), timeout_s=KEYS_TIMEOUT)
    assert recorded == replace(publication(2), seq=1, published_at_ms=now)
    assert store.publications(TABLE, DT) == [recorded]
    assert published_state(store) == (0, False, 2, 1)
    renewed = lease_now(store, lease)
    assert renewed.ownership_timeout_ms == now + int(KEYS_TIMEOUT * 1000)
    assert renewed.ownership_timeout_ms > lease.ownership_timeout_ms  # type: ignore[operator]
    assert (renewed.owner, renewed.epoch) == ("publisher", lease.epoch)
    clock.advance(KEYS_TIMEOUT - 1)  # past the first timeout, not past the renewed one
    ingest(store, obj("c"))
    assert store.record_fenced_publication(lease.token, publication(3)).seq == 2


def test_a_zombie_publisher_records_nothing(store: CoordinationStore, clock: FakeClock) -> None:
    ingest(store, obj("a"), obj("b"), obj("c"))
    zombie = keys_job(store, "zombie")
    store.record_fenced_publication(zombie.token, publication(1), timeout_s=KEYS_TIMEOUT)
    clock.advance(KEYS_TIMEOUT + 1)
    successor = keys_job(store, "successor")
    before = (store.table_partition(TABLE, DT), store.publications(TABLE, DT))
    # A newer version, or one the check would refuse: either way it is told its lease is lost.
    for attempt in (publication(3), publication(1, token="again")):
        with pytest.raises(PartitionNotOwnedError):
            store.record_fenced_publication(zombie.token, attempt, timeout_s=KEYS_TIMEOUT)
    assert (store.table_partition(TABLE, DT), store.publications(TABLE, DT)) == before
    assert lease_now(store, successor) == successor
    assert store.record_fenced_publication(successor.token, publication(3)).seq == 2


def test_a_lease_given_up_and_taken_fences_its_old_token(store: CoordinationStore) -> None:
    ingest(store, obj("a"))
    first = keys_job(store, "first")
    store.give_up(first.token)
    taken = store.acquire(first.source_identifier, TABLE, "second", KEYS_TIMEOUT)
    before = store.table_partition(TABLE, DT)
    with pytest.raises(PartitionNotOwnedError):
        store.record_fenced_publication(first.token, publication(1))
    assert store.table_partition(TABLE, DT) == before and before.publication_seq == 0
    assert store.publications(TABLE, DT) == []
    assert lease_now(store, taken) == taken


def test_a_stale_fenced_record_is_refused_and_does_not_renew(
    store: CoordinationStore, clock: FakeClock
) -> None:
    ingest(store, obj("a"), obj("b"))
    lease = keys_job(store, "publisher")
    store.record_fenced_publication(lease.token, publication(2), timeout_s=KEYS_TIMEOUT)
    held = lease_now(store, lease)
    before = (store.table_partition(TABLE, DT), store.publications(TABLE, DT))
    clock.advance(5)
    for stale in (publication(2, token="again"), publication(1)):
        with pytest.raises(StalePublicationError) as refused:
            store.record_fenced_publication(lease.token, stale, timeout_s=KEYS_TIMEOUT)
        assert refused.value.current == (False, 2)
    assert (store.table_partition(TABLE, DT), store.publications(TABLE, DT)) == before
    assert lease_now(store, lease) == held


OTHER = "2026-01-02"


def test_a_revision_serves_the_current_version_again_once(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"))
    first = store.record_publication(publication(2))
    revision = replace(publication(2, token="revised"), revises=first.seq)
    stored = store.record_publication(revision)
    assert (stored.seq, stored.revises, stored.version) == (2, 1, (False, 2))
    assert published_state(store) == (0, False, 2, 2)
    assert store.publications(TABLE, DT)[-1] == stored
    # A second revision of the same record, or one racing a newer version, is stale.
    before = (store.table_partition(TABLE, DT), store.publications(TABLE, DT))
    with pytest.raises(StalePublicationError, match="revises publication 1"):
        store.record_publication(replace(publication(2, token="late"), revises=first.seq))
    assert (store.table_partition(TABLE, DT), store.publications(TABLE, DT)) == before
    ingest(store, obj("c"))
    newer = store.record_publication(publication(3))
    with pytest.raises(StalePublicationError):
        store.record_publication(replace(publication(2, token="later"), revises=stored.seq))
    assert store.publications(TABLE, DT)[-1] == newer and newer.revises == 0


def test_several_dates_are_recorded_in_one_fenced_transaction_or_none(
    store: CoordinationStore, clock: FakeClock
) -> None:
    ingest(store, obj("a"), obj("b"))
    ingest(store, obj("c", OTHER))
    lease = keys_job(store, "publisher")
    store.record_publication(publication(1, dt=OTHER))
    clock.advance(5)
    now = store.now_ms()
    # A new version of one date and a revision of the other, together.
    both = [publication(2), replace(publication(1, dt=OTHER, token="revised"), revises=1)]
    recorded = store.record_fenced_publications(lease.token, both, timeout_s=KEYS_TIMEOUT)
    assert [(p.dt, p.seq, p.revises, p.published_at_ms) for p in recorded] == [
        (DT, 1, 0, now),
        (OTHER, 2, 1, now),
    ]
    assert [p.publication_seq for p in store.table_partitions(TABLE)] == [1, 2]
    assert lease_now(store, lease).ownership_timeout_ms == now + int(KEYS_TIMEOUT * 1000)
    # One of them refused: none recorded, the lease not renewed.
    ingest(store, obj("d"))
    held, before = lease_now(store, lease), store.table_partitions(TABLE)
    clock.advance(5)
    for refused in (
        [publication(3), replace(publication(1, dt=OTHER, token="again"), revises=1)],
        [publication(3), publication(1, dt=OTHER, token="again")],
    ):
        with pytest.raises(StalePublicationError):
            store.record_fenced_publications(lease.token, refused, timeout_s=KEYS_TIMEOUT)
    assert store.table_partitions(TABLE) == before and lease_now(store, lease) == held
    assert [len(store.publications(TABLE, dt)) for dt in (DT, OTHER)] == [1, 2]
    # Two of one date, or a zombie's: refused before anything is written.
    with pytest.raises(LeaseholdError, match="one per partition"):
        store.record_fenced_publications(lease.token, [publication(3), publication(3, token="x")])
    clock.advance(KEYS_TIMEOUT + 1)
    successor = keys_job(store, "successor")
    with pytest.raises(PartitionNotOwnedError):
        store.record_fenced_publications(lease.token, [publication(3)])
    assert store.table_partitions(TABLE) == before
    assert store.record_fenced_publications(successor.token, [publication(3)])[0].seq == 2


def test_several_dates_are_recorded_in_one_transaction_unfenced_or_none(
    store: CoordinationStore,
) -> None:
    # A replacement's dates: one transaction, no lease (the records' own conditions fence).
    ingest(store, obj("a"))
    ingest(store, obj("c", OTHER))
    recorded = store.record_publications([publication(1), publication(1, dt=OTHER)])
    assert [(p.dt, p.seq) for p in recorded] == [(DT, 1), (OTHER, 1)]
    ingest(store, obj("d"))
    before = store.table_partitions(TABLE)
    with pytest.raises(StalePublicationError):  # OTHER has that version: none recorded
        store.record_publications([publication(2), publication(1, dt=OTHER, token="again")])
    assert store.table_partitions(TABLE) == before
    with pytest.raises(LeaseholdError, match="one per partition"):
        store.record_publications([publication(2), publication(2, token="x")])
    assert store.record_publications([]) == []
