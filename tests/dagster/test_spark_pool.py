"""Every run that may start a SparkSession is under one limit, however it was launched (issue 23,
point 2): the limit is a Dagster pool the run queue counts by what a run executes, not a run
tag, which a Materialize or backfill from the UI does not carry. The queue's behaviour with it
(a third run waits) is seen end to end in tests/dagster/test_ui_graphql.py."""

from __future__ import annotations

from pathlib import Path

from dagster import DagsterInstance

from coordination_assets.compaction import merge_asset_key
from coordination_assets.definitions import build_definitions
from coordination_assets.ingestion import ingestion_asset_key
from coordination_assets.instance_check import probe_instance
from coordination_assets.publication import table_asset_key
from resources.dagster_resources.instance import (
    SPARK_POOL,
    SPARK_RUN_LIMIT,
    ensure_spark_pool,
    write_instance_yaml,
)
from tests.support.pipeline_env import STREAM


def test_runs_the_ui_launches_are_counted_in_the_spark_pool(tmp_path: Path) -> None:
    write_instance_yaml(tmp_path)
    job = build_definitions().resolve_implicit_global_asset_job_def()  # the repo's streams.yaml
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        pools = instance.get_concurrency_config().pool_config
        assert (pools.pool_granularity.value, pools.default_pool_limit) == ("run", SPARK_RUN_LIMIT)
        assert instance.event_log_storage.supports_global_concurrency_limits

        def pools_of_a_run_of(*keys: object) -> set[str]:
            # What the UI's Materialize creates: the implicit asset job, the selection, no
            # leasehold tag.
            run = instance.create_run_for_job(job, asset_selection=frozenset(keys))
            return set(run.run_op_concurrency.all_pools) if run.run_op_concurrency else set()

        assert pools_of_a_run_of(ingestion_asset_key(STREAM)) == {SPARK_POOL}
        assert pools_of_a_run_of(merge_asset_key(STREAM)) == {SPARK_POOL}
        assert pools_of_a_run_of(table_asset_key(STREAM)) == set()  # no Spark in publication


def test_the_pools_limit_exists_before_any_run_is_queued(tmp_path: Path) -> None:
    """Dagster's queue creates a pool's limit from the default only in the pass that first sees
    a run of the pool, after reading the limits: that pass starts every queued run of it (four
    UI Materializes started at once). `ensure_spark_pool` creates it ahead, as `leasehold run`,
    the discovery tick and the doctor do; an instance without a default reports no limit."""
    write_instance_yaml(tmp_path / "leasehold")
    with DagsterInstance.from_config(str(tmp_path / "leasehold")) as instance:
        assert SPARK_POOL not in {p.name for p in instance.event_log_storage.get_pool_limits()}
        assert ensure_spark_pool(instance) == SPARK_RUN_LIMIT
        assert ensure_spark_pool(instance) == SPARK_RUN_LIMIT  # once
    (tmp_path / "theirs").mkdir()
    (tmp_path / "theirs" / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    with DagsterInstance.from_config(str(tmp_path / "theirs")) as instance:
        assert ensure_spark_pool(instance) is None
        assert "no limit" in probe_instance(tmp_path / "theirs").describe()
