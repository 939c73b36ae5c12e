"""Each schema-evolution mode through Dagster: a sensor's range run, and a Materialize of one
partition as the UI launches it (no sensor tags), on a real instance and store."""

from __future__ import annotations

import json
from pathlib import Path

from dagster import DagsterInstance, materialize

from coordination_assets.ingestion import build_ingestion_asset, partitions_for
from resources.dagster_resources.asset_metadata import COLUMN_SCHEMA
from resources.ingestion.partition_keys import to_partition_key
from resources.stores.settings import StoreSettings
from tests.dagster.test_discovery_sensor import tick
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams


def record(i: int, **extra: object) -> str:
    return json.dumps(
        {
            "event_id": f"e{i}",
            "user_id": "u",
            "amount": 1.5,
            "event_time": "2026-01-01T10:00:00Z",
            **extra,
        }
    )


def pipeline(tmp_path: Path, mode: str) -> PipelineEnv:
    tmp_path.mkdir(parents=True, exist_ok=True)
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{tmp_path / 'sources'}", f"file://{tmp_path / 'lake'}"
    )
    streams.write_text(streams.read_text() + f"    schema_evolution: {mode}\n")
    src = tmp_path / "sources"
    src.mkdir()
    (src / "a.jsonl").write_text(record(1) + "\n" + record(2) + "\n")
    (src / "b.jsonl").write_text(record(3, country="NZ") + "\n" + record(4, country="FR") + "\n")
    return PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)


def sensor_run(env: PipelineEnv, instance: DagsterInstance):
    resources = env.resources()
    (run,) = tick(env, instance, resources, None).run_requests
    return materialize(
        [build_ingestion_asset(STREAM)],
        instance=instance,
        resources=resources,
        tags=run.tags,
        raise_on_error=False,
    )


def metadata_of(result, key: str) -> dict:
    for event in result.get_asset_materialization_events():
        if event.materialization.partition == key:
            return {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
    raise AssertionError(f"no materialization of {key}")


def test_add_through_a_sensor_run_shows_the_new_columns_in_dagster(tmp_path: Path, spark) -> None:
    env = pipeline(tmp_path, "add")
    instance = env.instance()
    result = sensor_run(env, instance)
    assert result.success
    b = metadata_of(result, to_partition_key("b.jsonl"))
    assert b["schema_version"] == 2 and b["new_columns"] == "country"
    assert [c.name for c in b[COLUMN_SCHEMA].columns][-1] == "country"
    assert metadata_of(result, to_partition_key("a.jsonl"))["schema_version"] in (1, 2)
    rows = {r["event_id"]: r for r in env.table_rows()}
    assert rows["e3"]["country"] == "NZ" and rows["e1"].get("country") is None


def test_ignore_and_rescue_through_a_sensor_run(tmp_path: Path, spark) -> None:
    for mode in ("ignore", "rescue"):
        env = pipeline(tmp_path / mode, mode)
        result = sensor_run(env, env.instance())
        assert result.success
        b = metadata_of(result, to_partition_key("b.jsonl"))
        rows = {r["event_id"]: r for r in env.table_rows()}
        if mode == "ignore":
            assert b["unknown_fields"] == "country: 2" and "country" not in rows["e3"]
        else:
            assert json.loads(rows["e3"]["_rescued"]) == {"country": "NZ"}
            assert rows["e1"]["_rescued"] is None


def test_fail_through_a_ui_materialize_of_one_partition_names_the_fields(
    tmp_path: Path, spark
) -> None:
    env = pipeline(tmp_path, "fail")
    instance = env.instance()
    tick(env, instance, env.resources(), None)  # discovery only: the partitions exist
    keys = instance.get_dynamic_partitions(partitions_for(STREAM).name)
    key = to_partition_key("b.jsonl")
    assert key in keys
    result = materialize(
        [build_ingestion_asset(STREAM)],
        instance=instance,
        resources=env.resources(),
        partition_key=key,
        raise_on_error=False,
    )
    assert not result.success
    errors = [getattr(e.event_specific_data, "error", None) for e in result.all_events]
    messages = " ".join(str(err.message) for err in errors if err is not None)
    assert "country (string, first at line 1)" in messages
    assert "schema_evolution" in messages
    store = env.store()
    (item,) = [
        i for i in store.iter_items(store.source_identifier(STREAM)) if i.partition_key == "b.jsonl"
    ]
    assert item.status.value == "CLOSED" and "country" in (item.progress or {}).get("failed", "")
