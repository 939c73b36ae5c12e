"""Coordination status as an asset: the store's counts and metrics, shown in the Dagster UI.

The lease-health check answers the operator's question "is anything stuck?": an ASSIGNED lease
expired for more than twice its ownership timeout means no worker is picking partitions up,
and a dead letter is a source partition that will never be ingested without a human.
"""

from typing import Any

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    AssetSelection,
    DefaultScheduleStatus,
    MaterializeResult,
    MetadataValue,
    ScheduleDefinition,
    asset,
    asset_check,
)

from resources.coordination.status import status_json, status_text
from resources.dagster_resources.coordination import CoordinationResource


@asset(group_name="coordination", description="Lease counts, dead letters and metrics.")
def coordination_status(coordination: CoordinationResource) -> MaterializeResult:
    summaries = coordination.store.status()
    metadata: dict[str, Any] = {
        "status": MetadataValue.md(f"```\n{status_text(summaries)}\n```"),
        "status_json": MetadataValue.json(status_json(summaries)),
    }
    for summary in summaries:
        for name, value in summary.counts.items():
            metadata[f"{summary.source_identifier}/{name}"] = value
        for name, value in summary.metrics.items():
            metadata[f"{summary.source_identifier}/{name}"] = value
    return MaterializeResult(metadata=metadata)


@asset_check(
    asset=coordination_status,
    description="No stuck leases, no partition left waiting; dead letters reported.",
)
def lease_health(coordination: CoordinationResource) -> AssetCheckResult:
    report = coordination.lease_health(None)
    return AssetCheckResult(
        passed=report.healthy,
        severity=AssetCheckSeverity.ERROR if report.stuck else AssetCheckSeverity.WARN,
        metadata=report.metadata(),
    )


STATUS_CRON = "23 * * * *"
"""Hourly, off the hour: a stuck lease or a new dead letter shows in the UI within the hour. The
status reads every lease item the store holds, without its progress (`LeaseStore.status`):
O(units kept, bounded by the items' TTL), small reads, one small run without Spark."""

coordination_status_schedule = ScheduleDefinition(
    name="coordination_status_hourly",
    target=AssetSelection.assets(coordination_status),  # with its check, lease_health
    cron_schedule=STATUS_CRON,
    default_status=DefaultScheduleStatus.RUNNING,
    description="Refreshes the lease counts and metrics and runs lease_health, hourly.",
)
