"""Per stream: the dynamic partitions, the ingestion asset, its sensors and its checks.

Thin on purpose: a discovery tick is `resources.dagster_resources.discovery_tick`, the asset's
work is `resources.ingestion.runner`, the checks are `resources.ingestion.check_suite`. What
lives here is the Dagster mapping of docs/architecture.md: one dynamic partition per source
partition, one run per range of many partitions, checks in runs of their own.
"""

import json
import time
from functools import partial

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    AssetsDefinition,
    AssetSelection,
    BackfillPolicy,
    DagsterInstance,
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

from coordination_assets.table_runs import sensor_interval_s
from resources.check_outcome import CheckOutcome
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.asset_metadata import (
    COLUMN_SCHEMA,
    VersionColumns,
    with_row_count,
)
from resources.dagster_resources.check_result import (
    asset_check_result,
    evaluate_planned_checks,
)
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.discovery_tick import DiscoveryTick
from resources.dagster_resources.instance import SPARK_POOL
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    CHECKS_TAG,
    EXPECTED_COUNT,
    MERGE_TAG,
    PUBLISH_TAG,
    STREAM_TAG,
    ended_since,
)
from resources.dagster_resources.spark import SparkResource
from resources.ingestion import check_suite as suite
from resources.ingestion.outcomes import (
    ALREADY_COMPLETE,
    LOST_LEASE,
    UNKNOWN_PARTITION,
    PartitionOutcome,
)
from resources.ingestion.partition_keys import from_partition_key
from resources.publication.publication_state import served_and_sources


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
        pool=SPARK_POOL,
    )
    def ingested(
        context: AssetExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        spark: SparkResource,
    ):
        keys = list(context.partition_keys)
        _refuse_unplanned_range(context, keys)
        runner = lake.ingestion_runner(stream, coordination, spark, owner=coordination.owner)
        columns = VersionColumns(coordination.store, lake.stream(stream))
        failed: dict[str, str] = {}  # partition key -> failure line
        by_source = {from_partition_key(k): k for k in keys}
        for outcome in runner.ingest(list(by_source)):
            key = by_source[outcome.source_key]
            if outcome.ok:
                yield _committed(context, key, outcome, columns)
            else:
                failed[key] = _not_ingested(context, partitions, key, outcome)
        flush_or_keep(coordination.store)
        evaluate_planned_checks(
            context,
            suite.CHECKS,
            lambda name: run_ingestion_check(stream, name, coordination, lake),
        )
        if failed:
            raise _partitions_failed(failed, len(keys))

    return ingested


def _refuse_unplanned_range(context: AssetExecutionContext, keys: list[str]) -> None:
    """A range is positional: if partitions were added between its ends by someone else, it
    now covers keys this run was not planned for. Refuse before any work; the partitions stay
    as they are and the next discovery tick plans them again."""
    expected = context.run.tags.get(EXPECTED_COUNT)
    if expected is not None and int(expected) != len(keys):
        raise Failure(
            f"range {keys[0]!r}..{keys[-1]!r} covers {len(keys)} partitions, "
            f"the sensor planned {expected}; nothing was done, the next discovery tick "
            "requests them again"
        )


def _committed(
    context: AssetExecutionContext, key: str, outcome: PartitionOutcome, columns: VersionColumns
) -> AssetMaterialization:
    """The materialization of a partition committed (now, or by an earlier run)."""
    metadata = with_row_count(outcome.metadata(), outcome.rows_written)
    if outcome.schema_version:
        # The asset page shows the columns of its latest materialization.
        metadata[COLUMN_SCHEMA] = columns.schema(outcome.schema_version)
    if outcome.new_columns:  # news, not a fault: info, as the story line says it
        context.log.info(
            f"{key}: schema version {outcome.schema_version} adds " + ", ".join(outcome.new_columns)
        )
    if outcome.outcome == ALREADY_COMPLETE:
        # Recorded again, with its commit's own counts, so that a backfill or a
        # Materialize of a complete partition counts it materialized (issue 23);
        # `recorded_before` tells a report not to count its rows twice.
        before = recorded_before(context.instance, context.asset_key, key)
        metadata[RECORDED_BEFORE] = before
        context.log.info(
            f"{key}: already complete ({outcome.message}); recorded "
            + ("again with its commit's counts" if before else "for the first time")
        )
    return AssetMaterialization(asset_key=context.asset_key, partition=key, metadata=metadata)


def _not_ingested(
    context: AssetExecutionContext,
    partitions: DynamicPartitionsDefinition,
    key: str,
    outcome: PartitionOutcome,
) -> str:
    """The failure line of a partition not ingested, logged. One added by hand (or whose item
    expired) can never be ingested under this key: it leaves Dagster's partitions instead of
    staying failed for good."""
    if outcome.outcome == UNKNOWN_PARTITION:
        context.instance.delete_dynamic_partition(partitions.name, key)
        line = failure_line(key, outcome) + "; removed from the partitions"
    else:
        line = failure_line(key, outcome)
    context.log.error(line)
    return line


def _partitions_failed(failed: dict[str, str], planned: int) -> Failure:
    """The run's failure: its partitions not ingested, their lines and keys in its metadata."""
    lines = list(failed.values())
    return Failure(
        f"{len(failed)} of {planned} source partitions not ingested:\n" + "\n".join(lines[:20]),
        metadata={
            FAILED_PARTITIONS: MetadataValue.json(lines[:1000]),
            FAILED_KEYS: MetadataValue.json(list(failed)[:1000]),
        },
    )


FAILED_PARTITIONS = "failed_partitions"
# Their partition keys, in the same order: a failure line starts with its key, but a key may
# itself contain ": ", so `leasehold run` matches a later success by these.
FAILED_KEYS = "failed_partition_keys"

# When a partition that failed in a run is tried again, where the runner's message does not
# say (an unreadable object's says when its CLOSED item reopens).
RETRY_HINTS = {LOST_LEASE: "retried once that lease expires, unless its owner finishes it"}


RECORDED_BEFORE = "recorded_before"


def recorded_before(instance: DagsterInstance, asset_key: AssetKey, key: str) -> bool:
    """Whether Dagster holds a materialization of the partition: one indexed query per
    already-complete partition, not a scan of every partition ever materialized."""
    found = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[key]), limit=1
    )
    return bool(found.records)


def failure_line(key: str, outcome: PartitionOutcome) -> str:
    hint = RETRY_HINTS.get(outcome.outcome)
    return f"{key}: {outcome.outcome}: {outcome.message}" + (f"; {hint}" if hint else "")


def build_discovery_sensor(stream: str) -> SensorDefinition:
    partitions = partitions_for(stream)
    asset_key = ingestion_asset_key(stream)

    @sensor(
        name=f"{stream}_discovery",
        asset_selection=[asset_key],
        minimum_interval_seconds=sensor_interval_s(),
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Lists new and late objects of {stream!r}, creates leases, requests runs "
        "for them and for work left behind, records commits Dagster missed.",
    )
    def discovery(
        context: SensorEvaluationContext, coordination: CoordinationResource, lake: LakeResource
    ):
        cursor = context.cursor
        if not cursor:
            # A sensor that never ticked on this instance starts where `leasehold run` left off
            # on it, not from the beginning: else its first tick lists every object again and
            # asks for runs that find each partition already complete.
            key = main_job_cursor_key(stream)
            cursor = context.instance.run_storage.get_cursor_values({key}).get(key)
        tick = DiscoveryTick(context.instance, stream, partitions, asset_key, coordination, lake)
        result = tick.evaluate(cursor)
        # The tick's page in the UI says what it did, commits recorded too. Only where the
        # tick keeps logs (the daemon's): `leasehold run` evaluates it in process, where the
        # line would be console noise beside its own progress.
        if tick.summary and context.log_key:
            context.log.info(tick.summary)
        return result

    return discovery


def build_ingestion_checks(stream: str) -> list[AssetChecksDefinition]:
    """One asset check per check of `check_suite.CHECKS`: the same code `leasehold check` runs,
    so the UI and CI can't disagree."""
    asset_key = ingestion_asset_key(stream)

    def build(name: str, description: str) -> AssetChecksDefinition:
        @asset_check(asset=asset_key, name=name, description=description, blocking=False)
        def check(coordination: CoordinationResource, lake: LakeResource) -> AssetCheckResult:
            return asset_check_result(run_ingestion_check(stream, name, coordination, lake))

        return check

    return [build(name, description) for name, description in suite.CHECKS.items()]


def run_ingestion_check(
    stream: str, name: str, coordination: CoordinationResource, lake: LakeResource
) -> CheckOutcome:
    config = lake.stream(stream)
    objects = lake.object_store(config.table)
    return suite.run_one(
        name,
        coordination.store,
        config,
        table=lake.table_name(stream),
        lister=lake.lister(stream),
        read_column=objects.read_column,
        served_urls=partial(served_and_sources, objects),
        ownership_timeout_s=coordination.ownership_timeout_seconds,
        unassigned_retry_after_s=coordination.unassigned_retry_after_seconds,
    )


def newest_materialization(
    instance: DagsterInstance, asset_keys: list[AssetKey], after_storage_id: int
) -> int:
    """The storage id of the newest materialization of any of `asset_keys` after
    `after_storage_id` (else that id): one indexed query per asset, whatever the history."""
    newest = after_storage_id
    for key in asset_keys:
        found = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, after_storage_id=after_storage_id), limit=1
        )
        if found.records:
            newest = max(newest, found.records[0].storage_id)
    return newest


def build_checks_sensor(stream: str, checks: list[AssetChecksDefinition]) -> SensorDefinition:
    """Asset checks attached to an asset that yields materializations instead of its output are
    skipped in that asset's runs (docs/architecture.md), so sensor runs plan none and they run in
    runs of their own: after every ingestion, merge or publication run of the stream ends,
    after anything else materializes its assets (a run launched from the UI, commits recorded
    without a run), and at least every `check_interval_seconds`. `checks`: the stream's
    ingestion, merge and publication checks."""
    check_keys = [key for c in checks for key in c.check_keys]
    asset_keys = sorted({key.asset_key for key in check_keys})

    @sensor(
        name=f"{stream}_checks",
        asset_selection=AssetSelection.checks(*checks),
        minimum_interval_seconds=sensor_interval_s(),
        default_status=DefaultSensorStatus.RUNNING,
        description=f"Runs the asset checks of {stream!r} after its ingestion, merge and "
        "publication runs end, and on a period.",
    )
    def checks_sensor(context: SensorEvaluationContext, lake: LakeResource):
        state = json.loads(context.cursor) if context.cursor else {}
        runs_seen_s, last_check_s = state.get("runs_seen_s", 0.0), state.get("last_check_s", 0.0)
        ended, runs_seen_s = ended_since(
            context.instance, stream, runs_seen_s, tags=(STREAM_TAG, MERGE_TAG, PUBLISH_TAG)
        )
        # Runs without leasehold's tags (a Materialize or backfill from the UI) and commits the
        # sensors recorded without a run are seen by what they materialized.
        events_seen = state.get("events_seen", 0)
        newest = newest_materialization(context.instance, asset_keys, events_seen)
        now = time.time()
        if not ended and newest == events_seen and now - last_check_s < lake.check_interval_seconds:
            return SkipReason(
                "no run ended and nothing was materialized since the last checks run; the "
                f"next periodic one in {last_check_s + lake.check_interval_seconds - now:.0f} s"
            )
        return SensorResult(
            run_requests=[
                RunRequest(
                    run_key=f"{stream}:checks:{now:.3f}",
                    asset_selection=[],
                    asset_check_keys=check_keys,
                    tags={CHECKS_TAG: stream},
                )
            ],
            cursor=json.dumps(
                {"runs_seen_s": runs_seen_s, "last_check_s": now, "events_seen": newest}
            ),
        )

    return checks_sensor
