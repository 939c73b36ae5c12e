"""Failures that are handled are logged, never swallowed: renewer, keeper, release, runner."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import iso_utc
from resources.coordination.keeper import LeaseKeeper
from resources.coordination.lease import Lease, LeaseTiming
from resources.coordination.lease_store import LeaseStore
from resources.coordination.metrics import flush_or_keep
from resources.ingestion.batch_results import SourceBatchResult
from resources.ingestion.outcomes import UNREADABLE
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.coordination.test_lease import FAST, FlakyStore
from tests.ingestion.test_ingestion_runner import create, make_runner, one_row_each

LEASE_LOG = "resources.coordination.lease"
KEEPER_LOG = "resources.coordination.keeper"


@pytest.fixture
def sqlite_store(tmp_path: Path) -> LeaseStore:
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "l.db")))
    store.create_partitions(store.source_identifier("s"), ["a", "b"])
    yield store
    store.close_store()


def acquire(store: LeaseStore, key: str = "a", timeout_s: float = 1.0):  # type: ignore[no-untyped-def]
    return store.acquire(store.source_identifier("s"), key, "w1", timeout_s)


def records(caplog: pytest.LogCaptureFixture, logger: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == logger]


def test_the_renewer_logs_a_failed_renewal_and_the_loss(sqlite_store, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="resources")
    flaky = FlakyStore(sqlite_store)
    flaky.down.set()
    with Lease(flaky, acquire(sqlite_store), FAST) as lease:  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not any(
            "lost" in r.getMessage() for r in records(caplog, LEASE_LOG)
        ):
            time.sleep(0.05)
        assert lease.lost
    logged = records(caplog, LEASE_LOG)
    failed = [r for r in logged if "renewing the lease on 'a'" in r.getMessage()]
    assert failed and failed[0].levelno == logging.WARNING
    assert "store down (test)" in failed[0].getMessage()
    assert any(
        "lease on 'a' (epoch 1) lost" in r.getMessage()
        and "without a successful renewal" in r.getMessage()
        for r in logged
    )


def test_the_renewer_shows_an_unexpected_error_with_its_traceback(sqlite_store, caplog) -> None:
    class Broken(FlakyStore):
        def renew(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise KeyError("a bug")

    with Lease(Broken(sqlite_store), acquire(sqlite_store, timeout_s=60), LeaseTiming(60, 0.05)):  # type: ignore[arg-type]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not records(caplog, LEASE_LOG):
            time.sleep(0.02)
    (first, *_) = records(caplog, LEASE_LOG)
    assert first.levelno == logging.ERROR and "'a'" in first.getMessage()
    assert first.exc_info is not None and first.exc_info[0] is KeyError


def test_a_finished_lease_is_not_reported_as_a_failed_renewal(sqlite_store, caplog) -> None:
    with Lease(sqlite_store, acquire(sqlite_store, timeout_s=60), LeaseTiming(60, 0.01)) as lease:
        lease.complete()
        time.sleep(0.1)
    assert not records(caplog, LEASE_LOG)


def test_the_keeper_logs_a_failed_renewal_and_a_lost_lease(sqlite_store, caplog) -> None:
    caplog.set_level(logging.WARNING, logger="resources")
    flaky = FlakyStore(sqlite_store)
    now = [0.0]
    keeper = LeaseKeeper(FAST.renew_interval_s)
    for key in ("a", "b"):
        keeper.add(Lease(flaky, acquire(sqlite_store, key), FAST, monotonic=lambda: now[0]))  # type: ignore[arg-type]
    flaky.down.set()

    keeper.renew_due()
    (failed,) = records(caplog, KEEPER_LOG)
    assert failed.levelno == logging.WARNING and failed.exc_info is None
    message = failed.getMessage()
    assert message.startswith("renewing 2 of 2 leases failed")
    assert "'a': store down (test)" in message and "'b': store down (test)" in message

    caplog.clear()
    now[0] = FAST.ownership_timeout_s  # the local deadline passes without a renewal
    keeper.renew_due()
    (lost,) = records(caplog, KEEPER_LOG)
    assert lost.getMessage().startswith("2 of 2 leases lost, no longer renewed: 'a': ")
    assert "without a successful renewal" in lost.getMessage()
    assert keeper.held() == []


def test_the_keeper_shows_where_an_unexpected_error_came_from(sqlite_store, caplog) -> None:
    class Broken(FlakyStore):
        def renew(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise KeyError("a bug")

    keeper = LeaseKeeper(FAST.renew_interval_s)
    keeper.add(Lease(Broken(sqlite_store), acquire(sqlite_store, timeout_s=60), FAST))  # type: ignore[arg-type]
    keeper.renew_due()
    (failed,) = records(caplog, KEEPER_LOG)
    assert "'a': 'a bug'" in failed.getMessage()
    assert failed.exc_info is not None and failed.exc_info[0] is KeyError


def test_a_failed_release_is_logged(sqlite_store, caplog) -> None:
    class CannotGiveUp(FlakyStore):
        def give_up(self, *args, **kwargs):  # type: ignore[no-untyped-def]
            raise StoreUnavailableError("store down (test)")

    lease = Lease(CannotGiveUp(sqlite_store), acquire(sqlite_store, timeout_s=60), FAST)  # type: ignore[arg-type]
    lease.release()
    (record,) = records(caplog, LEASE_LOG)
    assert record.levelno == logging.WARNING
    assert "could not hand back the lease on 'a'" in record.getMessage()
    assert "store down (test)" in record.getMessage()


def test_a_metrics_flush_that_fails_is_logged_and_kept(sqlite_store, caplog) -> None:
    class Down:
        def flush_metrics(self) -> None:
            raise StoreUnavailableError("store down (test)")

    assert flush_or_keep(sqlite_store)
    assert not flush_or_keep(Down())
    (record,) = records(caplog, "resources.coordination.metrics")
    assert "not flushed" in record.getMessage() and "store down (test)" in record.getMessage()


def test_the_runner_logs_a_partition_it_does_not_ingest(store: LeaseStore, tmp_path, caplog):  # type: ignore[no-untyped-def]
    def one_unreadable(reading, lake, attempt):  # type: ignore[no-untyped-def]
        done = one_row_each(reading, lake, attempt)
        done["k1"] = SourceBatchResult(unreadable="corrupt gzip: test")
        return done

    keys = ["k0", "k1"]
    create(store, keys)
    outcomes = list(make_runner(store, tmp_path, one_unreadable).ingest(keys))
    assert [o.outcome for o in outcomes][1] == UNREADABLE
    (record,) = records(caplog, "resources.ingestion.runner")
    assert record.levelno == logging.WARNING
    (retry_at,) = [item.reopen_at_ms for item in store.iter_items() if item.partition_key == "k1"]
    assert record.getMessage() == (
        "events: 'k1' not ingested (unreadable): unreadable (closed 1 times, will retry at "
        f"{iso_utc(retry_at)}): corrupt gzip: test"
    )
    caplog.clear()
    (again,) = make_runner(store, tmp_path, one_row_each).ingest(["k1"])  # before it reopens
    assert (again.outcome, again.message) == (
        UNREADABLE,
        f"CLOSED after 1 failed reads; reopens at {iso_utc(retry_at)}",
    )
