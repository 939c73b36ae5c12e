"""Recovery with the real Dagster daemon: a canceled run and a killed run, end to end.

`test_discovery_sensor.py` evaluates ticks by hand and plays the daemon's part itself. Here
`dagster dev` on 127.0.0.1 (webserver, daemon, code server of the repo's `workspace.yaml`) does
everything at its own timing — the sensors tick every 10 s (`LEASEHOLD_SENSOR_INTERVAL_SECONDS`;
30 s by default), the run queue launches run workers, cancellation goes through the code server
— and the test only starts it, adds objects, cancels or SIGKILLs a run, and watches the lease
store and the instance. What it asserts is the
recovery promise of the README: work a run leaves behind is requested again within one lease
timeout and two sensor ticks, in few runs, and Dagster ends up knowing every commit.

The three tests share one `dagster dev` (its start-up and first Spark run are most of the cost)
and run in order; each waits for the state it starts from, so each also runs alone.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
from dagster import (
    AssetCheckKey,
    DagsterEventType,
    DagsterInstance,
    DagsterRunStatus,
    RunRecord,
    RunsFilter,
)
from dagster._core.storage.asset_check_execution_record import AssetCheckExecutionRecordStatus

from coordination_assets.ingestion import CHECKS_TAG, ingestion_asset_key
from resources.coordination.items import ItemType, LeaseItem, PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.dagster_resources.instance import write_instance_yaml
from resources.dagster_resources.runs import (
    EXPECTED_COUNT,
    IN_FLIGHT,
    PROCESS_TAG,
    RETRY_TAG,
    STREAM_TAG,
    process_alive,
)
from resources.ingestion.partition_keys import to_partition_key
from resources.ingestion.sample_data import write_sample_sources
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.dagster_dev import DagsterDev, project_env
from tests.support.pipeline_env import STREAM, write_streams

pytestmark = [pytest.mark.slow, pytest.mark.timeout(660)]

REPO = Path(__file__).resolve().parents[2]
TICK_S = 10  # the sensors' minimum_interval_seconds: 30 s by default, a third of the wait here
LEASE_TIMEOUT_S = 10.0
CHUNK_SIZE = 50  # a run commits chunk after chunk: there is a moment with some, not all, done
OBJECTS = 350  # the canceled run: the first chunk committed leaves 300, so >= 200 handed back
LATE_OBJECTS = 120  # the killed run's
HANDED_BACK_AT_LEAST = 200
MAX_RETRY_RUNS = 3
# A discovery tick's own time and scheduling noise; a run's queueing and start are in its time.
MARGIN_S = 15.0
# Everything, from `dagster dev`'s start to the last check: about 4 minutes on 2 busy cores
# (one CI run needed more than 5 while the other pytest worker ran a chaos test, and on a
# machine at half its speed runs took 30 s to start and the retries outlasted 390 s).
BUDGET_S = 600.0
CHECK_NAMES = ("rows_reconcile", "unique_record_ids", "lease_health")

T = TypeVar("T")


@dataclass
class Daemon:
    """The running `dagster dev`, the instance and store it works on, and a timeline."""

    root: Path
    dev: DagsterDev
    instance: DagsterInstance
    store: LeaseStore
    sources: Path
    t0: float = field(default_factory=time.time)
    timeline: list[tuple[float, str]] = field(default_factory=list)

    def note(self, what: str, at: float | None = None) -> None:
        at = time.time() if at is None else at
        self.timeline.append((at, what))
        print(f"[{at - self.t0:7.1f} s] {what}", flush=True)

    def items(self) -> dict[str, PartitionStatus]:
        sid = self.store.source_identifier(STREAM, ItemType.PARTITION)
        return {i.partition_key: i.status for i in self.store.iter_items(sid)}

    def leases(self, keys: set[str]) -> dict[str, LeaseItem]:
        sid = self.store.source_identifier(STREAM, ItemType.PARTITION)
        return {i.partition_key: i for i in self.store.iter_items(sid) if i.partition_key in keys}

    def counts(self, keys: set[str] | None = None) -> Counter[PartitionStatus]:
        return Counter(s for k, s in self.items().items() if keys is None or k in keys)

    def ingestion_runs(self, **tags: str) -> list[RunRecord]:
        return self.instance.get_run_records(RunsFilter(tags={STREAM_TAG: STREAM, **tags}))

    def checks_runs(self) -> list[RunRecord]:
        return self.instance.get_run_records(RunsFilter(tags={CHECKS_TAG: STREAM}))

    def wait_for(self, what: str, found: Callable[[], T | None], timeout_s: float) -> T:
        """`found()`'s first truthy value, polled; fails naming `what`, with the state. No
        wait goes past the budget of the whole module."""
        deadline = min(time.time() + timeout_s, self.t0 + BUDGET_S)
        while True:
            value = found()
            if value:
                return value
            running = self.dev.running()
            assert running, f"dagster dev exited while waiting for {what}\n{self.report()}"
            assert time.time() < deadline, f"no {what} after {timeout_s:.0f} s\n{self.report()}"
            time.sleep(0.1)

    def report(self) -> str:
        """What a failure needs: store, runs, the end of dagster dev's output."""
        runs = "\n".join(
            f"  {r.dagster_run.run_id[:8]} {r.dagster_run.status.value:9} "
            f"created {r.create_timestamp.timestamp() - self.t0:6.1f} s "
            f"{duration(r)} {tags_of(r)}"
            for r in sorted(
                self.instance.get_run_records(), key=lambda r: r.create_timestamp.timestamp()
            )
        )
        return (
            f"store: {shown(self.counts())}\nruns:\n{runs}\n"
            f"dagster dev output (last lines):\n{self.dev.log_tail(120)}"
        )


def shown(counts: Counter[PartitionStatus]) -> str:
    return ", ".join(f"{n} {s.value}" for s, n in sorted(counts.items()))


def duration(record: RunRecord) -> str:
    if record.start_time is None:
        return "not started"
    queued = record.start_time - record.create_timestamp.timestamp()
    ran = (record.end_time or time.time()) - record.start_time
    return f"started after {queued:4.1f} s, ran {ran:5.1f} s"


def tags_of(record: RunRecord) -> dict[str, str]:
    return {
        k: v
        for k, v in record.dagster_run.tags.items()
        if k in (RETRY_TAG, EXPECTED_COUNT, CHECKS_TAG)
    }


def run_time(records: list[RunRecord]) -> float:
    """The runs' own time, as their records say: creation to end of each — the queue and the
    run worker's start too, which on a busy machine take as long as the work."""
    return sum((r.end_time or time.time()) - r.create_timestamp.timestamp() for r in records)


def created_after(records: list[RunRecord], at: float) -> list[RunRecord]:
    return [r for r in records if r.create_timestamp.timestamp() > at]


def assert_recovered_in_time(
    d: Daemon, *, runs_after: float, since: float, completed_at: float, what: str
) -> None:
    """The retry runs created after `runs_after` ended, few and all successful; everything was
    COMPLETED within one lease timeout + two ticks + those runs' own time of `since`; Dagster
    shows every COMPLETED partition materialized and no run in flight."""
    retries = d.wait_for(
        "end of the retry runs",
        lambda: (
            (rs := created_after(d.ingestion_runs(**{RETRY_TAG: "true"}), runs_after))
            and all(r.dagster_run.is_finished for r in rs)
            and rs
        ),
        timeout_s=60,
    )
    for r in retries:
        d.note(f"retry run {r.dagster_run.run_id[:8]} created", r.create_timestamp.timestamp())
        d.note(f"retry run {r.dagster_run.run_id[:8]} {r.dagster_run.status.value}", r.end_time)
    assert 1 <= len(retries) <= MAX_RETRY_RUNS, d.report()
    # Each asks for work nobody else holds or will take: none finds it held and fails.
    assert {r.dagster_run.status for r in retries} == {DagsterRunStatus.SUCCESS}, d.report()
    allowed = LEASE_TIMEOUT_S + 2 * TICK_S + run_time(retries) + MARGIN_S
    took = completed_at - since
    d.note(f"{what} COMPLETED: {took:.1f} s (allowed {allowed:.1f} s)")
    assert took <= allowed, d.report()

    expected = {to_partition_key(k) for k, s in d.items().items() if s is PartitionStatus.COMPLETED}
    d.wait_for(
        "materialization of every COMPLETED partition",
        lambda: d.instance.get_materialized_partitions(ingestion_asset_key(STREAM)) == expected,
        timeout_s=TICK_S + MARGIN_S,
    )
    d.note("every COMPLETED partition materialized in Dagster")
    assert not [r for r in d.ingestion_runs() if r.dagster_run.status in IN_FLIGHT], d.report()


def status_of(daemon: Daemon, run_id: str) -> DagsterRunStatus:
    run = daemon.instance.get_run_by_id(run_id)
    assert run is not None
    return run.status


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Daemon]:
    root = tmp_path_factory.mktemp("daemon")
    sources, data_dir, home = root / "sources", root / "data", root / "dagster_home"
    write_sample_sources(sources, objects=OBJECTS, records_per_object=20)
    streams = write_streams(root / "streams.yaml", f"file://{sources}", f"file://{root / 'lake'}")
    # This module judges ingestion's recovery: no partition closes and no merge job falls due
    # while it runs, so no merge run (a SparkSession each) competes for the 2 cores and the
    # budget (tests/chaos/test_merge_concurrency.py and test_merge_sensor.py cover merges).
    with streams.open("a") as f:
        f.write("    merge: {close_grace: P3650D, interval: P3650D}\n")
    data_dir.mkdir()
    write_instance_yaml(home)
    env = project_env(
        streams,
        data_dir,
        home,
        lease_timeout_s=LEASE_TIMEOUT_S,
        chunk_size=CHUNK_SIZE,
        sensor_interval_s=TICK_S,
    )
    # The repo's own workspace: its code location loads by a path relative to the file and
    # works in the repo directory; every path leasehold gets here is absolute.
    dev = DagsterDev(
        REPO / "workspace.yaml", env, root / "dagster_dev.log", f"LEASEHOLD_DATA_DIR={data_dir}"
    )
    instance = DagsterInstance.from_config(str(home))
    store = build_store(StoreSettings(sqlite_path=str(data_dir / "leasehold.db")))
    daemon = Daemon(root, dev, instance, store, sources)
    try:
        dev.start()
        daemon.note(f"dagster dev started (pid {dev.process.pid}, port {dev.port})")
        yield daemon
    finally:
        survivors = dev.stop()
        daemon.note("dagster dev stopped")
        print("\ntimeline:")
        for at, what in sorted(daemon.timeline):
            print(f"  {at - daemon.t0:7.1f} s  {what}")
        store.close_store()
        instance.dispose()
        assert not survivors, f"processes of the test's dagster dev survived: {survivors}"


def test_a_canceled_runs_partitions_are_retried_and_its_commits_recorded(daemon: Daemon) -> None:
    d = daemon
    first = d.wait_for(
        "range run of the discovered objects, started",
        lambda: next(
            (
                r
                for r in d.ingestion_runs()
                if RETRY_TAG not in r.dagster_run.tags
                and r.dagster_run.status is DagsterRunStatus.STARTED
            ),
            None,
        ),
        timeout_s=120,
    )
    run_id = first.dagster_run.run_id
    d.note(f"range run {run_id[:8]} started", first.start_time)
    discovered = d.counts().total()
    assert discovered == OBJECTS >= 350
    assert first.dagster_run.tags[EXPECTED_COUNT] == str(OBJECTS)

    at_cancel = d.wait_for(
        "commit of the range run",
        lambda: (c := d.counts())[PartitionStatus.COMPLETED] > 0 and c,
        timeout_s=90,
    )
    d.instance.run_coordinator.cancel_run(run_id)
    canceled_at = time.time()
    d.note(f"cancel requested; store then: {shown(at_cancel)}")
    d.wait_for(
        "CANCELED status of the canceled run",
        lambda: status_of(d, run_id) is DagsterRunStatus.CANCELED,
        timeout_s=60,
    )
    d.note(f"run {run_id[:8]} CANCELED; store: {shown(d.counts())}")
    # A stopping run hands back what it did not commit — the chunk it was committing and the
    # one it read ahead — so the next tick can ask for them at once; its leases would only
    # expire (still ASSIGNED) after LEASE_TIMEOUT_S.
    after = d.wait_for(
        "hand-back of every lease the canceled run held",
        lambda: (c := d.counts())[PartitionStatus.ASSIGNED] == 0 and c,
        timeout_s=LEASE_TIMEOUT_S / 2,
    )
    handed_back = after[PartitionStatus.UNASSIGNED]
    d.note(f"{handed_back} partitions handed back; store: {shown(after)}")
    assert handed_back >= HANDED_BACK_AT_LEAST, d.report()

    d.wait_for(
        "COMPLETED status of every partition",
        lambda: d.counts()[PartitionStatus.COMPLETED] == discovered,
        timeout_s=LEASE_TIMEOUT_S + 2 * TICK_S + 150,
    )
    completed_at = time.time()
    d.note("every partition COMPLETED")
    assert_recovered_in_time(
        d, runs_after=0.0, since=canceled_at, completed_at=completed_at, what="cancel -> all"
    )


def test_a_killed_runs_partitions_are_retried_after_its_leases_expire(daemon: Daemon) -> None:
    d = daemon
    d.wait_for(
        "quiet stream (every partition COMPLETED, no ingestion run in flight)",
        lambda: (
            (c := d.counts()).total() >= OBJECTS
            and c[PartitionStatus.COMPLETED] == c.total()
            and not [r for r in d.ingestion_runs() if r.dagster_run.status in IN_FLIGHT]
        ),
        timeout_s=240,
    )
    late = write_late_objects(d.root, d.sources, LATE_OBJECTS)
    written_at = time.time()
    d.note(f"{len(late)} late objects written")
    run = d.wait_for(
        "range run of the late objects, started in a process of this host",
        lambda: next(
            (
                r
                for r in created_after(d.ingestion_runs(), written_at)
                if r.dagster_run.status is DagsterRunStatus.STARTED
                and PROCESS_TAG in r.dagster_run.tags
            ),
            None,
        ),
        timeout_s=TICK_S + 90,
    )
    run_id, identity = run.dagster_run.run_id, run.dagster_run.tags[PROCESS_TAG]
    d.note(f"range run {run_id[:8]} started ({identity})", run.start_time)
    assert run.dagster_run.tags[EXPECTED_COUNT] == str(LATE_OBJECTS)
    host, pid, _ = identity.rsplit(":", 2)
    assert host == socket.gethostname() and process_alive(identity)

    # Killed between chunks: some committed and the next chunk's leases held. A run acquires a
    # chunk while the one before commits, so on busy cores the first commits can land before it
    # holds the next chunk; a kill then would leave nothing held to judge.
    at_kill = d.wait_for(
        "commit of the late run while it holds the next chunk's leases",
        lambda: (
            (c := d.counts(late))[PartitionStatus.COMPLETED] > 0
            and c[PartitionStatus.ASSIGNED] > 0
            and c
        ),
        timeout_s=90,
    )
    os.kill(int(pid), signal.SIGKILL)
    killed_at = time.time()
    held = {k: i for k, i in d.leases(late).items() if i.status is PartitionStatus.ASSIGNED}
    d.note(f"run {run_id[:8]}'s process {pid} SIGKILLed; late objects then: {shown(at_kill)}")
    d.wait_for(
        "FAILURE status of the killed run",
        lambda: status_of(d, run_id) is DagsterRunStatus.FAILURE,
        timeout_s=TICK_S + MARGIN_S,
    )
    d.note(f"run {run_id[:8]} FAILURE: {failure_reason(d, run_id)}")

    # The leases it held when it died are taken again once they expire, not before.
    taken_at: dict[str, float] = {}

    def late_done() -> bool:
        now = time.time()
        for key, item in d.leases(set(held)).items():
            if item.epoch != held[key].epoch:
                taken_at.setdefault(key, now)
        return d.counts(late)[PartitionStatus.COMPLETED] == len(late)

    d.wait_for(
        "COMPLETED status of every late partition",
        late_done,
        timeout_s=LEASE_TIMEOUT_S + 2 * TICK_S + 150,
    )
    completed_at = time.time()
    d.note("every late partition COMPLETED")
    assert held, f"no late lease held at the kill: {shown(at_kill)}\n{d.report()}"
    kept = {k: d.leases({k}).get(k) for k in set(held) - set(taken_at)}
    assert not kept, f"held at the kill and never taken again: {kept}\n{d.report()}"
    for key, item in held.items():
        assert taken_at[key] >= (item.ownership_timeout_ms or 0) / 1000, (key, d.report())
    d.note(
        f"the {len(held)} leases it held were taken again from "
        f"{min(taken_at.values()) - killed_at:.1f} s after the kill"
    )
    assert_recovered_in_time(
        d, runs_after=killed_at, since=killed_at, completed_at=completed_at, what="kill -> all late"
    )


def failure_reason(daemon: Daemon, run_id: str) -> str:
    """Who noticed: Dagster's code server (its run process exited) or leasehold's discovery
    sensor (`runs.fail_dead_runs`); both say so in an event of the run."""
    messages = [
        e.message
        for e in daemon.instance.all_logs(run_id)
        if e.dagster_event is not None
        and e.dagster_event.event_type
        in (DagsterEventType.ENGINE_EVENT, DagsterEventType.RUN_FAILURE)
        and ("SIGKILL" in e.message or "leasehold" in e.message)
    ]
    return messages[-1][:120] if messages else "no reason recorded"


def test_checks_run_by_the_checks_sensor_are_evaluated(daemon: Daemon) -> None:
    """The checks are skipped in ingestion runs (the asset yields materializations, not its
    output); the checks sensor's own runs, after ingestion runs end, must evaluate them."""
    d = daemon
    first_end = d.wait_for(
        "end of an ingestion run",
        lambda: min((r.end_time for r in d.ingestion_runs() if r.end_time), default=None),
        timeout_s=240,
    )
    runs = d.wait_for(
        "checks run requested by the checks sensor after an ingestion run ended, finished",
        lambda: [
            r
            for r in created_after(d.checks_runs(), first_end)
            if r.dagster_run.status is DagsterRunStatus.SUCCESS
        ],
        timeout_s=TICK_S + 90,
    )
    asset_key = ingestion_asset_key(STREAM)
    for run in runs:
        run_id = run.dagster_run.run_id
        d.note(f"checks run {run_id[:8]} SUCCESS", run.end_time)
        for name in CHECK_NAMES:
            key = AssetCheckKey(asset_key, name)
            history = d.instance.event_log_storage.get_asset_check_execution_history(key, limit=50)
            (record,) = [h for h in history if h.run_id == run_id]
            evaluation = record.evaluation
            assert record.status in (
                AssetCheckExecutionRecordStatus.SUCCEEDED,
                AssetCheckExecutionRecordStatus.FAILED,
            ), f"{name} in run {run_id}: {record.status.value} (not evaluated)"
            assert evaluation is not None and evaluation.check_name == name
            metadata = {k: v.value for k, v in evaluation.metadata.items()}
            d.note(f"  {name}: {record.status.value} {json.dumps(metadata, default=str)[:160]}")
            if name != "lease_health":  # a run in flight makes leases look busy, not wrong
                assert evaluation.passed, f"{name} failed in run {run_id}: {metadata}"


def write_late_objects(root: Path, sources: Path, count: int) -> set[str]:
    """`count` objects after every listed key (a later date), with record ids of their own;
    written elsewhere and moved in whole, so that discovery never lists a half-written one."""
    staging = root / "late-staging"
    day = staging / "2026" / "01" / "09"
    day.mkdir(parents=True)
    for i in range(count):
        lines = [
            json.dumps(
                {
                    "event_id": f"late-{i:05d}-{j:02d}",
                    "user_id": f"u{j}",
                    "amount": float(j),
                    "event_time": f"2026-01-09T{j % 24:02d}:00:00Z",
                }
            )
            for j in range(20)
        ]
        (day / f"late-{i:05d}.jsonl").write_text("\n".join(lines) + "\n")
    shutil.move(str(day), str(sources / "2026" / "01" / "09"))
    return {f"2026/01/09/late-{i:05d}.jsonl" for i in range(count)}
