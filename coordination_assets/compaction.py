"""Per stream: the table's date partitions, the merge asset, the merge sensor and its checks.

Thin on purpose: a merge is `resources.compaction.merge_runner`, a tick is
`resources.dagster_resources.merge_tick`, the checks are `resources.compaction.checks`.

The table's partitions are dynamic date partitions (`<stream>_dates`), added by the merge
sensor as dates first appear in the ledger, not a `DailyPartitionsDefinition`: a lake table
takes backfills of arbitrarily old data and, with clock skew, records dated ahead of today; a
daily definition would need a start date and would have no partition for either, so those
records would have to be quarantined. Dynamic dates hold exactly the days that have data (no
thousands of empty partitions in the UI), any valid date is a partition, and a record whose
event time gives no date at all is quarantined by ingestion with that reason.
"""

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
    DynamicPartitionsDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    asset,
    asset_check,
)

from coordination_assets.ingestion import ingestion_asset_key
from coordination_assets.table_runs import fail_if_any, stays_due_line, table_sensor
from resources.check_outcome import CheckOutcome
from resources.compaction import checks as suite
from resources.compaction.merge_runner import MERGED, MergeOutcome
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.asset_metadata import with_row_count
from resources.dagster_resources.check_result import (
    asset_check_result,
    evaluate_planned_checks,
)
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.instance import SPARK_POOL
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.merge_tick import MergeTick
from resources.dagster_resources.runs import CLOSED_DUE_NOW, DUE_ONLY_TAG
from resources.dagster_resources.spark import SparkResource

FAILED_MERGES = "failed_merges"


def merge_cursor_key(stream: str) -> str:
    """Where `leasehold run` keeps the merge sensor's cursor in the instance."""
    return f"leasehold_merge_cursor:{stream}"


def dates_for(stream: str) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=f"{stream}_dates")


def merge_asset_key(stream: str) -> AssetKey:
    return AssetKey([stream, "merged"])


def build_merge_asset(stream: str) -> AssetsDefinition:
    @asset(
        key=merge_asset_key(stream),
        group_name=stream,
        partitions_def=dates_for(stream),
        backfill_policy=BackfillPolicy.single_run(),
        output_required=False,
        # Every table partition may hold rows of any source partition.
        deps=[AssetDep(ingestion_asset_key(stream), partition_mapping=AllPartitionMapping())],
        description=f"Table partitions of {stream!r} compacted: small objects merged into "
        "objects of about merge.max_bytes, rows sorted by event time.",
        kinds={"spark", "parquet"},
        pool=SPARK_POOL,
    )
    def merged(
        context: AssetExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        spark: SparkResource,
    ):
        dts = list(context.partition_keys)
        schedule = lake.merge_schedule(stream, coordination)
        partitions = {p.dt: p for p in schedule.partitions()}
        due_only = context.run.tags.get(DUE_ONLY_TAG)
        if due_only in ("true", CLOSED_DUE_NOW):
            closed_now = due_only == CLOSED_DUE_NOW
            due = {p.dt for p in schedule.due(list(partitions.values()), closed_now=closed_now)}
            todo = [dt for dt in dts if dt in due]
        else:  # by hand: merge what there is to merge, due or not
            todo = [
                dt
                for dt in dts
                if dt in partitions
                and (partitions[dt].unmerged > 0 or partitions[dt].merge_due_at_ms is not None)
            ]
        context.log.info(f"{len(todo)} of {len(dts)} table partitions to merge")
        runner = lake.merge_runner(stream, coordination, spark, owner=coordination.owner)
        failed: dict[str, str] = {}
        for outcome in runner.merge(todo):
            if outcome.outcome == MERGED:
                failed.pop(outcome.dt, None)
                metadata = outcome.metadata()
                if outcome.partition_rows is not None:
                    metadata = with_row_count(metadata, outcome.partition_rows)
                yield AssetMaterialization(
                    asset_key=context.asset_key, partition=outcome.dt, metadata=metadata
                )
            elif not outcome.ok:
                failed[outcome.dt] = merge_failure_line(outcome)
                context.log.error(failed[outcome.dt])
            else:
                context.log.info(outcome.describe())
        flush_or_keep(coordination.store)
        evaluate_planned_checks(
            context, suite.CHECKS, lambda name: run_merge_check(stream, name, coordination, lake)
        )
        fail_if_any(failed, len(todo), "merged", FAILED_MERGES)

    return merged


def merge_failure_line(outcome: MergeOutcome) -> str:
    return stays_due_line(outcome.dt, outcome.outcome, outcome.message, "merge job", "merge sensor")


def build_merge_sensor(stream: str, closed_due_now: bool = False) -> SensorDefinition:
    """The stream's merge sensor. `closed_due_now`: `leasehold run`'s, for which a closed
    partition's pending merge is due at once (`MergeTick.closed_due_now`); the daemon's waits
    for the job's due time."""
    dates = dates_for(stream)
    asset_key = merge_asset_key(stream)

    @table_sensor(
        f"{stream}_merge",
        asset_key,
        f"Closes {stream!r}'s table partitions whose day ended, requests merges "
        "of those whose merge job is due or that just closed, records merges Dagster missed.",
    )
    def merge_sensor(
        context: SensorEvaluationContext, coordination: CoordinationResource, lake: LakeResource
    ):
        tick = MergeTick(context.instance, stream, dates, asset_key, coordination, lake)
        tick.closed_due_now = closed_due_now
        return tick.evaluate(context.cursor)

    return merge_sensor


def run_merge_check(
    stream: str, name: str, coordination: CoordinationResource, lake: LakeResource
) -> CheckOutcome:
    config = lake.stream(stream)
    return suite.run_one(
        name,
        coordination.store,
        config,
        objects=lake.object_store(config.table),
        ownership_timeout_s=coordination.ownership_timeout_seconds,
        table=lake.table_name(stream),
    )


def build_merge_checks(stream: str) -> list[AssetChecksDefinition]:
    """One asset check per check of `resources.compaction.checks.CHECKS`, on the merge asset:
    the code `leasehold check` runs. Evaluated in the checks runs the `<stream>_checks` sensor
    requests, and by the asset's own step when its run planned them
    (`evaluate_planned_checks`)."""
    asset_key = merge_asset_key(stream)

    def build(name: str, description: str) -> AssetChecksDefinition:
        @asset_check(asset=asset_key, name=name, description=description, blocking=False)
        def check(coordination: CoordinationResource, lake: LakeResource) -> AssetCheckResult:
            return asset_check_result(run_merge_check(stream, name, coordination, lake))

        return check

    return [build(name, description) for name, description in suite.CHECKS.items()]
