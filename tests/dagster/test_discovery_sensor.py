"""The discovery sensor against a real Dagster instance and a real store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from dagster import (
    PartitionKeyRange,
    SensorResult,
    build_sensor_context,
    materialize,
    partition_loading_context,
)

from coordination_assets.ingestion import (
    EXPECTED_COUNT,
    RANGE_END,
    RANGE_START,
    build_discovery_sensor,
    build_ingestion_asset,
    main_job_cursor_key,
    partitions_for,
)
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import PartitionStatus
from resources.errors import ConfigError
from resources.ingestion.partition_keys import from_partition_key, to_partition_key
from resources.ingestion.sample_data import write_sample_sources
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


def tick(env: PipelineEnv, instance, resources, cursor: str | None):
    sensor = build_discovery_sensor(STREAM)
    with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        result = sensor(ctx)
    if isinstance(result, SensorResult):
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(partitions_for(STREAM).name, request.partition_keys)
    return result


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
    assert result.cursor == "2026/01/03/obj-09999.jsonl"


def test_nothing_new_is_constant_store_work(env: PipelineEnv) -> None:
    write_sample_sources(env.root / "sources", objects=50, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    cursor = tick(env, instance, resources, None).cursor
    counting = CountingStore(resources["coordination"].store)
    resources["coordination"]._store = counting
    calls = []
    for _ in range(3):
        counting.calls.clear()
        result = tick(env, instance, resources, cursor)
        assert not result.run_requests and result.cursor == cursor
        calls.append(list(counting.calls))
    # supplier lease (get + acquire), release, and the bounded look for work to retry
    assert calls[0] == calls[1] == calls[2] and len(calls[0]) <= 4


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


def test_work_left_behind_is_requested_again(env: PipelineEnv) -> None:
    write_sample_sources(env.root / "sources", objects=4, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)
    store = env.store()
    sid = store.source_identifier(STREAM)
    crashed, unreadable, done, _ = (i.partition_key for i in store.iter_items(sid))
    store.acquire(sid, crashed, "dead-run", 0.001)  # its run died holding the lease
    bad = store.acquire(sid, unreadable, "run", 60)
    store.close(bad.token, ReopenBackoff.fixed(0.001), max_closed_count=5, reason="404")
    store.complete(store.acquire(sid, done, "run", 60).token)
    time.sleep(0.05)
    again = tick(env, instance, resources, first.cursor)
    retried = {r.partition_key: r.run_key for r in again.run_requests}
    assert {from_partition_key(k) for k in retried} == {crashed, unreadable}
    # run key: ...:epoch:closed count:retry window
    assert retried[to_partition_key(crashed)].split(":")[-3:-1] == ["1", "0"]  # never closed
    assert retried[to_partition_key(unreadable)].split(":")[-3:-1] == ["1", "1"]  # closed once
    assert not again.dynamic_partitions_requests  # nothing new was discovered


def test_a_partition_no_run_took_is_requested_again(env: PipelineEnv, spark) -> None:
    """The run a tick asked for failed before it acquired anything (or was canceled while
    queued): its partitions stay UNASSIGNED behind the cursor, and must not stay forever."""
    env.unassigned_retry_after_s = 1.0
    write_sample_sources(env.root / "sources", objects=2, records_per_object=1)
    instance, resources = env.instance(), env.resources()
    first = tick(env, instance, resources, None)  # its range run never starts
    keys = instance.get_dynamic_partitions(partitions_for(STREAM).name)
    assert not tick(env, instance, resources, first.cursor).run_requests  # a run may be coming
    time.sleep(1.1)
    assert len(env.coordination().lease_health(STREAM).waiting) == 2
    again = tick(env, instance, resources, first.cursor)
    assert sorted(r.partition_key for r in again.run_requests) == sorted(keys)
    time.sleep(1.1)  # that retry run failed before taking its lease too: asked for again
    later = tick(env, instance, resources, first.cursor)
    assert {r.run_key for r in later.run_requests}.isdisjoint(r.run_key for r in again.run_requests)

    run = next(r for r in later.run_requests if r.partition_key == keys[0])
    outcome = materialize(
        [build_ingestion_asset(STREAM)],
        instance=instance,
        resources=resources,
        partition_key=run.partition_key,
    )
    assert outcome.success
    time.sleep(1.1)
    last = tick(env, instance, resources, first.cursor)
    assert [r.partition_key for r in last.run_requests] == [keys[1]]
    assert env.coordination().lease_health(STREAM).waiting == [
        f"{env.store().source_identifier(STREAM)} / {from_partition_key(keys[1])} "
        "(UNASSIGNED, no run took it)"
    ]


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
    assert [r.tags[EXPECTED_COUNT] for r in first.run_requests] == ["2"]


def test_a_bad_retry_window_fails_the_tick_naming_the_field(env: PipelineEnv) -> None:
    env.unassigned_retry_after_s = 0
    with pytest.raises(Exception) as err:  # Dagster wraps it: "Error executing resource_fn"
        tick(env, env.instance(), env.resources(), None)
    cause = err.value.__cause__
    assert isinstance(cause, ConfigError) and cause.field == "unassigned_retry_after_seconds"
    assert "must be at least 1" in str(cause)
