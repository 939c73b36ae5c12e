"""One tick of a stream's merge sensor: close, add dates, request merges, record missed ones.

1. Table partitions whose day (plus `merge.close_grace`) has ended are closed (idempotent);
   closing makes their merge job due at once.
2. Dates the ledger has and Dagster does not become date partitions of the merge asset.
3. Every table partition whose job is due, that no live merge holds (its job lease) and that no
   merge run in flight covers, is requested — many per run (`max_merges_per_run`), in ranges of
   the date partitions. A dead merge's job is due again once its lease expired: the next run
   takes it over. One merge run at a time per stream (the instance's `leasehold/merge` run
   limit), and the job lease decides within.
4. After a merge run ended badly, merges it committed that Dagster never recorded (killed
   between the commit and the event) are recorded without a run, from the ledger.
"""

from __future__ import annotations

import json
import logging

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    DynamicPartitionsDefinition,
    RunRequest,
    SensorResult,
    SkipReason,
)

from resources.compaction.merge_schedule import plan_merge_runs
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    DUE_ONLY_TAG,
    ENDED_BADLY,
    MERGE_TAG,
    RANGE_END,
    RANGE_START,
    ended_since,
    fail_dead_runs,
    in_flight_positions,
    span_of,
)
from resources.ledger.model import TablePartition

log = logging.getLogger(__name__)


class MergeTick:
    def __init__(
        self,
        instance: DagsterInstance,
        stream: str,
        dates: DynamicPartitionsDefinition,
        asset_key: AssetKey,
        coordination: CoordinationResource,
        lake: LakeResource,
    ) -> None:
        self.instance = instance
        self.stream = stream
        self.dates = dates
        self.asset_key = asset_key
        self.coordination = coordination
        self.lake = lake

    def evaluate(self, cursor: str | None) -> SensorResult | SkipReason:
        state = json.loads(cursor) if cursor else {}
        runs_seen_s = float(state.get("runs_seen_s", 0.0))
        fail_dead_runs(self.instance, self.stream)
        schedule = self.lake.merge_schedule(self.stream, self.coordination)
        partitions, closed = schedule.refresh()
        existing = list(self.instance.get_dynamic_partitions(self.dates.name))
        known = set(existing)
        new = [p.dt for p in partitions if p.dt not in known]
        order = existing + new
        position = {dt: i for i, dt in enumerate(order)}
        covered: set[int] = set()
        for _, positions in in_flight_positions(self.instance, self.stream, position, MERGE_TAG):
            covered.update(positions)
        busy = schedule.running()
        wanted = [
            p.dt
            for p in schedule.due(partitions)
            if p.dt not in busy and position[p.dt] not in covered
        ]
        now_ms = schedule.store.now_ms()
        requests = [
            RunRequest(
                run_key=f"{self.stream}:merge:{plan.first}:{plan.last}:{now_ms}",
                asset_selection=[self.asset_key],
                tags={
                    MERGE_TAG: self.stream,
                    DUE_ONLY_TAG: "true",
                    RANGE_START: plan.first,
                    RANGE_END: plan.last,
                },
            )
            for plan in plan_merge_runs(order, wanted, self.lake.max_merges_per_run)
        ]
        ended, runs_seen_s = ended_since(
            self.instance, self.stream, runs_seen_s, ENDED_BADLY, tags=(MERGE_TAG,)
        )
        missed = self._missed(ended, {p.dt: p for p in partitions}, known | set(new))
        flush_or_keep(schedule.store)
        new_cursor = json.dumps({"runs_seen_s": runs_seen_s})
        if not (requests or new or missed or closed):
            return SensorResult(
                skip_reason=SkipReason(
                    f"nothing due: {len(partitions)} table partitions, "
                    f"{sum(p.unmerged > 0 for p in partitions)} with unmerged objects"
                ),
                cursor=new_cursor,
            )
        if closed:
            log.info("%s: closed %s", self.stream, ", ".join(p.dt for p in closed))
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[self.dates.build_add_request(new)] if new else [],
            asset_events=missed,
            cursor=new_cursor,
        )

    def _missed(
        self, ended: list, partitions: dict[str, TablePartition], dates: set[str]
    ) -> list[AssetMaterialization]:
        """Merges the ledger has and Dagster does not, in the spans of runs that ended badly."""
        events = []
        for run in ended:
            span = span_of(run)
            if span is None:
                continue
            order = list(self.instance.get_dynamic_partitions(self.dates.name))
            if span[0] not in order or span[1] not in order:
                continue
            for dt in order[order.index(span[0]) : order.index(span[1]) + 1]:
                partition = partitions.get(dt)
                if partition is None or partition.merged_upper == 0 or dt not in dates:
                    continue
                if self._recorded_upper(dt) == partition.merged_upper:
                    continue
                events.append(
                    AssetMaterialization(
                        asset_key=self.asset_key,
                        partition=dt,
                        metadata={
                            "upper": partition.merged_upper,
                            "desired_manifest_version": partition.desired_manifest_version,
                            "recorded_by": "merge sensor: committed by a run that ended "
                            f"badly ({run.run_id})",
                        },
                    )
                )
        return events

    def _recorded_upper(self, dt: str) -> int | None:
        records = self.instance.fetch_materializations(
            AssetRecordsFilter(asset_key=self.asset_key, asset_partitions=[dt]), limit=1
        ).records
        if not records:
            return None
        materialization = records[0].asset_materialization
        value = materialization.metadata.get("upper") if materialization else None
        return None if value is None else int(value.value)  # type: ignore[arg-type]
