"""What a tick of the merge sensor and one of the publication sensor share: both request runs
over ranges of the stream's date partitions and record what runs that ended badly did.

Each tick: fail the stream's dead runs; add the dates it has seen that Dagster does not hold
yet; leave out the dates a run of its kind in flight covers; request the rest, many per run, in
ranges of the date partitions (`plan_merge_runs`); and walk the dates of its runs that ended
badly since the cursor, for what they did that Dagster never recorded. What is due and what a
missed run did are each tick's own (`merge_tick`, `publication_tick`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import ClassVar

from dagster import (
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    DagsterInstance,
    DagsterRun,
    DynamicPartitionsDefinition,
    RunRequest,
    SensorResult,
    SkipReason,
)

from resources.compaction.merge_schedule import plan_merge_runs
from resources.dagster_resources.catalog import CatalogResource
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    DUE_ONLY_TAG,
    ENDED_BADLY,
    RANGE_END,
    RANGE_START,
    ended_since,
    fail_dead_runs,
    in_flight_positions,
    span_of,
)


def recorded_value(
    instance: DagsterInstance, asset_key: AssetKey, dt: str, name: str
) -> int | None:
    """The metadata value `name` of the materialization Dagster last recorded for `dt`."""
    records = instance.fetch_materializations(
        AssetRecordsFilter(asset_key=asset_key, asset_partitions=[dt]), limit=1
    ).records
    if not records:
        return None
    materialization = records[0].asset_materialization
    value = materialization.metadata.get(name) if materialization else None
    # An int this tick recorded itself; Dagster types a metadata value's `.value` as any kind.
    return None if value is None else int(value.value)  # type: ignore[arg-type]


@dataclass(frozen=True)
class TickDates:
    """The date partitions as this tick sees them."""

    new: list[str]
    """Dates seen that Dagster does not hold yet: the tick adds them."""
    order: list[str]
    """The date partitions Dagster holds, then the new ones: what ranges are ranges of."""
    position: dict[str, int]
    """Each date's place in `order`."""
    covered: set[int]
    """Positions in `order` a run of the tick's kind in flight covers."""

    def free(self, dt: str) -> bool:
        """No run of the tick's kind in flight covers `dt`."""
        return self.position[dt] not in self.covered


class RangeTick:
    """The steps the merge and publication ticks share; a subclass names its run tag and kind
    and evaluates."""

    run_tag: ClassVar[str]
    """The tag (= stream) the tick's runs carry, in flight or ended."""
    kind: ClassVar[str]
    """The run key's word for the tick's runs."""

    def __init__(
        self,
        instance: DagsterInstance,
        stream: str,
        dates: DynamicPartitionsDefinition,
        asset_key: AssetKey,
        coordination: CoordinationResource,
        lake: LakeResource,
        catalog: CatalogResource | None = None,
    ) -> None:
        """`catalog`: for the ticks whose due work depends on it (publication, rollups)."""
        self.instance = instance
        self.stream = stream
        self.dates = dates
        if dates.name is None:
            raise ValueError("the date partitions of a range tick must be named")
        self._dates_name: str = dates.name
        self.asset_key = asset_key
        self.coordination = coordination
        self.lake = lake
        self._catalog = catalog

    @property
    def catalog(self) -> CatalogResource:
        if self._catalog is None:
            raise ValueError(f"a {self.kind} tick needs the catalog resource")
        return self._catalog

    def _start(self, cursor: str | None) -> float:
        """Fail the stream's dead runs; the cursor's `runs_seen_s`."""
        state = json.loads(cursor) if cursor else {}
        runs_seen_s = float(state.get("runs_seen_s", 0.0))
        fail_dead_runs(self.instance, self.stream)
        return runs_seen_s

    def _dates(self, seen: Iterable[str]) -> TickDates:
        """The date partitions with the dates `seen` added, and which a run in flight covers."""
        existing = list(self.instance.get_dynamic_partitions(self._dates_name))
        known = set(existing)
        new = [dt for dt in seen if dt not in known]
        order = existing + new
        position = {dt: i for i, dt in enumerate(order)}
        covered: set[int] = set()
        for _, positions in in_flight_positions(self.instance, self.stream, position, self.run_tag):
            covered.update(positions)
        return TickDates(new, order, position, covered)

    def _requests(
        self,
        order: Sequence[str],
        wanted: Sequence[str],
        per_run: int,
        now_ms: int,
        due_only: str = "true",
    ) -> list[RunRequest]:
        """Runs for the `wanted` dates, at most `per_run` each, in ranges of `order`, tagged
        `DUE_ONLY_TAG: due_only`."""
        return [
            RunRequest(
                run_key=f"{self.stream}:{self.kind}:{plan.first}:{plan.last}:{now_ms}",
                asset_selection=[self.asset_key],
                asset_check_keys=[],  # the checks sensor runs them: none planned, then skipped
                tags={
                    self.run_tag: self.stream,
                    DUE_ONLY_TAG: due_only,
                    RANGE_START: plan.first,
                    RANGE_END: plan.last,
                },
            )
            for plan in plan_merge_runs(list(order), list(wanted), per_run)
        ]

    def _ended_badly(self, runs_seen_s: float) -> tuple[list[DagsterRun], float]:
        """The tick's runs that ended badly since `runs_seen_s`, and the next `runs_seen_s`."""
        return ended_since(
            self.instance, self.stream, runs_seen_s, ENDED_BADLY, tags=(self.run_tag,)
        )

    def _span_dates(self, ended: Iterable[DagsterRun]) -> Iterator[tuple[DagsterRun, str]]:
        """Each run of `ended` with each date partition its range covers now."""
        order: list[str] | None = None
        for run in ended:
            span = span_of(run)
            if span is None:
                continue
            if order is None:
                order = list(self.instance.get_dynamic_partitions(self._dates_name))
            if span[0] not in order or span[1] not in order:
                continue
            for dt in order[order.index(span[0]) : order.index(span[1]) + 1]:
                yield run, dt

    def _skip(self, runs_seen_s: float, reason: str) -> SensorResult:
        return SensorResult(skip_reason=SkipReason(reason), cursor=self._cursor(runs_seen_s))

    def _result(
        self,
        requests: list[RunRequest],
        new: list[str],
        missed: list[AssetMaterialization],
        runs_seen_s: float,
    ) -> SensorResult:
        return SensorResult(
            run_requests=requests,
            dynamic_partitions_requests=[self.dates.build_add_request(new)] if new else [],
            asset_events=missed,
            cursor=self._cursor(runs_seen_s),
        )

    @staticmethod
    def _cursor(runs_seen_s: float) -> str:
        return json.dumps({"runs_seen_s": runs_seen_s})
