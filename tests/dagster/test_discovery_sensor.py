"""The discovery sensor against a real Dagster instance and a real store."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from dagster import (
    DagsterRun,
    DagsterRunStatus,
    PartitionKeyRange,
    RunRequest,
    SensorEvaluationContext,
    SensorResult,
    build_sensor_context,
    materialize,
    partition_loading_context,
)
from dagster._core.definitions.instigation_logger import get_instigation_log_records
from dagster._core.utils import make_new_run_id

from coordination_assets.ingestion import (
    build_discovery_sensor,
    build_ingestion_asset,
    main_job_cursor_key,
    partitions_for,
)
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import PartitionStatus
from resources.dagster_resources.discovery_tick import SensorCursor
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    EXPECTED_COUNT,
    PROCESS_TAG,
    RANGE_END,
    RANGE_START,
    RETRY_TAG,
    STREAM_TAG,
    apply_partition_requests,
    process_identity,
)
from resources.errors import ConfigError
from resources.ingestion.partition_keys import from_partition_key
from resources.ingestion.sample_data import write_sample_sources
from resources.ingestion.unit_progress import add_counts, quarantine_table
from resources.ledger.model import SmallObject
from tests.ingestion.test_discovery import CountingStore
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams

DAGSTER_TICK_LIMIT_S = 60  # Dagster kills a sensor tick that runs longer


@pytest.fixture
def env(tmp_path: Path) -> PipelineEnv:
    from resources.stores.settings import StoreSettings

    streams = write_streams(
        tmp_path / "streams.yaml",
        f"file://{tmp_path / 'sources'}",
        f"file://{tmp_path / 'lake'}",
    )
    (tmp_path / "sources").mkdir()
    return PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)


TICK_LOG_KEY = ["test", "events_discovery", "tick"]


def tick(env: PipelineEnv, instance, resources, cursor: str | None, log_key=None):
    """One evaluation; with `log_key`, its log is kept as the daemon keeps a tick's."""
    sensor = build_discovery_sensor(STREAM)
    context = (
        SensorEvaluationContext(
            instance_ref=instance.get_ref(),
            instance=instance,
            cursor=cursor,
            log_key=log_key,
            resources=resources,
            sensor_name=f"{STREAM}_discovery",
            repository_name="test",
        )
        if log_key
        else build_sensor_context(instance=instance, cursor=cursor, resources=resources)
    )
    with context as ctx:
        result = sensor(ctx)
    if isinstance(result, SensorResult):
        apply_partition_requests(instance, result.dynamic_partitions_requests or [])
    return result


def queue(instance, request: RunRequest, status=DagsterRunStatus.NOT_STARTED) -> DagsterRun:
    """What the daemon does with a tick's run request: a run in the run storage."""
    return instance.add_run(
        DagsterRun(
            job_name="__ASSET_JOB", run_id=make_new_run_id(), tags=request.tags, status=status
        )
    )


def first_tick(env: PipelineEnv, objects: int):
    """`objects` one-record sources, discovered by a first tick that plans one range run."""
    write_sample_sources(env.root / "sources", objects=objects, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)
    (planned,) = first.run_requests
    return instance, resources, first, planned


def discovery_cursor(result) -> str | None:
    return SensorCursor.parse(result.cursor).discovery


def test_a_tick_over_ten_thousand_objects(env: PipelineEnv) -> None:
    sources = env.root / "sources"
    for i in range(10_000):
        day = sources / f"2026/01/{1 + i // 4000:02d}"
        day.mkdir(parents=True, exist_ok=True)
        (day / f"obj-{i:05d}.jsonl").write_text("{}\n")
    instance, resources = env.instance(), env.resources()
    started = time.monotonic()
    result = tick(env, instance, resources, None)
    elapsed = time.monotonic() - started
    print(f"10,000-object discovery tick: {elapsed:.1f} s")
    assert elapsed < DAGSTER_TICK_LIMIT_S
    runs = result.run_requests
    assert len(runs) == 5  # bounded: 2,000 partitions per run
    partitions = partitions_for(STREAM)
    covered = 0
    for run in runs:
        with partition_loading_context(dynamic_partitions_store=instance):
            keys = partitions.get_partition_keys_in_range(
                PartitionKeyRange(run.tags[RANGE_START], run.tags[RANGE_END])
            )
        assert len(keys) == int(run.tags[EXPECTED_COUNT]) == 2000
        covered += len(keys)
    assert covered == 10_000
    store = env.store()
    assert len(list(store.iter_items(store.source_identifier(STREAM)))) == 10_000
    assert discovery_cursor(result) == "2026/01/03/obj-09999.jsonl"


def test_nothing_new_is_constant_store_work(env: PipelineEnv) -> None:
    write_sample_sources(env.root / "sources", objects=50, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)
    for run in first.run_requests:
        queue(instance, run)
    cursor = first.cursor
    counting = CountingStore(resources["coordination"].store)
    resources["coordination"]._store = counting
    calls = []
    for _ in range(3):
        counting.calls.clear()
        result = tick(env, instance, resources, cursor)
        assert not result.run_requests and result.cursor == cursor
        calls.append(list(counting.calls))
    # supplier lease (get + acquire), release, and the bounded look for work to retry
    assert calls[0] == calls[1] == calls[2] and len(calls[0]) <= 4, calls[0]


AWKWARD = [
    "a b/with space.jsonl",
    "comma,separated.jsonl",
    "pipe|bucket|key.jsonl",
    "[brackets].jsonl",
    "dots.../more...jsonl",  # (names starting with '.' are hidden files, never sources)
    "ünïcødé/日本語.jsonl",
    "100% done.jsonl",
]


def test_awkward_keys_round_trip_through_ingestion(env: PipelineEnv, spark) -> None:
    sources = env.root / "sources"
    for i, name in enumerate(AWKWARD):
        path = sources / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f'{{"event_id": "e{i}", "user_id": "u", "amount": 1, '
            f'"event_time": "2026-01-0{1 + i % 3}T00:00:00Z"}}\n'
        )
    instance, resources = env.instance(), env.resources()
    result = tick(env, instance, resources, None)
    (run,) = result.run_requests
    keys = instance.get_dynamic_partitions(partitions_for(STREAM).name)
    assert sorted(from_partition_key(k) for k in keys) == sorted(AWKWARD)
    assert not any("..." in k or "|" in k for k in keys)
    outcome = materialize(
        [build_ingestion_asset(STREAM)], instance=instance, resources=resources, tags=run.tags
    )
    assert outcome.success
    materialized = {e.partition for e in outcome.get_asset_materialization_events()}
    assert {from_partition_key(k) for k in materialized} == set(AWKWARD)
    store = env.store()
    items = {i.partition_key: i.status for i in store.iter_items(store.source_identifier(STREAM))}
    assert items == dict.fromkeys(AWKWARD, PartitionStatus.COMPLETED)
    assert sorted(r["event_id"] for r in env.table_rows()) == [f"e{i}" for i in range(7)]


def test_work_left_behind_is_requested_at_once_in_one_range(env: PipelineEnv) -> None:
    instance, resources, first, planned = first_tick(env, objects=5)
    store = env.store()
    sid = store.source_identifier(STREAM)
    crashed, unreadable, done, handed_back, untouched = (
        i.partition_key for i in store.iter_items(sid)
    )
    run = queue(instance, planned, DagsterRunStatus.STARTED)
    store.acquire(sid, crashed, "dead-run", 0.001)  # its owner died holding the lease
    bad = store.acquire(sid, unreadable, "run", 60)
    store.close(bad.token, ReopenBackoff.fixed(0.001), max_closed_count=5, reason="404")
    store.complete(store.acquire(sid, done, "run", 60).token)
    store.give_up(store.acquire(sid, handed_back, "run", 60).token)
    time.sleep(0.05)
    # The run is still going: it reaches the UNASSIGNED partitions itself, but an expired
    # lease and a reopened CLOSED item are behind it.
    (again,) = tick(env, instance, resources, first.cursor).run_requests
    assert again.tags[RETRY_TAG] == "true" and again.tags[STREAM_TAG] == STREAM
    assert [from_partition_key(again.tags[k]) for k in (RANGE_START, RANGE_END)] == [
        crashed,
        unreadable,
    ]
    # The run was canceled: everything not complete is requested at once, in ONE range
    # (the complete partition inside it costs the asset one refused acquisition).
    instance.report_run_canceled(run)
    (after_cancel,) = tick(env, instance, resources, first.cursor).run_requests
    assert [from_partition_key(after_cancel.tags[k]) for k in (RANGE_START, RANGE_END)] == [
        crashed,
        untouched,
    ]
    assert after_cancel.tags[EXPECTED_COUNT] == "5"
    assert after_cancel.run_key != again.run_key
    # Asked again while nothing changed: the same run key (the daemon runs a key once) ...
    assert tick(env, instance, resources, first.cursor).run_requests[0].run_key == (
        after_cancel.run_key
    )
    # ... and once that run is queued, not asked for at all.
    queue(instance, after_cancel)
    assert not tick(env, instance, resources, first.cursor).run_requests


def test_a_dead_runs_partitions_are_retried_and_it_is_marked_failed(env: PipelineEnv) -> None:
    write_sample_sources(env.root / "sources", objects=3, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)
    (planned,) = first.run_requests
    dead = subprocess.run(
        [
            sys.executable,
            "-c",
            "from resources.dagster_resources.runs import process_identity;"
            "print(process_identity())",
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    run = queue(instance, planned, DagsterRunStatus.STARTED)
    instance.add_run_tags(run.run_id, {PROCESS_TAG: dead})
    alive = queue(instance, planned, DagsterRunStatus.STARTED)
    instance.add_run_tags(alive.run_id, {PROCESS_TAG: process_identity()})
    result = tick(env, instance, resources, first.cursor)
    assert instance.get_run_by_id(run.run_id).status is DagsterRunStatus.FAILURE
    assert instance.get_run_by_id(alive.run_id).status is DagsterRunStatus.STARTED
    # the live run still covers the partitions
    assert not result.run_requests
    instance.report_run_failed(instance.get_run_by_id(alive.run_id))
    (retry,) = tick(env, instance, resources, first.cursor).run_requests
    assert retry.tags[EXPECTED_COUNT] == "3"


def test_a_started_retry_run_is_not_doubled_before_it_takes_the_expired_leases(
    env: PipelineEnv,
) -> None:
    """A retry run of expired leases takes them only when its chunk comes up — after its
    Spark session starts, or after earlier chunks. A tick in between must not request the
    same partitions again: that second run only finds them held and fails (seen with the real
    daemon, tests/dagster/test_daemon_recovery.py). A lease that expired before the run was
    created can't be that run's own, so the run will take it."""
    # The same work is asked for again under a new run key once per lease timeout: short,
    # so that a second request would be a second run, not one the daemon drops as a repeat.
    env.ownership_timeout_s = 0.2
    instance, resources, first, planned = first_tick(env, objects=3)
    store = env.store()
    sid = store.source_identifier(STREAM)
    dead = queue(instance, planned, DagsterRunStatus.STARTED)
    for item in list(store.iter_items(sid)):
        store.acquire(sid, item.partition_key, "dead-run", 0.001)  # died holding them
    time.sleep(0.05)
    instance.report_run_failed(dead)
    (retry,) = tick(env, instance, resources, first.cursor).run_requests
    assert retry.tags[RETRY_TAG] == "true" and retry.tags[EXPECTED_COUNT] == "3"
    started = queue(instance, retry, DagsterRunStatus.STARTED)  # not at those chunks yet
    time.sleep(env.ownership_timeout_s)
    assert not tick(env, instance, resources, first.cursor).run_requests
    # A lease that expires after the run was created may be the run's own (it stopped
    # renewing): that one is asked for again.
    (late_key, *_) = [i.partition_key for i in store.iter_items(sid)]
    stale = store.acquire(sid, late_key, "the-run-itself", 0.001)
    assert stale.epoch > 1
    time.sleep(0.05)
    (again,) = tick(env, instance, resources, first.cursor).run_requests
    assert from_partition_key(again.tags[RANGE_START]) == late_key
    assert again.tags[EXPECTED_COUNT] == "1"
    assert instance.get_run_by_id(started.run_id).status is DagsterRunStatus.STARTED


def test_a_redriven_dead_letter_is_requested_at_the_next_tick(env: PipelineEnv) -> None:
    """A dead letter is never asked for; once `leasehold redrive` puts it back (CLOSED, due
    now) the next tick asks for it — even though a run started before the re-drive covers its
    position: that run may be past it, as it was when the unit was dead-lettered."""
    instance, resources, first, planned = first_tick(env, objects=3)
    store = env.store()
    sid = store.source_identifier(STREAM)
    done, broken, other = (i.partition_key for i in store.iter_items(sid))
    started = queue(instance, planned, DagsterRunStatus.STARTED)
    store.complete(store.acquire(sid, done, "run", 60).token)
    bad = store.acquire(sid, broken, "run", 60)
    store.close(bad.token, ReopenBackoff.fixed(1), max_closed_count=0, reason="403 Forbidden")
    store.complete(store.acquire(sid, other, "run", 60).token)
    instance.report_run_failed(started)
    assert not tick(env, instance, resources, first.cursor).run_requests  # dead: left alone
    running = queue(instance, planned, DagsterRunStatus.STARTED)  # a run started before
    time.sleep(0.01)
    store.redrive(sid, broken)
    (retry,) = tick(env, instance, resources, first.cursor).run_requests
    assert retry.tags[RETRY_TAG] == "true" and retry.tags[EXPECTED_COUNT] == "1"
    assert [from_partition_key(retry.tags[k]) for k in (RANGE_START, RANGE_END)] == [broken] * 2
    queue(instance, retry)  # once queued, not asked for again
    assert not tick(env, instance, resources, first.cursor).run_requests
    assert instance.get_run_by_id(running.run_id).status is DagsterRunStatus.STARTED


def test_commits_dagster_missed_are_recorded_without_a_run(env: PipelineEnv) -> None:
    """A run canceled after the store committed some partitions, before Dagster recorded
    them: the next tick records them, with the commit's counts, exactly once."""
    instance, resources, first, planned = first_tick(env, objects=3)
    store = env.store()
    sid = store.source_identifier(STREAM)
    committed = [i.partition_key for i in store.iter_items(sid)][:2]
    for n, key in enumerate(committed):
        token = store.acquire(sid, key, "run", 60).token
        objects = [
            SmallObject(STREAM, "2026-01-01", f"file:///lake/{n}.parquet", 500, 6),
            SmallObject(quarantine_table(STREAM), "2026-11-24", f"file:///q/{n}.parquet", 80, 1),
        ]
        progress: dict[str, object] = {"attempt": "a"}
        add_counts(progress, objects, STREAM)  # as the runner's commit saves them
        store.commit(token, objects, progress_state=json.dumps(progress))
    canceled = queue(instance, planned, DagsterRunStatus.STARTED)
    instance.report_run_canceled(canceled)
    result = tick(env, instance, resources, first.cursor, log_key=TICK_LOG_KEY)
    assert sorted(from_partition_key(e.partition) for e in result.asset_events) == sorted(committed)
    # The commit's own counts, as its run would have reported them.
    assert {
        tuple(e.metadata[k].value for k in ("rows_written", "rows_quarantined", "small_objects"))
        + (e.metadata["bytes"].value, e.metadata["table_partitions"].value)
        for e in result.asset_events
    } == {(6, 1, 1, 500, "2026-01-01")}
    for event in result.asset_events:
        instance.report_runless_asset_event(event)
    assert {
        from_partition_key(k)
        for k in instance.get_materialized_partitions(build_ingestion_asset(STREAM).key)
    } == set(committed)
    (retry,) = result.run_requests  # the third partition is work left behind
    # The tick's own log (what its page in the UI shows: the daemon keeps it) says so.
    said = [r["msg"] for r in get_instigation_log_records(instance, TICK_LOG_KEY)]
    assert any("2 commits recorded" in m for m in said), said
    later = tick(env, instance, resources, result.cursor)
    assert not later.asset_events
    # The canceled run's own page says what became of its range, once (not again at `later`).
    messages = [
        (e.dagster_event.message if e.dagster_event else e.user_message) or ""
        for e in instance.all_logs(canceled.run_id)
    ]
    (summary,) = [m for m in messages if m.startswith("leasehold: this run ended")]
    assert summary.startswith(
        "leasehold: this run ended CANCELED. Of its 3 partitions the store now holds 2 "
        "committed (2 of them recorded now, without a run), 1 free (never taken or handed back"
    ), summary


def test_a_late_object_behind_the_cursor_is_found_by_reconciliation(env: PipelineEnv) -> None:
    # Long enough that the quiet tick below comes within it of the first pass on a loaded
    # machine (with 0.5 s it once started a new pass there, and found the late object early).
    env.reconcile_interval_s = 5.0
    sources = env.root / "sources"
    write_sample_sources(sources, objects=4, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)
    for run in first.run_requests:
        queue(instance, run)
    late = sorted(p.relative_to(sources).as_posix() for p in sources.rglob("*.jsonl"))[0]
    late = late.rsplit("/", 1)[0] + "/0-late.jsonl"  # sorts before every listed key
    (sources / late).write_text('{"event_id": "late"}\n')
    quiet = tick(env, instance, resources, first.cursor)  # the pass in progress ended
    assert not quiet.run_requests
    time.sleep(5.1)
    found = tick(env, instance, resources, quiet.cursor)
    (added,) = found.dynamic_partitions_requests
    assert [from_partition_key(k) for k in added.partition_keys] == [late]
    (run,) = found.run_requests
    assert run.tags[EXPECTED_COUNT] == "1" and from_partition_key(run.tags[RANGE_START]) == late
    assert discovery_cursor(found) == discovery_cursor(first)  # discovery's cursor never moved


def test_a_first_tick_starts_where_leasehold_run_left_off(env: PipelineEnv) -> None:
    """`leasehold run` then `dagster dev` on the same home: the daemon's sensor has no cursor
    of its own yet, and must not list (and run) what `leasehold run` already ingested."""
    sources = env.root / "sources"
    write_sample_sources(sources, objects=2, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    done = tick(env, instance, resources, None)  # what `leasehold run` ticked, then ran
    instance.run_storage.set_cursor_values({main_job_cursor_key(STREAM): done.cursor})
    for name in ("late-a.jsonl", "late-b.jsonl"):
        (sources / "2026/01/03" / name).parent.mkdir(parents=True, exist_ok=True)
        (sources / "2026/01/03" / name).write_text("{}\n")

    first = tick(env, instance, resources, None)
    (added,) = first.dynamic_partitions_requests
    assert [from_partition_key(k) for k in added.partition_keys] == [
        "2026/01/03/late-a.jsonl",
        "2026/01/03/late-b.jsonl",
    ]
    # (the two `leasehold run` ticked but never ran are work left behind: a retry run)
    new = [r for r in first.run_requests if RETRY_TAG not in r.tags]
    assert [r.tags[EXPECTED_COUNT] for r in new] == ["2"]


def test_a_bad_retry_window_fails_the_tick_naming_the_field(env: PipelineEnv) -> None:
    env.unassigned_retry_after_s = 0
    with pytest.raises(Exception) as err:  # Dagster wraps it: "Error executing resource_fn"
        tick(env, env.instance(), env.resources(), None)
    cause = err.value.__cause__
    assert isinstance(cause, ConfigError) and cause.field == "unassigned_retry_after_seconds"
    assert "must be at least 1" in str(cause)


def test_completed_units_leave_the_partitions_after_the_retention(env: PipelineEnv) -> None:
    """Retention: units COMPLETED longer ago than `partition_retention` are deleted from the
    dynamic partitions — read by completion time after the cursor, so each once — while a unit
    a queued run covers and a dead letter stay; reconciliation never adds them back (their
    items still hold their objects)."""
    env.reconcile_interval_s = 0.0
    instance, resources, first, planned = first_tick(env, objects=5)
    store = env.store()
    sid = store.source_identifier(STREAM)
    keys = sorted(i.partition_key for i in store.iter_items(sid))
    for key in keys[:3]:
        store.commit(store.acquire(sid, key, "run", 60).token, [])
    token = store.acquire(sid, keys[3], "run", 60).token
    store.close(token, ReopenBackoff(1, 1), max_closed_count=0, reason="broken")  # dead letter
    lake = env.lake()
    resources["lake"] = LakeResource(
        streams_path=lake.streams_path,
        work_dir=lake.work_dir,
        reconcile_interval_seconds=0.0,
        partition_retention="PT1S",
    )
    partitions = partitions_for(STREAM).name
    time.sleep(1.1)

    queued = queue(instance, planned)  # the range run still covers all five: nothing yet
    held = tick(env, instance, resources, first.cursor)
    assert len(instance.get_dynamic_partitions(partitions)) == 5
    instance.delete_run(queued.run_id)

    retired = tick(env, instance, resources, held.cursor)
    remaining = [from_partition_key(k) for k in instance.get_dynamic_partitions(partitions)]
    assert remaining == keys[3:]  # the dead letter and the unit not done stay
    assert SensorCursor.parse(retired.cursor).retired is not None
    for _ in range(2):  # reconciliation passes and later ticks add nothing back
        retired = tick(env, instance, resources, retired.cursor)
        assert (
            not any(r.partition_keys for r in retired.dynamic_partitions_requests or [])
            if isinstance(retired, SensorResult)
            else True
        )
    assert [from_partition_key(k) for k in instance.get_dynamic_partitions(partitions)] == keys[3:]


def test_units_a_dead_tick_made_become_partitions_once_old_enough(
    env: PipelineEnv, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A tick that created its units and died before Dagster kept its result (with
    notifications, its messages deleted: nothing will announce them again): the units are
    UNASSIGNED in the store and no Dagster partition. Once older than any live tick could be,
    a tick adds them, and the next requests their run."""
    from resources.dagster_resources import discovery_tick

    monkeypatch.setattr(discovery_tick, "ORPHAN_AFTER_S", 0.5)
    instance, resources = env.instance(), env.resources()
    quiet = tick(env, instance, resources, None)
    store = env.store()
    store.create_partitions(store.source_identifier(STREAM), ["2026/01/01/orphan.jsonl"])
    young = tick(env, instance, resources, quiet.cursor)  # maybe another node's live tick
    assert not isinstance(young, SensorResult) or not young.dynamic_partitions_requests
    time.sleep(0.6)
    found = tick(env, instance, resources, quiet.cursor)
    (added,) = found.dynamic_partitions_requests
    assert [from_partition_key(k) for k in added.partition_keys] == ["2026/01/01/orphan.jsonl"]
    retried = tick(env, instance, resources, found.cursor)
    (run,) = retried.run_requests
    assert from_partition_key(run.tags[RANGE_START]) == "2026/01/01/orphan.jsonl"
