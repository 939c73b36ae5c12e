"""Coordination status as an asset: the store's counts and metrics, shown in the Dagster UI.

The lease-health check answers the operator's question "is anything stuck?": an ASSIGNED lease
expired for more than twice its ownership timeout means no worker is picking partitions up,
and a dead letter is a source partition that will never be ingested without a human.
"""

from dagster import (
    AssetCheckResult,
    AssetCheckSeverity,
    MaterializeResult,
    MetadataValue,
    asset,
    asset_check,
)

from resources.cli import status_json, status_text
from resources.coordination import CoordinationResource
from resources.lease_store import PartitionStatus


@asset(group_name="coordination", description="Lease counts, dead letters and metrics.")
def coordination_status(coordination: CoordinationResource) -> MaterializeResult:
    summaries = coordination.store.status()
    metadata: dict[str, object] = {
        "status": MetadataValue.md(f"```\n{status_text(summaries)}\n```"),
        "status_json": MetadataValue.json(status_json(summaries)),
    }
    for summary in summaries:
        for name, value in summary.counts.items():
            metadata[f"{summary.source_identifier}/{name}"] = value
        for name, value in summary.metrics.items():
            metadata[f"{summary.source_identifier}/{name}"] = value
    return MaterializeResult(metadata=metadata)


@asset_check(asset=coordination_status, description="No stuck leases; dead letters reported.")
def lease_health(coordination: CoordinationResource) -> AssetCheckResult:
    store = coordination.store
    limit_ms = int(2 * coordination.ownership_timeout_seconds * 1000)
    now = store.now_ms()
    stuck: list[str] = []
    dead: list[str] = []
    for item in store.iter_items():
        if (
            item.status is PartitionStatus.ASSIGNED
            and item.ownership_timeout_ms is not None
            and now - item.ownership_timeout_ms > limit_ms
        ):
            stuck.append(f"{item.source_identifier} / {item.partition_key} ({item.owner})")
        if item.dead_letter_reason is not None:
            dead.append(
                f"{item.source_identifier} / {item.partition_key}: {item.dead_letter_reason}"
            )
    return AssetCheckResult(
        passed=not stuck and not dead,
        severity=AssetCheckSeverity.ERROR if stuck else AssetCheckSeverity.WARN,
        metadata={
            "stuck_leases": len(stuck),
            "dead_letters": len(dead),
            "details": MetadataValue.md("\n".join(f"- {x}" for x in stuck + dead) or "none"),
        },
    )
