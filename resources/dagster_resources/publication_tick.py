"""One tick of a stream's publication sensor: request what is due, record what Dagster missed.

1. `Publisher.due()`: table partitions whose publication is due (new live objects, a switch
   now possible, a merge past what is published) or whose catalog partition lags the ledger.
2. Those dates Dagster does not hold yet become date partitions (the merge sensor adds them
   too; whichever ticks first).
3. Every due date no publication run in flight covers is requested, many per run
   (`max_publications_per_run`), in ranges of the date partitions. One publication run at a
   time per stream (the instance's `leasehold/publish` run limit); the ledger's conditional
   write would keep two safe anyway (the loser's manifests are orphans for garbage collection).
4. After a publication run ended badly, publications it recorded in the ledger that Dagster
   never recorded (killed between the ledger write and the event) are recorded without a run.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRun,
    DynamicPartitionsDefinition,
    MetadataValue,
    RunRequest,
    SensorResult,
    SkipReason,
)

from resources.compaction.merge_schedule import plan_merge_runs
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    DUE_ONLY_TAG,
    ENDED_BADLY,
    PUBLISH_TAG,
    RANGE_END,
    RANGE_START,
    ended_since,
    fail_dead_runs,
    in_flight_positions,
    span_of,
)
from resources.publication.manifest import SPECTRUM_NAME
from resources.publication.publisher import PUBLISHED, PublicationOutcome

log = logging.getLogger(__name__)


def publication_materialization(
    asset_key: AssetKey, outcome: PublicationOutcome, recorded_by: str | None = None
) -> AssetMaterialization:
    """The published-table asset's event for one publication made current (`outcome` carries
    it): its seq and manifest version, switched or live, the ids, files, rows and bytes it
    covers, the catalog location and the Spectrum manifest's URL."""
    publication = outcome.publication
    if publication is None:
        raise ValueError(f"dt={outcome.dt}: {outcome.outcome}: no publication to record")
    metadata: dict[str, Any] = {
        **outcome.metadata(),
        "kind": "merged" if publication.switched else "live",
        "location": MetadataValue.url(str(outcome.metadata()["location"])),
        "manifest": MetadataValue.url(publication.location + SPECTRUM_NAME),
    }
    if recorded_by is not None:
        metadata["recorded_by"] = recorded_by
    return AssetMaterialization(asset_key=asset_key, partition=outcome.dt, metadata=metadata)


def recorded_seq(instance: DagsterInstance, asset_key: AssetKey, dt: str) -> int | None:
    """The publication `seq` Dagster last recorded for the table partition `dt`."""
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[dt]), limit=1
    ).records
    if not records:
        return None
    materialization = records[0].asset_materialization
    value = materialization.metadata.get("seq") if materialization else None
    return None if value is None else int(value.value)  # type: ignore[arg-type]


class PublicationTick:
    def __init__(
        self,
        instance: DagsterInstance,
        stream: str,
        dates: DynamicPartitionsDefinition,
        asset_key: AssetKey,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource,
    ) -> None:
        self.instance = instance
        self.stream = stream
        self.dates = dates
        self.asset_key = asset_key
        self.coordination = coordination
        self.lake = lake
        self.catalog = catalog

    def evaluate(self, cursor: str | None) -> SensorResult:
        state = json.loads(cursor) if cursor else {}
        runs_seen_s = float(state.get("runs_seen_s", 0.0))
        fail_dead_runs(self.instance, self.stream)
        publisher = self.catalog.publisher(self.stream, self.coordination, self.lake)
        due = publisher.due()
        existing = list(self.instance.get_dynamic_partitions(self.dates.name))
        known = set(existing)
        new = [dt for dt in due if dt not in known]
        order = existing + new
        position = {dt: i for i, dt in enumerate(order)}
        covered: set[int] = set()
        for _, positions in in_flight_positions(self.instance, self.stream, position, PUBLISH_TAG):
            covered.update(positions)
        wanted = [dt for dt in due if position[dt] not in covered]
        now_ms = self.coordination.store.now_ms()
        plans = plan_merge_runs(order, wanted, self.catalog.max_publications_per_run)
        requests = [
            RunRequest(
                run_key=f"{self.stream}:publish:{plan.first}:{plan.last}:{now_ms}",
                asset_selection=[self.asset_key],
                tags={
                    PUBLISH_TAG: self.stream,
                    DUE_ONLY_TAG: "true",
                    RANGE_START: plan.first,
                    RANGE_END: plan.last,
                },
            )
            for plan in plans
        ]
        ended, runs_seen_s = ended_since(
            self.instance, self.stream, runs_seen_s, ENDED_BADLY, tags=(PUBLISH_TAG,)
        )
        missed = self._missed(ended, set(order))
        flush_or_keep(self.coordination.store)
        new_cursor = json.dumps({"runs_seen_s": runs_seen_s})
        if not (requests or new or missed):
            return SensorResult(
                skip_reason=SkipReason(
                    f"nothing to request: {len(due)} table partitions due, all in publication "
                    "runs in flight"
                    if due
                    else "nothing to publish: every table partition is up to date"
                ),
                cursor=new_cursor,
            )
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[self.dates.build_add_request(new)] if new else [],
            asset_events=missed,
            cursor=new_cursor,
        )

    def _missed(self, ended: list[DagsterRun], dates: set[str]) -> list[AssetMaterialization]:
        """Publications the ledger holds and Dagster does not, in the spans of publication runs
        that ended badly."""
        events = []
        store = self.coordination.store
        table = self.lake.table_name(self.stream)
        order = list(self.instance.get_dynamic_partitions(self.dates.name))
        for run in ended:
            span = span_of(run)
            if span is None or span[0] not in order or span[1] not in order:
                continue
            for dt in order[order.index(span[0]) : order.index(span[1]) + 1]:
                partition = store.table_partition(table, dt)
                if partition is None or partition.publication_seq == 0 or dt not in dates:
                    continue
                if (recorded_seq(self.instance, self.asset_key, dt) or 0) >= (
                    partition.publication_seq
                ):
                    continue
                publications = store.publications(table, dt)
                if not publications:
                    log.warning(
                        "%s dt=%s: publication_seq %d but the ledger keeps no record",
                        table, dt, partition.publication_seq,
                    )  # fmt: skip
                    continue
                outcome = PublicationOutcome(dt, PUBLISHED, "", publications[-1], False)
                events.append(
                    publication_materialization(
                        self.asset_key,
                        outcome,
                        recorded_by="publication sensor: recorded by a run that ended badly "
                        f"({run.run_id})",
                    )
                )
        return events
