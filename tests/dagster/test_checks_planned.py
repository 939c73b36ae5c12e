"""Checks are never left SKIPPED (issue 23, points 2 and 3): sensor runs plan none, a run that
plans them (a Materialize from the UI) evaluates them in the asset's own step, and the checks
sensor sees runs without leasehold's tags by what they materialized."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from dagster import (
    AssetCheckKey,
    AssetMaterialization,
    AssetSelection,
    RunRequest,
    SensorResult,
    SkipReason,
    build_sensor_context,
    materialize,
)

from coordination_assets.ingestion import (
    build_checks_sensor,
    build_ingestion_asset,
    build_ingestion_checks,
    ingestion_asset_key,
)
from resources.ingestion.check_suite import CHECKS
from resources.ingestion.sample_data import write_sample_sources
from tests.dagster.test_discovery_sensor import tick
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams


@pytest.fixture
def env(tmp_path: Path) -> PipelineEnv:
    from resources.stores.settings import StoreSettings

    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{tmp_path / 'sources'}", f"file://{tmp_path / 'lake'}"
    )
    write_sample_sources(tmp_path / "sources", objects=6, records_per_object=5)
    return PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)


def test_a_run_that_plans_the_checks_evaluates_them_and_a_sensor_run_plans_none(
    env: PipelineEnv, spark: object
) -> None:
    instance, resources = env.instance(), env.resources()
    (planned,) = tick(env, instance, resources, None).run_requests
    assert planned.asset_check_keys == []  # nothing planned, so nothing shown SKIPPED

    asset, checks = build_ingestion_asset(STREAM), build_ingestion_checks(STREAM)
    # What a Materialize from the UI runs: the asset and, by default, its checks.
    outcome = materialize(
        [asset, *checks], instance=instance, resources=resources, tags=planned.tags
    )
    assert outcome.success
    evaluations = {e.check_name: e for e in outcome.get_asset_check_evaluations()}
    assert set(evaluations) == set(CHECKS)
    assert all(e.passed for e in evaluations.values()), evaluations
    for name in CHECKS:
        record = instance.event_log_storage.get_latest_asset_check_execution_by_key(
            [check_key(name)]
        )[check_key(name)]
        assert record.run_id == outcome.run_id
        assert record.status.value == "SUCCEEDED"

    # Selected without its checks (as sensor runs are): none evaluated by the asset.
    again = materialize(
        [asset, *checks],
        instance=instance,
        resources=resources,
        tags=planned.tags,
        selection=AssetSelection.assets(asset).without_checks(),
    )
    assert again.success and not again.get_asset_check_evaluations()


def check_key(name: str) -> AssetCheckKey:
    return AssetCheckKey(ingestion_asset_key(STREAM), name)


def test_the_checks_sensor_runs_after_anything_materializes_the_streams_assets(
    env: PipelineEnv,
) -> None:
    instance, resources = env.instance(), env.resources()
    sensor = build_checks_sensor(STREAM, build_ingestion_checks(STREAM))

    def evaluate(cursor: str | None) -> SensorResult | SkipReason:
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
            return sensor(ctx)

    first = evaluate(None)  # never checked: due at once
    assert isinstance(first, SensorResult)
    (request,) = first.run_requests
    assert isinstance(request, RunRequest) and request.asset_selection == []
    quiet = evaluate(first.cursor)
    assert isinstance(quiet, SkipReason)
    assert "next periodic one in" in (quiet.skip_message or "")

    # A run without leasehold's tags (launched from the UI), or a runless commit record.
    instance.report_runless_asset_event(
        AssetMaterialization(asset_key=ingestion_asset_key(STREAM), partition=None)
    )
    after = evaluate(first.cursor)
    assert isinstance(after, SensorResult) and len(after.run_requests) == 1
    seen = json.loads(after.cursor or "{}")["events_seen"]
    assert seen > json.loads(first.cursor or "{}")["events_seen"]
    assert isinstance(evaluate(after.cursor), SkipReason)
