"""One tick of a stream's merge sensor: close, add dates, request merges, record missed ones.

1. Table partitions whose day (plus `merge.close_grace`) has ended are closed (idempotent),
   once the stream's ingestion caught up (`resources/compaction/closing.py`); closing makes
   their merge job due at once.
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

import logging

from dagster import AssetMaterialization, DagsterRun, SensorResult, SkipReason

from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.range_tick import RangeTick, recorded_value
from resources.dagster_resources.runs import CLOSED_DUE_NOW, MERGE_TAG
from resources.ledger.model import TablePartition

log = logging.getLogger(__name__)


class MergeTick(RangeTick):
    """One tick of a table's merge sensor: runs for the partitions whose merge job is due."""

    run_tag = MERGE_TAG
    kind = "merge"
    closed_due_now = False
    """`leasehold run`'s tick: closed partitions with a pending job are due now
    (`MergeSchedule.due(closed_now=True)`), and its runs say so (`CLOSED_DUE_NOW`)."""

    def evaluate(self, cursor: str | None) -> SensorResult | SkipReason:
        runs_seen_s = self._start(cursor)
        schedule = self.lake.merge_schedule(self.stream, self.coordination)
        partitions, closed = schedule.refresh()
        dates = self._dates(p.dt for p in partitions)
        busy = schedule.running()
        due = schedule.due(partitions, closed_now=self.closed_due_now)
        wanted = [p.dt for p in due if p.dt not in busy and dates.free(p.dt)]
        now_ms = schedule.store.now_ms()
        requests = self._requests(
            dates.order,
            wanted,
            self.lake.max_merges_per_run,
            now_ms,
            due_only=CLOSED_DUE_NOW if self.closed_due_now else "true",
        )
        ended, runs_seen_s = self._ended_badly(runs_seen_s)
        missed = self._missed(ended, {p.dt: p for p in partitions}, set(dates.order))
        flush_or_keep(schedule.store)
        if not (requests or dates.new or missed or closed):
            return self._skip(
                runs_seen_s,
                f"nothing due: {len(partitions)} table partitions, "
                f"{sum(p.unmerged > 0 for p in partitions)} with unmerged objects; "
                + schedule.next_due(partitions),
            )
        if closed:
            log.info("%s: closed %s", self.stream, ", ".join(p.dt for p in closed))
        return self._result(requests, dates.new, missed, runs_seen_s)

    def _missed(
        self, ended: list[DagsterRun], partitions: dict[str, TablePartition], dates: set[str]
    ) -> list[AssetMaterialization]:
        """Merges the ledger has and Dagster does not, in the spans of runs that ended badly."""
        events = []
        for run, dt in self._span_dates(ended):
            partition = partitions.get(dt)
            if partition is None or partition.merged_upper == 0 or dt not in dates:
                continue
            if recorded_value(self.instance, self.asset_key, dt, "upper") == partition.merged_upper:
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
