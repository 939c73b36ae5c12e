"""Per stream: the published-table asset, the publication sensor, its checks and the GC job.

Thin on purpose: a publication is `resources.publication.publisher`, a tick is
`resources.dagster_resources.publication_tick`, the checks are `resources.publication.checks`,
a collection is `resources.publication.garbage`.

The published table (`[stream, "table"]`) is what external engines read through the catalog:
one partition per date, on the same dynamic dates as the merge asset, one materialization per
publication made current (a new manifest version, or the catalog repaired to the ledger's).

Garbage collection is a job on an hourly schedule, not an asset: it produces nothing anyone
reads or depends on — it deletes files no retained manifest names — so a materialization would
claim a new version of data that does not exist, and an unpartitioned asset beside a
partitioned table would show as stale for no reason. Its run records what it reclaimed (files
and bytes, by reason) as the op's output metadata, and the same as an observation of the
published-table asset, so the table's page shows when its storage was collected.
"""

from typing import Any

from dagster import (
    AssetCheckResult,
    AssetChecksDefinition,
    AssetExecutionContext,
    AssetKey,
    AssetObservation,
    AssetsDefinition,
    BackfillPolicy,
    DefaultScheduleStatus,
    Failure,
    JobDefinition,
    MetadataValue,
    OpExecutionContext,
    Output,
    ScheduleDefinition,
    SensorDefinition,
    SensorEvaluationContext,
    asset,
    asset_check,
    job,
    op,
)

from coordination_assets.compaction import dates_for, merge_asset_key
from coordination_assets.table_runs import fail_if_any, stays_due_line, table_sensor
from resources.check_outcome import CheckOutcome
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.check_result import (
    asset_check_result,
    evaluate_planned_checks,
)
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.publication_tick import (
    PublicationTick,
    publication_materialization,
    recorded_seq,
)
from resources.dagster_resources.runs import DUE_ONLY_TAG, GC_TAG
from resources.publication import checks as suite
from resources.publication.garbage import GcReport
from resources.publication.outcome import CATALOG_REPAIRED, FAILED, PUBLISHED, PublicationOutcome

FAILED_PUBLICATIONS = "failed_publications"

GC_CRON = "17 * * * *"
"""Hourly, off the hour (when other hourly jobs start). The safety delay, not this period,
decides how long an unneeded file is kept; collecting hourly only bounds how much longer."""


def publish_cursor_key(stream: str) -> str:
    """Where `leasehold run` keeps the publication sensor's cursor in the instance."""
    return f"leasehold_publish_cursor:{stream}"


def table_asset_key(stream: str) -> AssetKey:
    return AssetKey([stream, "table"])


def build_publication_asset(stream: str) -> AssetsDefinition:
    @asset(
        key=table_asset_key(stream),
        group_name=stream,
        partitions_def=dates_for(stream),
        backfill_policy=BackfillPolicy.single_run(),
        output_required=False,
        deps=[merge_asset_key(stream)],
        description=f"The published table {stream!r}: per date, the manifest version the "
        "catalog points external engines at (live small objects before the switch, merged "
        "objects after).",
        kinds={"parquet"},
    )
    def table(
        context: AssetExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ):
        dts = list(context.partition_keys)
        publisher = catalog.publisher(stream, coordination, lake)
        if context.run.tags.get(DUE_ONLY_TAG) == "true":
            due = set(publisher.due())
            todo = [dt for dt in dts if dt in due]
        else:  # by hand: every partition of the range; an up-to-date one is left as it is
            todo = dts
        context.log.info(f"{len(todo)} of {len(dts)} table partitions to publish")
        failed: dict[str, str] = {}
        for outcome in publisher.publish(todo):
            if outcome.outcome == PUBLISHED or (
                outcome.outcome == CATALOG_REPAIRED
                and outcome.publication is not None
                and recorded_seq(context.instance, context.asset_key, outcome.dt)
                != outcome.publication.seq
            ):
                # A repaired catalog points at a publication Dagster may have recorded already
                # (the run that recorded it died before the catalog write): only if not.
                yield publication_materialization(context.asset_key, outcome)
            elif outcome.outcome == FAILED:
                failed[outcome.dt] = publication_failure_line(outcome)
                context.log.error(failed[outcome.dt])
            else:
                context.log.info(outcome.describe())
        flush_or_keep(coordination.store)
        evaluate_planned_checks(
            context,
            suite.CHECKS,
            lambda name: run_publication_check(stream, name, coordination, lake, catalog),
        )
        fail_if_any(failed, len(todo), "published", FAILED_PUBLICATIONS)

    return table


def publication_failure_line(outcome: PublicationOutcome) -> str:
    return stays_due_line(
        outcome.dt, outcome.outcome, outcome.message, "publication", "publication sensor"
    )


def build_publication_sensor(stream: str) -> SensorDefinition:
    dates = dates_for(stream)
    asset_key = table_asset_key(stream)

    @table_sensor(
        f"{stream}_publish",
        asset_key,
        f"Requests publication of {stream!r}'s table partitions whose manifest is "
        "behind the ledger (new objects, a switch, a merge) or whose catalog partition lags, "
        "records publications Dagster missed.",
    )
    def publication_sensor(
        context: SensorEvaluationContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ):
        tick = PublicationTick(
            context.instance, stream, dates, asset_key, coordination, lake, catalog
        )
        return tick.evaluate(context.cursor)

    return publication_sensor


def run_publication_check(
    stream: str,
    name: str,
    coordination: CoordinationResource,
    lake: LakeResource,
    catalog: CatalogResource,
) -> CheckOutcome:
    config = lake.stream(stream)
    return suite.run_one(
        name,
        config,
        coordination.store,
        lake.object_store(config.table),
        catalog.target(config.table_format, lake),
    )


def build_publication_checks(stream: str) -> list[AssetChecksDefinition]:
    """One asset check per check of `resources.publication.checks.CHECKS`, on the published
    table: the code `leasehold check` runs. Evaluated in the checks runs the `<stream>_checks`
    sensor requests, after publication runs too, and by the asset's own step when its run
    planned them (`evaluate_planned_checks`)."""
    asset_key = table_asset_key(stream)

    def build(name: str, description: str) -> AssetChecksDefinition:
        @asset_check(asset=asset_key, name=name, description=description, blocking=False)
        def check(
            coordination: CoordinationResource, lake: LakeResource, catalog: CatalogResource
        ) -> AssetCheckResult:
            return asset_check_result(
                run_publication_check(stream, name, coordination, lake, catalog)
            )

        return check

    return [build(name, description) for name, description in suite.CHECKS.items()]


def gc_metadata(report: GcReport) -> dict[str, Any]:
    """What one collection reclaimed: totals, and files and bytes per reason (`files_<reason>`,
    `bytes_<reason>`, the reason's words joined by `_`)."""
    metadata: dict[str, object] = {
        "files": report.files,
        "bytes": report.bytes,
        "forgotten_publications": report.forgotten_publications,
        "failed_deletions": report.failed,
        "dry_run": report.dry_run,
        "by_reason": MetadataValue.json(
            {reason: {"files": n, "bytes": b} for reason, (n, b) in report.by_reason.items()}
        ),
    }
    for reason, (files, size) in report.by_reason.items():
        slug = "_".join(reason.split())
        metadata[f"files_{slug}"] = files
        metadata[f"bytes_{slug}"] = size
    return metadata


def build_gc_job(stream: str) -> JobDefinition:
    @op(
        name=f"{stream}_collect_garbage",
        description=f"Deletes files of {stream!r}'s table no retained manifest version and no "
        "ledger state needs any more, once the safety delay has passed.",
    )
    def collect_garbage(
        context: OpExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ):
        collector = catalog.garbage_collector(stream, coordination, lake)
        report = collector.collect()
        flush_or_keep(coordination.store)
        metadata = gc_metadata(report)
        context.log.info(report.describe())
        context.log_event(AssetObservation(asset_key=table_asset_key(stream), metadata=metadata))
        if not report.ok:
            # What was deleted is recorded above; the files that failed are found again, for
            # the same reason, by the next collection.
            raise Failure(
                f"{report.failed} deletions failed: {'; '.join(report.errors)}", metadata=metadata
            )
        yield Output(None, metadata=metadata)

    @job(
        name=f"{stream}_gc",
        tags={GC_TAG: stream},
        description=f"Garbage collection of {stream!r}'s table (superseded merged objects, small "
        "objects a published merge covers, orphans of failed attempts), after the safety delay "
        "(LEASEHOLD_GC_SAFETY_DELAY_SECONDS).",
    )
    def gc_job() -> None:
        collect_garbage()

    return gc_job


def build_gc_schedule(stream: str, gc_job: JobDefinition) -> ScheduleDefinition:
    return ScheduleDefinition(
        name=f"{stream}_gc_hourly",
        job=gc_job,
        cron_schedule=GC_CRON,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Collects {stream!r}'s garbage every hour.",
    )
