"""Per stream: the dynamic partitions, the ingestion asset, its discovery sensor and checks.

Thin on purpose: the sensor is `resources.discovery`, the asset is `resources.ingestion`, the
checks are `resources.ingestion_checks`. What lives here is the Dagster mapping of ARCHITECTURE
§8: one dynamic partition per source partition, one run per range of many partitions.
"""

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetsDefinition,
    BackfillPolicy,
    DefaultSensorStatus,
    DynamicPartitionsDefinition,
    Failure,
    MetadataValue,
    RunRequest,
    SensorDefinition,
    SensorEvaluationContext,
    SensorResult,
    SkipReason,
    asset,
    asset_check,
    sensor,
)

from resources.coordination.items import to_millis
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.checks import find_duplicate_ids, reconcile_rows
from resources.ingestion.discovery import Discovery, plan_runs
from resources.ingestion.partition_keys import from_partition_key, to_partition_key

RANGE_START = "dagster/asset_partition_range_start"
RANGE_END = "dagster/asset_partition_range_end"
EXPECTED_COUNT = "leasehold/partition_count"


def main_job_cursor_key(stream: str) -> str:
    """Where `leasehold run` keeps the discovery cursor in the instance (its run storage's
    key-value cursors), advanced only once the runs a tick asked for have finished."""
    return f"leasehold_main_job_cursor:{stream}"


def partitions_for(stream: str) -> DynamicPartitionsDefinition:
    return DynamicPartitionsDefinition(name=f"{stream}_source_partitions")


def ingestion_asset_key(stream: str) -> AssetKey:
    return AssetKey([stream, "ingested"])


def build_ingestion_asset(stream: str) -> AssetsDefinition:
    partitions = partitions_for(stream)

    @asset(
        key=ingestion_asset_key(stream),
        group_name=stream,
        partitions_def=partitions,
        backfill_policy=BackfillPolicy.single_run(),
        output_required=False,
        description=f"Source partitions of stream {stream!r}, ingested exactly once.",
        kinds={"spark", "parquet"},
    )
    def ingested(
        context: AssetExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        spark: SparkResource,
    ):
        keys = list(context.partition_keys)
        expected = context.run.tags.get(EXPECTED_COUNT)
        if expected is not None and int(expected) != len(keys):
            # A range is positional: if partitions were added between its ends by someone
            # else, it now covers keys this run was not planned for. Refuse before any work.
            raise Failure(
                f"range {keys[0]!r}..{keys[-1]!r} covers {len(keys)} partitions, "
                f"the sensor planned {expected}"
            )
        runner = lake.ingestion_runner(stream, coordination, spark, owner=coordination.owner)
        failed: list[str] = []
        by_source = {from_partition_key(k): k for k in keys}
        for outcome in runner.ingest(list(by_source)):
            key = by_source[outcome.source_key]
            if outcome.ok:
                yield AssetMaterialization(
                    asset_key=context.asset_key, partition=key, metadata=outcome.metadata()
                )
            else:
                failed.append(f"{key}: {outcome.outcome}: {outcome.message}")
                context.log.error(failed[-1])
        flush_or_keep(coordination.store)
        if failed:
            raise Failure(
                f"{len(failed)} of {len(keys)} source partitions not ingested: "
                + "; ".join(failed[:10]),
                metadata={"failed_partitions": MetadataValue.json(failed[:1000])},
            )

    return ingested


def build_discovery_sensor(stream: str) -> SensorDefinition:
    partitions = partitions_for(stream)
    asset_key = ingestion_asset_key(stream)

    @sensor(
        name=f"{stream}_discovery",
        asset_selection=[asset_key],
        minimum_interval_seconds=30,
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Lists new objects of {stream!r}, creates leases and requests runs.",
    )
    def discovery(
        context: SensorEvaluationContext, coordination: CoordinationResource, lake: LakeResource
    ):
        lister = lake.lister(stream)
        cursor = context.cursor
        if not cursor:
            # A sensor that never ticked on this instance starts where `leasehold run` left off
            # on it, not from the beginning: else its first tick lists every object again and
            # asks for runs that find each partition already complete.
            key = main_job_cursor_key(stream)
            cursor = context.instance.run_storage.get_cursor_values({key}).get(key)
        found = Discovery(
            coordination.store,
            stream,
            lister,
            owner=coordination.owner,
            timeout_s=coordination.ownership_timeout_seconds,
            max_objects_per_tick=lake.max_objects_per_tick,
        ).discover(cursor or None)
        # Work earlier attempts left behind — a crashed run's expired lease, an unreadable
        # object's reopened CLOSED item, a partition no run took — gets a run of its own. The
        # run key changes when the item does, and once per retry window: a tick does not ask
        # twice for the same retry, yet a retry run that failed before taking its lease (so
        # left the item as it was) is asked for again in the next window.
        store, wait_s = coordination.store, coordination.unassigned_retry_after_seconds
        retries = store.due_for_retry(
            coordination.source_identifier(stream), lake.max_retries_per_tick, wait_s
        )
        flush_or_keep(store)
        window = store.now_ms() // to_millis(wait_s)
        runs = [
            RunRequest(
                run_key=f"{stream}:retry:{item.partition_key}:{item.epoch}:{item.closed_count}"
                f":{window}",
                asset_selection=[asset_key],
                partition_key=to_partition_key(item.partition_key),
            )
            for item in retries
        ]
        if found.skipped_reason and not runs:
            return SkipReason(found.skipped_reason)
        partition_keys = [to_partition_key(k) for k in found.source_keys]
        runs += [
            RunRequest(
                run_key=plan.run_key,
                asset_selection=[asset_key],
                tags={
                    RANGE_START: plan.first,
                    RANGE_END: plan.last,
                    EXPECTED_COUNT: str(plan.count),
                },
            )
            for plan in plan_runs(stream, partition_keys, lake.max_partitions_per_run)
        ]
        if not runs:
            return SensorResult(skip_reason="no new objects, nothing to retry", cursor=found.cursor)
        return SensorResult(
            run_requests=runs,
            dynamic_partitions_requests=[partitions.build_add_request(partition_keys)]
            if partition_keys
            else [],
            cursor=found.cursor,
        )

    return discovery


def build_ingestion_checks(stream: str) -> list[AssetChecksDefinition]:
    asset_key = ingestion_asset_key(stream)

    @asset_check(
        asset=asset_key,
        name="rows_reconcile",
        description="Per committed source partition: ledger rows = rows read - quarantined.",
    )
    def rows_reconcile(coordination: CoordinationResource, lake: LakeResource) -> AssetCheckResult:
        report = reconcile_rows(coordination.store, stream, lake.table_name(stream))
        return AssetCheckResult(passed=not report.mismatches, metadata=report.metadata())

    @asset_check(
        asset=asset_key,
        name="unique_record_ids",
        description="No record id appears twice in a table partition.",
    )
    def unique_record_ids(
        coordination: CoordinationResource, lake: LakeResource
    ) -> AssetCheckResult:
        config = lake.stream(stream)
        if config.record_id is None:
            return AssetCheckResult(passed=True, metadata={"skipped": "no record_id configured"})
        report = find_duplicate_ids(
            coordination.store,
            lake.table_name(stream),
            config.record_id,
            lake.object_store(config.table).read_column,
        )
        return AssetCheckResult(passed=not report.duplicates, metadata=report.metadata())

    @asset_check(
        asset=asset_key,
        name="lease_health",
        description="No ASSIGNED lease expired for over twice its timeout, no partition "
        "UNASSIGNED past the retry window; dead letters reported.",
    )
    def lease_health(coordination: CoordinationResource) -> AssetCheckResult:
        report = coordination.lease_health(stream)
        return AssetCheckResult(
            passed=report.healthy,
            severity=AssetCheckSeverity.ERROR if report.stuck else AssetCheckSeverity.WARN,
            metadata=report.metadata(),
        )

    return [rows_reconcile, unique_record_ids, lease_health]
