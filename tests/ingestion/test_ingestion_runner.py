"""The runner's chunk pipeline, on both store backends, with a stand-in for the Spark read.

The read of chunk k+1 overlaps the commits of chunk k and the caller's handling of their
outcomes (Dagster's event-log writes); a caller that stops early gets nothing committed behind
its back and leaves no lease held.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.coordination import metrics as m
from resources.coordination.items import PartitionStatus
from resources.coordination.lease import LeaseTiming
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.batch_results import SourceBatchResult, StagedFile
from resources.ingestion.outcomes import COMMITTED
from resources.ingestion.runner import IngestionRunner
from resources.ingestion.work_units import UnitObject

STREAM = "events"


def make_runner(store: LeaseStore, tmp_path: Path, read_batch) -> IngestionRunner:  # type: ignore[no-untyped-def]
    lake = tmp_path / "lake"

    def read(reading: dict[str, list[UnitObject]], attempt: str) -> dict[str, SourceBatchResult]:
        return read_batch(reading, lake, attempt)

    return IngestionRunner(
        stream=STREAM,
        table=STREAM,
        store=store,
        owner="runner-1",
        timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
        read_batch=read,
        chunk_size=2,
    )


def one_row_each(
    reading: dict[str, list[UnitObject]], lake: Path, attempt: str
) -> dict[str, SourceBatchResult]:
    """What the Spark tasks do, in short: one object per unit, written to the lake."""
    lake.mkdir(parents=True, exist_ok=True)
    results = {}
    for key in reading:
        target = lake / f"{attempt}-{key}.parquet"
        pq.write_table(pa.table({"id": [key]}), target)
        staged = StagedFile("2026-01-01", target.as_uri(), 1, target.stat().st_size)
        results[key] = SourceBatchResult(rows_read=1, table_files=[staged])
    return results


def create(store: LeaseStore, keys: list[str]) -> str:
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, keys)
    return sid


def test_next_chunk_is_read_while_the_caller_handles_this_one(
    store: LeaseStore, tmp_path: Path
) -> None:
    keys = [f"k{i}" for i in range(5)]
    sid = create(store, keys)
    second_chunk_read = threading.Event()

    def read_batch(reading: dict[str, list[UnitObject]], lake: Path, attempt: str):  # type: ignore[no-untyped-def]
        if "k2" in reading:
            second_chunk_read.set()
        return one_row_each(reading, lake, attempt)

    outcomes = []
    for outcome in make_runner(store, tmp_path, read_batch).ingest(keys):
        if outcome.source_key == "k0":
            # Without the pipeline this would wait forever: chunk 2 would not be read until
            # the caller asked for k2.
            assert second_chunk_read.wait(timeout=30), "chunk 2 was not read in the background"
        outcomes.append(outcome)

    assert [o.source_key for o in outcomes] == keys
    assert {o.outcome for o in outcomes} == {COMMITTED}
    assert len({o.url for o in store.ledger_objects(STREAM)}) == 5
    assert {store.get(sid, k).status for k in keys} == {PartitionStatus.COMPLETED}


def test_a_caller_that_stops_early_leaves_no_lease_held(store: LeaseStore, tmp_path: Path) -> None:
    keys = [f"k{i}" for i in range(4)]
    sid = create(store, keys)
    outcomes = make_runner(store, tmp_path, one_row_each).ingest(keys)
    first = next(outcomes)
    outcomes.close()  # e.g. the run was terminated while handling the first outcome

    assert first.outcome == COMMITTED
    statuses = {k: store.get(sid, k).status for k in keys}
    # The first chunk committed as a whole; the prefetched one was handed back, not committed.
    assert statuses == {
        "k0": PartitionStatus.COMPLETED,
        "k1": PartitionStatus.COMPLETED,
        "k2": PartitionStatus.UNASSIGNED,
        "k3": PartitionStatus.UNASSIGNED,
    }
    assert len(store.ledger_objects(STREAM)) == 2


def test_each_chunks_metrics_are_stored_before_its_outcomes_reach_the_caller(
    store: LeaseStore, tmp_path: Path
) -> None:
    """A run killed while its caller handles a chunk (Dagster records it) has lost no count
    of that chunk or an earlier one."""
    keys = [f"k{i}" for i in range(5)]  # chunks of 2, 2, 1
    sid = create(store, keys)
    stored = [
        store.read_metrics()[sid][m.PARTITIONS_COMPLETED]
        for _ in make_runner(store, tmp_path, one_row_each).ingest(keys)
    ]
    assert stored == [2, 2, 4, 4, 5]


def failing_read(reading: dict[str, list[UnitObject]], lake: Path, attempt: str):  # type: ignore[no-untyped-def]
    if "k2" in reading:
        raise RuntimeError("executor lost")
    return one_row_each(reading, lake, attempt)


def test_a_failed_chunk_is_released_and_reaches_the_caller(
    store: LeaseStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A Spark job that fails (an executor lost for good, a task that cannot write)."""
    keys = [f"k{i}" for i in range(4)]
    sid = create(store, keys)

    seen = []
    try:
        for outcome in make_runner(store, tmp_path, failing_read).ingest(keys):
            seen.append(outcome.source_key)
    except RuntimeError as exc:
        assert str(exc) == "executor lost"
    else:
        raise AssertionError("the failure was swallowed")
    assert seen == ["k0", "k1"]  # nothing of the failed chunk committed
    assert store.get(sid, "k2").status is PartitionStatus.UNASSIGNED
    assert store.get(sid, "k3").status is PartitionStatus.UNASSIGNED
    assert "could not hand back" not in caplog.text  # they were


def test_a_read_ahead_that_fails_after_the_caller_stopped_is_handed_back(
    store: LeaseStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A canceled Dagster run stops the caller and its SparkSession at once: the chunk read
    ahead fails under it. `_read_chunk` hands that chunk's leases back as it fails, so the
    partitions are retried at the next tick — a warning that they wait for their ownership
    timeout would send an operator looking for a delay that does not happen."""
    keys = [f"k{i}" for i in range(4)]
    sid = create(store, keys)
    read_ahead_started, stop_spark = threading.Event(), threading.Event()

    def read_batch(reading: dict[str, list[UnitObject]], lake: Path, attempt: str):  # type: ignore[no-untyped-def]
        if "k2" in reading:
            read_ahead_started.set()
            assert stop_spark.wait(timeout=30)
            raise RuntimeError("Job 1 cancelled because SparkContext was shut down")
        return one_row_each(reading, lake, attempt)

    outcomes = make_runner(store, tmp_path, read_batch).ingest(keys)
    assert next(outcomes).outcome == COMMITTED
    assert read_ahead_started.wait(timeout=30)
    stop_spark.set()
    outcomes.close()

    assert [store.get(sid, k).status for k in keys] == [
        PartitionStatus.COMPLETED,
        PartitionStatus.COMPLETED,
        PartitionStatus.UNASSIGNED,
        PartitionStatus.UNASSIGNED,
    ]
    assert "could not hand back" not in caplog.text


def test_a_caller_that_stops_hands_the_read_ahead_back_before_its_read_ends(
    store: LeaseStore, tmp_path: Path
) -> None:
    """After a canceled run's interrupt the read ahead may end late or never, and the process,
    alive, would renew its leases all the while (a CI run's daemon test saw 50 stay ASSIGNED
    for minutes after the cancel): they go back when the caller stops, before the read ends,
    and nothing of that read is committed."""
    keys = [f"k{i}" for i in range(4)]
    sid = create(store, keys)
    read_ahead_started, read_ahead_may_end = threading.Event(), threading.Event()
    read_batch = held_read_ahead(read_ahead_started, read_ahead_may_end)

    back_while_reading: list[bool] = []

    def watch() -> None:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not back_while_reading:
            if {store.get(sid, k).status for k in ("k2", "k3")} == {PartitionStatus.UNASSIGNED}:
                back_while_reading.append(True)
            time.sleep(0.05)
        read_ahead_may_end.set()

    outcomes = make_runner(store, tmp_path, read_batch).ingest(keys)
    assert next(outcomes).outcome == COMMITTED
    assert read_ahead_started.wait(timeout=30)
    watcher = threading.Thread(target=watch)
    watcher.start()
    outcomes.close()  # waits for the read to end
    watcher.join()

    assert back_while_reading == [True]
    assert [store.get(sid, k).status for k in keys] == [
        PartitionStatus.COMPLETED,
        PartitionStatus.COMPLETED,
        PartitionStatus.UNASSIGNED,
        PartitionStatus.UNASSIGNED,
    ]
    assert len(store.ledger_objects(STREAM)) == 2


def held_read_ahead(started: threading.Event, may_end: threading.Event):  # type: ignore[no-untyped-def]
    """A read whose second chunk (k2, k3) signals `started`, then waits for `may_end`."""

    def read_batch(reading: dict[str, list[UnitObject]], lake: Path, attempt: str):  # type: ignore[no-untyped-def]
        if "k2" in reading:
            started.set()
            assert may_end.wait(timeout=30)
        return one_row_each(reading, lake, attempt)

    return read_batch


class Interrupted(BaseException):
    """What Dagster raises in a run's main thread when the run is canceled (its
    DagsterExecutionInterruptedError): not an Exception, anywhere, even inside a wait."""


def test_an_interrupt_while_waiting_for_the_read_ahead_hands_it_back(
    store: LeaseStore, tmp_path: Path
) -> None:
    """A canceled run is interrupted wherever its main thread is — often waiting for the
    chunk read ahead (the daemon test's cancel hit exactly that). That chunk's leases are
    handed back once its read ends, not left to expire."""
    keys = [f"k{i}" for i in range(4)]
    sid = create(store, keys)
    read_ahead_started, read_ahead_may_end = threading.Event(), threading.Event()
    read_batch = held_read_ahead(read_ahead_started, read_ahead_may_end)

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    def cancel_while_waiting() -> None:
        assert read_ahead_started.wait(timeout=30)
        time.sleep(0.3)  # the main thread is handed k0 and k1, then waits for the read ahead
        signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR1)
        time.sleep(0.3)
        read_ahead_may_end.set()

    previous = signal.signal(signal.SIGUSR1, interrupt)
    canceller = threading.Thread(target=cancel_while_waiting)
    seen = []
    try:
        canceller.start()
        with pytest.raises(Interrupted):
            for outcome in make_runner(store, tmp_path, read_batch).ingest(keys):
                seen.append(outcome.source_key)
    finally:
        read_ahead_may_end.set()
        canceller.join()
        signal.signal(signal.SIGUSR1, previous)

    assert seen == ["k0", "k1"]
    assert [store.get(sid, k).status for k in keys] == [
        PartitionStatus.COMPLETED,
        PartitionStatus.COMPLETED,
        PartitionStatus.UNASSIGNED,
        PartitionStatus.UNASSIGNED,
    ]
