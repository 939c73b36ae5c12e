"""The merge sensor and the merge asset against a real Dagster instance, store and Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from dagster import (
    AssetSelection,
    DagsterRunStatus,
    RunRequest,
    SensorResult,
    build_sensor_context,
    materialize,
)

from coordination_assets.compaction import (
    build_merge_asset,
    build_merge_checks,
    build_merge_sensor,
    dates_for,
)
from coordination_assets.ingestion import build_ingestion_asset
from resources.coordination.items import ItemType
from resources.dagster_resources.runs import DUE_ONLY_TAG, MERGE_TAG, RANGE_END, RANGE_START
from resources.ingestion.sample_data import write_sample_sources
from resources.ledger.merge import chain_problems
from tests.dagster.test_discovery_sensor import queue, tick
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams

DATES = ["2026-01-01", "2026-01-02", "2026-01-03"]


@pytest.fixture
def env(tmp_path: Path) -> PipelineEnv:
    from resources.stores.settings import StoreSettings

    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{tmp_path / 'sources'}", f"file://{tmp_path / 'lake'}"
    )
    return PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)


def ingest(env: PipelineEnv, instance, resources, objects: int = 9) -> None:
    """Sample objects over three past days, ingested through the discovery sensor's run."""
    write_sample_sources(env.root / "sources", objects=objects, records_per_object=20)
    (run,) = tick(env, instance, resources, None).run_requests
    outcome = materialize(
        [build_ingestion_asset(STREAM)], instance=instance, resources=resources, tags=run.tags
    )
    assert outcome.success


def merge_tick(instance, resources, cursor: str | None = None) -> SensorResult:
    with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
        result = build_merge_sensor(STREAM)(ctx)
    assert isinstance(result, SensorResult)
    for request in result.dynamic_partitions_requests or []:
        instance.add_dynamic_partitions(dates_for(STREAM).name, request.partition_keys)
    return result


def run_merge(instance, resources, request: RunRequest):
    return materialize(
        [build_merge_asset(STREAM)], instance=instance, resources=resources, tags=request.tags
    )


def test_closed_days_are_merged_in_one_run_and_then_nothing_is_due(env: PipelineEnv, spark):
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    result = merge_tick(instance, resources)
    assert list(instance.get_dynamic_partitions(dates_for(STREAM).name)) == DATES
    (request,) = result.run_requests
    assert request.tags[MERGE_TAG] == STREAM and request.tags[DUE_ONLY_TAG] == "true"
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (DATES[0], DATES[-1])
    store = env.store()
    assert all(p.closed for p in store.table_partitions(STREAM))  # their days ended long ago

    # With its checks, as a Materialize from the UI plans them: the asset's step evaluates them.
    checks = build_merge_checks(STREAM)
    outcome = materialize(
        [build_merge_asset(STREAM), *checks],
        instance=instance,
        resources=resources,
        tags=request.tags,
    )
    assert outcome.success
    planned = {e.check_name: e.passed for e in outcome.get_asset_check_evaluations()}
    assert planned == {key.name: True for c in checks for key in c.check_keys}, planned
    events = outcome.get_asset_materialization_events()
    assert sorted(e.partition for e in events) == DATES
    for event in events:
        metadata = {k: v.value for k, v in event.materialization.metadata.items()}
        part = store.table_partition(STREAM, event.partition)
        assert metadata["objects_merged"] == part.next_object_id - 1 == 3
        assert metadata["rows"] == sum(
            o.row_count for o in store.ledger_objects(STREAM, event.partition)
        )
        # The row count Dagster plots is the partition's merged rows (here one merge: the same).
        assert metadata["dagster/row_count"] == metadata["partition_rows"] == metadata["rows"]
        assert metadata["upper"] == part.merged_upper == part.desired_manifest_version
        assert part.merge_due_at_ms is None
        assert chain_problems(store.merge_ranges(STREAM, part.dt), part.next_object_id) == []

    again = merge_tick(instance, resources, result.cursor)
    assert not again.run_requests and again.skip_reason is not None

    check_run = materialize(
        [build_merge_asset(STREAM), *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
    )
    evaluations = check_run.get_asset_check_evaluations()
    assert len(evaluations) == 4 and all(e.passed for e in evaluations)


def test_a_merge_in_flight_or_a_held_job_is_not_asked_for_twice(env: PipelineEnv, spark):
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    first = merge_tick(instance, resources)
    (request,) = first.run_requests
    queued = queue(instance, request)
    assert not merge_tick(instance, resources, first.cursor).run_requests
    instance.report_run_failed(queued)  # failed before it merged anything: asked for again
    (retry,) = merge_tick(instance, resources, first.cursor).run_requests
    assert retry.tags[RANGE_START] == DATES[0]

    store = env.store()
    job_sid = store.source_identifier(STREAM, ItemType.MERGE_JOB)
    store.create_partitions(job_sid, [DATES[0]])
    store.acquire(job_sid, DATES[0], "another-merge", 60)  # a live merge holds that job
    (request,) = merge_tick(instance, resources, first.cursor).run_requests
    assert (request.tags[RANGE_START], request.tags[RANGE_END]) == (DATES[1], DATES[2])


def test_merges_dagster_missed_are_recorded_without_a_run(env: PipelineEnv, spark):
    """A merge run killed after the store committed its merges, before Dagster recorded them:
    the next tick records them from the ledger, once."""
    instance, resources = env.instance(), env.resources()
    ingest(env, instance, resources)
    first = merge_tick(instance, resources)
    (request,) = first.run_requests
    lake, coordination = resources["lake"], resources["coordination"]
    runner = lake.merge_runner(STREAM, coordination, resources["spark"], owner="killed-run")
    assert [o.outcome for o in runner.merge(DATES[:2])] == ["merged", "merged"]
    instance.report_run_failed(queue(instance, request, DagsterRunStatus.STARTED))

    result = merge_tick(instance, resources, first.cursor)
    assert sorted(e.partition for e in result.asset_events) == DATES[:2]
    store = env.store()
    for event in result.asset_events:
        assert (
            event.metadata["upper"].value
            == store.table_partition(STREAM, event.partition).merged_upper
        )
        instance.report_runless_asset_event(event)
    (retry,) = result.run_requests  # the third day is still due
    assert retry.tags[RANGE_START] == retry.tags[RANGE_END] == DATES[2]
    assert not merge_tick(instance, resources, result.cursor).asset_events
