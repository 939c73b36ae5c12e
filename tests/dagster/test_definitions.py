"""The code location loads and validates, its assets show what the UI shows about them, and its
coordination asset and check run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from dagster import AssetCheckKey, DefaultScheduleStatus, MetadataValue, materialize

from coordination_assets.coordination_status import (
    coordination_status,
    coordination_status_schedule,
    lease_health,
)
from coordination_assets.definitions import build_definitions
from resources.coordination.backoff import ReopenBackoff
from resources.dagster_resources.asset_metadata import COLUMN_SCHEMA, ROW_COUNT, with_row_count
from resources.dagster_resources.coordination import CoordinationResource
from resources.errors import ConfigError
from resources.streams import LakeSettings

ROOT = Path(__file__).resolve().parents[2]


def test_dagster_definitions_validate(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LEASEHOLD_DATA_DIR": str(tmp_path)}
    dagster = Path(sys.executable).with_name("dagster")
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All code locations passed validation" in result.stdout + result.stderr


def test_coordination_status_asset_and_lease_health(tmp_path: Path) -> None:
    coordination = CoordinationResource(sqlite_path=str(tmp_path / "c.db"))
    store = coordination.store
    sid = coordination.source_identifier("events")
    store.create_partitions(sid, ["a", "b"])
    store.close(
        store.acquire(sid, "b", "w", 60).token, ReopenBackoff.fixed(60), 0, reason="unreadable: 404"
    )
    store.flush_metrics()
    result = materialize(
        [coordination_status, lease_health], resources={"coordination": coordination}
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("coordination_status")
    assert mat.metadata["events|partition/UNASSIGNED"].value == 1
    assert mat.metadata["events|partition/partitionsClosed"].value == 1
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.metadata["dead_letters"].value == 1


def test_coordination_status_and_lease_health_run_on_a_schedule(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """They used to run only when started by hand (issue 23): a schedule, on by default,
    materializes the status asset with its check."""
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path))
    defs = build_definitions()
    schedule = defs.resolve_schedule_def(coordination_status_schedule.name)
    assert schedule.default_status == DefaultScheduleStatus.RUNNING
    job = defs.resolve_job_def(schedule.job_name)
    assert job.asset_layer.asset_graph.get_all_asset_keys() >= {coordination_status.key}
    assert AssetCheckKey(coordination_status.key, "lease_health") in (
        job.asset_layer.asset_graph.asset_check_keys
    )


def test_every_asset_shows_owners_kinds_group_and_columns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the UI shows about each asset, from the settings: owners (LEASEHOLD_ASSET_OWNERS),
    the store's and Glue's kinds, the stream's columns; descriptions on every asset and check.
    The GraphQL test (test_ui_graphql.py) sees the same through the webserver, slowly."""
    from tests.support.pipeline_env import write_streams

    streams = write_streams(tmp_path / "streams.yaml", "file:///src", "file:///lake")
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(streams))
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("LEASEHOLD_ASSET_OWNERS", "team:lake, ops@example.com")
    monkeypatch.setenv("LEASEHOLD_CATALOG", "glue")
    defs = build_definitions()
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    assert set(specs) == {"coordination_status", "events/ingested", "events/merged", "events/table"}
    kinds = {
        "coordination_status": {"sqlite"},
        "events/ingested": {"spark", "parquet", "sqlite"},
        "events/merged": {"spark", "parquet", "sqlite"},
        "events/table": {"parquet", "sqlite", "glue"},
    }
    for key, spec in specs.items():
        assert spec.description, key
        assert spec.owners == ["team:lake", "ops@example.com"], key
        assert spec.kinds == kinds[key], key
        assert spec.group_name == ("coordination" if key == "coordination_status" else "events")
        if key != "coordination_status":
            schema = spec.metadata[COLUMN_SCHEMA]
            assert [(c.name, c.type) for c in schema.columns] == [
                ("event_id", "string"),
                ("user_id", "string"),
                ("amount", "double"),
                ("event_time", "timestamp"),
            ]
            nullable = {c.name: c.constraints.nullable for c in schema.columns}
            assert nullable == {
                "event_id": False,
                "user_id": True,
                "amount": True,
                "event_time": False,
            }
    for checks_def in defs.asset_checks or []:
        for spec in checks_def.check_specs:
            assert spec.description, spec.key


def test_an_owner_dagster_would_reject_fails_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LEASEHOLD_ASSET_OWNERS", "data platform")
    with pytest.raises(ConfigError) as err:
        LakeSettings.from_env()
    assert err.value.field == "asset_owners"


def test_row_count_is_the_metadata_dagster_plots() -> None:
    metadata = with_row_count({"rows_written": 30}, 30)
    assert metadata[ROW_COUNT] == MetadataValue.int(30)
    assert ROW_COUNT == "dagster/row_count"


@pytest.fixture
def streams(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One stream's streams file, which the definitions are built from."""
    from tests.support.pipeline_env import write_streams

    path = write_streams(tmp_path / "streams.yaml", "file:///src", "file:///lake")
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(path))
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path))
    return path


def test_a_source_cleanup_job_and_schedule_only_for_streams_with_it(streams: Path) -> None:
    names = {j.name for j in build_definitions().jobs or []}
    assert "events_gc" in names and "events_source_cleanup" not in names
    text = streams.read_text().replace(
        "    table:", "    source_cleanup: {mode: delete}\n    table:"
    )
    streams.write_text(text)
    defs = build_definitions()
    assert "events_source_cleanup" in {j.name for j in defs.jobs or []}
    schedule = defs.get_schedule_def("events_source_cleanup_hourly")
    assert schedule.cron_schedule == "41 * * * *"
    assert schedule.default_status == DefaultScheduleStatus.RUNNING


@pytest.mark.usefixtures("streams")
def test_every_sensor_ticks_at_the_configured_interval(monkeypatch: pytest.MonkeyPatch) -> None:
    sensors = build_definitions().sensors or []
    assert {s.minimum_interval_seconds for s in sensors} == {30}
    monkeypatch.setenv("LEASEHOLD_SENSOR_INTERVAL_SECONDS", "12")
    sensors = build_definitions().sensors or []
    assert len(sensors) >= 4 and {s.minimum_interval_seconds for s in sensors} == {12}
    monkeypatch.setenv("LEASEHOLD_SENSOR_INTERVAL_SECONDS", "2")  # under the daemon's own loop
    with pytest.raises(ConfigError) as err:
        build_definitions()
    assert err.value.field == "sensor_interval_seconds"
