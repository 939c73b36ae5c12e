"""The held lease: background renewal, loss detection and fencing, release on exit."""

from __future__ import annotations

import threading
import time

import pytest

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import PartitionStatus
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.coordination.lease_store import LeaseStore
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.fakes import FakeClock

FAST = LeaseTiming(ownership_timeout_s=1.0, renew_interval_s=0.2)


@pytest.fixture
def real_store(tmp_path) -> LeaseStore:
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "l.db")))
    store.create_partitions(store.source_identifier("s"), ["a"])
    yield store
    store.close_store()


def take(store: LeaseStore, owner: str = "w1", timing: LeaseTiming = FAST) -> Lease:
    item = store.acquire(store.source_identifier("s"), "a", owner, timing.ownership_timeout_s)
    return Lease(store, item, timing)


def test_background_renewal_keeps_the_lease_past_its_timeout(real_store: LeaseStore) -> None:
    with take(real_store) as lease:
        time.sleep(FAST.ownership_timeout_s * 2.5)
        assert not lease.lost
        with pytest.raises(Exception):  # noqa: B017 - any refusal: it is still held
            real_store.acquire(real_store.source_identifier("s"), "a", "w2", 1.0)
        lease.complete({"rows": 1})
    item = real_store.get(real_store.source_identifier("s"), "a")
    assert item.status is PartitionStatus.COMPLETED and item.epoch == 1


def test_takeover_is_noticed_and_the_commit_refused(tmp_path) -> None:
    clock = FakeClock()
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "l.db")), clock=clock)
    sid = store.source_identifier("s")
    store.create_partitions(sid, ["a"])
    lost: list[str] = []
    item = store.acquire(sid, "a", "zombie", 60)
    lease = Lease(
        store, item, LeaseTiming(60, 20), on_lost=lambda held: lost.append(held.lost_reason)
    )
    clock.advance(61)  # the zombie stalled; its store-side ownership expired
    store.acquire(sid, "a", "successor", 60)
    with pytest.raises(LeaseLostError):
        lease.save_progress({"offset": 5})  # refused by the store: epoch moved on
    assert lease.lost and lost and "epoch 1" in lost[0]
    with pytest.raises(LeaseLostError):
        lease.complete()  # refused locally now, before touching the store
    assert store.get(sid, "a").owner == "successor"


class FlakyStore:
    """Delegates to a real store but can be switched to 'unreachable' for renewals."""

    def __init__(self, store: LeaseStore) -> None:
        self._store = store
        self.down = threading.Event()

    def renew(self, *args, **kwargs):
        if self.down.is_set():
            raise StoreUnavailableError("store down (test)")
        return self._store.renew(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._store, name)


def test_unreachable_store_means_lost_after_the_local_deadline(real_store: LeaseStore) -> None:
    flaky = FlakyStore(real_store)
    item = real_store.acquire(real_store.source_identifier("s"), "a", "w1", 1.0)
    with Lease(flaky, item, FAST) as lease:  # type: ignore[arg-type]
        flaky.down.set()
        deadline = time.monotonic() + 5
        while not lease.lost and time.monotonic() < deadline:
            time.sleep(0.05)
        assert lease.lost and "without a successful renewal" in lease.lost_reason
        with pytest.raises(LeaseLostError):
            lease.check()


def test_exit_without_finishing_gives_the_partition_back(real_store: LeaseStore) -> None:
    with pytest.raises(RuntimeError):
        with take(real_store, timing=LeaseTiming(60, 20)):
            raise RuntimeError("work failed")
    item = real_store.get(real_store.source_identifier("s"), "a")
    assert item.status is PartitionStatus.UNASSIGNED and item.owner is None


def test_timing_must_renew_well_inside_the_timeout() -> None:
    with pytest.raises(ValueError, match="third"):
        LeaseTiming(ownership_timeout_s=30, renew_interval_s=15)


def test_keeper_renews_many_leases_and_releases_the_unfinished(tmp_path) -> None:
    from resources.coordination.keeper import LeaseKeeper

    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "k.db")))
    sid = store.source_identifier("s")
    keys = [f"k{i}" for i in range(20)]
    store.create_partitions(sid, keys)
    with LeaseKeeper(FAST.renew_interval_s) as keeper:
        leases = [keeper.add(Lease(store, store.acquire(sid, k, "run", 1.0), FAST)) for k in keys]
        time.sleep(FAST.ownership_timeout_s * 2.5)  # well past the original timeouts
        assert not any(lease.lost for lease in leases)
        for lease in leases[:5]:
            lease.complete()
    statuses = [store.get(sid, k).status for k in keys]
    assert statuses[:5] == [PartitionStatus.COMPLETED] * 5
    assert statuses[5:] == [PartitionStatus.UNASSIGNED] * 15  # handed back on exit
    store.close_store()
