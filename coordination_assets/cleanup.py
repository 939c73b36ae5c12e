"""Per stream whose `source_cleanup` is on: the source clean-up job and its hourly schedule.

The job is one pass of `SourceCleaner` (`resources.cleanup`), mirroring the garbage-collection
job: what it removed goes on the table asset as an observation, and a pass that stopped (an
object store or the store unreachable) fails the run; the next one redoes the unit it was at.
`leasehold run` does the same pass in-process after publication (`cleanup_pass`).
"""

from typing import Any

from dagster import (
    AssetObservation,
    DagsterInstance,
    DefaultScheduleStatus,
    Definitions,
    JobDefinition,
    OpExecutionContext,
    Output,
    ScheduleDefinition,
    job,
    op,
)

from coordination_assets.publication import table_asset_key
from coordination_assets.sensor_loop import QUIET, in_this_process
from resources.cleanup.cleaner import CleanupReport
from resources.cleanup.opening import source_cleaner
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import CLEANUP_TAG

CLEANUP_CRON = "41 * * * *"
"""Hourly, away from garbage collection's minute (17)."""


def cleanup_pass(
    stream: str,
    coordination: CoordinationResource,
    lake: LakeResource,
    catalog: CatalogResource,
    *,
    dry_run: bool = False,
) -> CleanupReport:
    """One clean-up pass of `stream` with the resources' settings."""
    cleaner = source_cleaner(
        lake.stream(stream),
        coordination.store,
        endpoint_url=lake.s3_endpoint_url,
        region=lake.region,
        objects_per_pass=catalog.publication_settings().cleanup_objects_per_pass,
        owner=coordination.owner,
        timeout_s=coordination.ownership_timeout_seconds,
    )
    report = cleaner.run_pass(dry_run=dry_run)
    flush_or_keep(coordination.store)
    return report


def cleanup_metadata(report: CleanupReport) -> dict[str, Any]:
    """What one pass removed, and the stream's totals since clean-up began."""
    r, s = report.removed, report.state
    return {
        "mode": report.mode,
        "units": report.units,
        "objects_archived": r.archived,
        "objects_deleted": r.deleted,
        "objects_already_gone": r.gone,
        "bytes": r.bytes,
        "waiting_at": "none" if report.waiting is None else " ".join(report.waiting),
        "busy": report.busy,
        "total_archived": s.archived,
        "total_deleted": s.deleted,
        "total_already_gone": s.gone,
        "total_bytes": s.bytes,
    }


def build_cleanup_job(stream: str) -> JobDefinition:
    @op(
        name=f"{stream}_clean_up_source",
        description=f"Archives or deletes {stream!r}'s source objects whose rows are published, "
        "once `source_cleanup.after` has passed since their work unit completed.",
    )
    def clean_up_source(
        context: OpExecutionContext,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ):
        report = cleanup_pass(stream, coordination, lake, catalog)
        metadata = cleanup_metadata(report)
        context.log.info(report.describe())
        context.log_event(AssetObservation(asset_key=table_asset_key(stream), metadata=metadata))
        yield Output(None, metadata=metadata)

    @job(
        name=cleanup_job_name(stream),
        tags={CLEANUP_TAG: stream},
        description=f"Source clean-up of {stream!r} (its streams.yaml `source_cleanup`): one "
        "bounded pass (LEASEHOLD_CLEANUP_OBJECTS_PER_PASS).",
    )
    def cleanup_job() -> None:
        clean_up_source()

    return cleanup_job


def build_cleanup_schedule(stream: str, cleanup_job: JobDefinition) -> ScheduleDefinition:
    return ScheduleDefinition(
        name=f"{stream}_source_cleanup_hourly",
        job=cleanup_job,
        cron_schedule=CLEANUP_CRON,
        default_status=DefaultScheduleStatus.RUNNING,
        description=f"Cleans up {stream!r}'s source every hour.",
    )


def cleanup_job_name(stream: str) -> str:
    return f"{stream}_source_cleanup"


def has_cleanup_job(defs: Definitions, stream: str) -> bool:
    """Whether the stream has a clean-up job (its `source_cleanup` is on)."""
    return any(getattr(j, "name", None) == cleanup_job_name(stream) for j in defs.jobs or [])


def run_cleanup_job(defs: Definitions, instance: DagsterInstance, stream: str) -> str:
    """`leasehold run`'s clean-up stage: the stream's clean-up job once, in this process, after
    publication (`has_cleanup_job` first); its line. A pass that stopped says so and why; the
    next one redoes the unit it was at."""
    result = defs.get_job_def(cleanup_job_name(stream)).execute_in_process(
        instance=instance, run_config=QUIET, tags=in_this_process(), raise_on_error=False
    )
    if not result.success:
        failure: Any = next((e for e in result.all_events if e.is_step_failure), None)
        why = failure.event_specific_data.error.message.strip() if failure else "see the run"
        return f"source clean-up stopped (the next pass goes on): {why}"
    observed = result.asset_observations_for_node(f"{stream}_clean_up_source")
    metadata: dict[str, Any] = (
        {k: v.value for k, v in observed[0].metadata.items()} if observed else {}
    )
    removed = int(metadata.get("objects_archived", 0)) + int(metadata.get("objects_deleted", 0))
    mode = str(metadata.get("mode", ""))
    line = f"{mode}d {removed} source objects" if removed else f"nothing to {mode} yet"
    if metadata.get("waiting_at", "none") != "none":
        line += f"; waiting at {metadata['waiting_at']}"
    return line
