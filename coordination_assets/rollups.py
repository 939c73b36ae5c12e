"""Per stream that declares rollups: the rollup asset, its sensor and its check.

Thin on purpose: a rollup run is `resources.aggregation.runner`, a tick is
`resources.dagster_resources.rollup_tick`, the check is `resources.aggregation.checks`.

The rollup asset (`[stream, "rollups"]`) is the stream's rollups' state, on the same dynamic
dates as the table: one materialization per date a run moved, with each rollup's position
(the object id its state covers), batches and keys written. Its sensor requests a run when
commits land in a date (the state lags the ledger); its check compares the state with a
full recomputation from the published table for the dates that changed.
"""

from typing import Any

from dagster import (
    AllPartitionMapping,
    AssetCheckResult,
    AssetChecksDefinition,
    AssetDep,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    BackfillPolicy,
    SensorDefinition,
    SensorEvaluationContext,
    asset,
    asset_check,
)

from coordination_assets.compaction import dates_for
from coordination_assets.ingestion import ingestion_asset_key
from coordination_assets.table_runs import fail_if_any, stays_due_line, table_sensor
from resources.aggregation import checks as suite
from resources.aggregation.runner import FAILED, LOST_LEASE, ROLLED_UP, RollupOutcome
from resources.check_outcome import CheckOutcome
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.check_result import asset_check_result, evaluate_planned_checks
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.instance import SPARK_POOL
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.rollup_tick import RollupTick
from resources.dagster_resources.spark import SparkResource

FAILED_ROLLUPS = "failed_rollups"


def rollup_cursor_key(stream: str) -> str:
    """Where `leasehold run` keeps the rollup sensor's cursor in the instance."""
    return f"leasehold_rollup_cursor:{stream}"


def rollup_asset_key(stream: str) -> AssetKey:
    return AssetKey([stream, "rollups"])


def rollup_metadata(outcomes: list[RollupOutcome]) -> dict[str, Any]:
    """One date's materialization: per rollup, the object id its state covers, the batches
    applied and the keys written by this run."""
    metadata: dict[str, object] = {}
    for o in outcomes:
        name = o.rollup.split("|", 1)[1]
        metadata[f"{name}_upto"] = o.upto
        metadata[f"{name}_batches"] = o.batches
        metadata[f"{name}_keys_written"] = o.keys_written
        metadata[f"{name}_table_published"] = o.table_published
    metadata["batches"] = sum(o.batches for o in outcomes)
    return metadata


def build_rollup_asset(stream: str) -> AssetsDefinition:
    @asset(
        key=rollup_asset_key(stream),
        group_name=stream,
        partitions_def=dates_for(stream),
        backfill_policy=BackfillPolicy.single_run(),
        output_required=False,
        deps=[AssetDep(ingestion_asset_key(stream), partition_mapping=AllPartitionMapping())],
        description=f"The rollups {stream!r} declares (streams.yaml `rollups:`): per date and "
        "key, aggregates kept exactly once as commits land (Storm's transactional or opaque "
        "rule; `leasehold rollup read`).",
        kinds={"spark"},
        pool=SPARK_POOL,
    )
    def rollups(
        context: AssetExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        spark: SparkResource,
        catalog: CatalogResource,
    ):
        dts = list(context.partition_keys)
        runners = catalog.rollup_runners(
            stream, coordination, lake, spark, owner=coordination.owner
        )
        by_dt: dict[str, list[RollupOutcome]] = {dt: [] for dt in dts}
        for runner in runners:
            for outcome in runner.run(dts):
                by_dt[outcome.dt].append(outcome)
        failed: dict[str, str] = {}
        for dt, outcomes in by_dt.items():
            for o in outcomes:
                if o.outcome in (FAILED, LOST_LEASE):
                    failed[dt] = stays_due_line(
                        dt, o.outcome, f"{o.rollup}: {o.message}", "rollup", "rollup sensor"
                    )
                    context.log.error(failed[dt])
                else:
                    context.log.info(o.describe())
            if any(o.outcome == ROLLED_UP for o in outcomes):
                yield AssetMaterialization(
                    asset_key=context.asset_key, partition=dt, metadata=rollup_metadata(outcomes)
                )
        flush_or_keep(coordination.store)
        evaluate_planned_checks(
            context,
            suite.CHECKS,
            lambda name: run_rollup_check(stream, coordination, lake, catalog),
        )
        fail_if_any(failed, len(dts), "rolled up", FAILED_ROLLUPS)

    return rollups


def build_rollup_sensor(stream: str) -> SensorDefinition:
    asset_key = rollup_asset_key(stream)

    @table_sensor(
        f"{stream}_rollup",
        asset_key,
        f"Requests rollups of {stream!r}'s table partitions that got commits since their "
        "rollups last ran, or whose rollup batch a dead run left half written.",
    )
    def rollup_sensor(
        context: SensorEvaluationContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ):
        tick = RollupTick(
            context.instance, stream, dates_for(stream), asset_key, coordination, lake, catalog
        )
        return tick.evaluate(context.cursor)

    return rollup_sensor


def run_rollup_check(
    stream: str, coordination: CoordinationResource, lake: LakeResource, catalog: CatalogResource
) -> CheckOutcome:
    config = lake.stream(stream)
    [outcome] = suite.run_all(
        config,
        coordination.store,
        lake.object_store(config.table),
        catalog.target(config.table_format, lake),
        s3_endpoint_url=lake.s3_endpoint_url,
        region=lake.region,
    )
    return outcome


def build_rollup_checks(stream: str) -> list[AssetChecksDefinition]:
    """The rollup check on the rollup asset: the code `leasehold check` runs."""
    asset_key = rollup_asset_key(stream)

    def build(name: str, description: str) -> AssetChecksDefinition:
        @asset_check(asset=asset_key, name=name, description=description, blocking=False)
        def check(
            coordination: CoordinationResource, lake: LakeResource, catalog: CatalogResource
        ) -> AssetCheckResult:
            return asset_check_result(run_rollup_check(stream, coordination, lake, catalog))

        return check

    return [build(name, description) for name, description in suite.CHECKS.items()]
