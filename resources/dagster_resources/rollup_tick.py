"""One tick of a stream's rollup sensor: request rollups of the table partitions that moved.

1. `due_dates`: table partitions some rollup has not brought up to their last committed id
   (commits landed since its last run), whose batch a dead writer left half written, or whose
   state the rollup's table does not serve yet (its publication failed).
2. Those dates Dagster does not hold yet become date partitions.
3. Every due date no rollup run in flight covers is requested, many per run, in ranges of the
   date partitions. The rollup job lease decides within: two runs on one date never write its
   state at once, and a dead writer's batch is replayed by the next holder.
A rollup run records its materializations itself; one killed before recording them leaves a
state the next run finds up to date — the asset's page then lags the store, never the data.
"""

from __future__ import annotations

from dagster import SensorResult

from resources.aggregation.runner import due_dates
from resources.coordination.metrics import flush_or_keep
from resources.dagster_resources.range_tick import RangeTick
from resources.dagster_resources.runs import ROLLUP_TAG
from resources.key_settings import published_rows_leave

MAX_ROLLUPS_PER_RUN = 100
"""Table partitions one rollup run brings up to date."""


class RollupTick(RangeTick):
    """One tick of a stream's rollup sensor: requests runs for the dates whose rollups are behind
    the ledger."""

    run_tag = ROLLUP_TAG
    kind = "rollup"

    def evaluate(self, cursor: str | None) -> SensorResult:
        runs_seen_s = self._start(cursor)
        store = self.coordination.store
        config = self.lake.stream(self.stream)
        due = due_dates(
            store,
            self.lake.table_name(self.stream),
            config.rollups,
            self.catalog.rollup_positions(self.stream, self.lake),
            served=published_rows_leave(config.dedupe, config.on_change),
        )
        dates = self._dates(due)
        wanted = [dt for dt in due if dates.free(dt)]
        requests = self._requests(dates.order, wanted, MAX_ROLLUPS_PER_RUN, store.now_ms())
        _, runs_seen_s = self._ended_badly(runs_seen_s)
        flush_or_keep(store)
        if not (requests or dates.new):
            return self._skip(
                runs_seen_s,
                f"nothing to request: {len(due)} table partitions due, all in rollup runs in flight"
                if due
                else "nothing to roll up: every rollup is at its partition's last committed id",
            )
        return self._result(requests, dates.new, [], runs_seen_s)
