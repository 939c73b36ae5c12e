"""One tick of a stream's discovery sensor: what to add, what to run, what to record.

The store is the truth; a tick brings Dagster up to it (docs/architecture.md):
1. runs whose process died are marked failed (`runs.fail_dead_runs`), so they stop holding
   queue slots and stop looking like they still cover their partitions;
2. new objects after the discovery cursor, and (a bounded step of the reconciliation pass) objects
   behind it with no lease item, become lease items and dynamic partitions, and range runs;
3. work left behind — ASSIGNED leases whose owner stopped renewing (one lease timeout after its
   last renewal), CLOSED items whose reopen time passed, UNASSIGNED items that no run in flight
   covers (handed back by a stopping run, or their run failed or was canceled before taking
   them) — is requested at once, in as few range runs as the run size allows, unless a run
   already going will take it: one whose range covers it and that was created after it became
   free (a run takes each chunk's leases only when it gets there);
4. partitions COMPLETED in the store that Dagster has no materialization for (their run was
   canceled or killed after the commit, before Dagster recorded it) get one, carrying the
   commit's counts, without a run — looked for when a run ended badly and after each
   reconciliation pass; and each run that ended badly gets a line in its own log saying what
   of its range the store holds now (a canceled run's page otherwise ends on Dagster's
   interrupt trace).

`leasehold run` evaluates the same tick and executes exactly the runs it requests.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from dataclasses import dataclass, field

from dagster import (
    AddDynamicPartitionsRequest,
    AssetKey,
    AssetMaterialization,
    DagsterInstance,
    DagsterRun,
    DeleteDynamicPartitionsRequest,
    DynamicPartitionsDefinition,
    RunRequest,
    SensorResult,
    SkipReason,
)

from resources.coordination.items import (
    LeaseItem,
    PartitionStatus,
    to_millis,
    whole_priority_groups,
)
from resources.coordination.metrics import flush_or_keep
from resources.coordination.supplier import record_caught_up
from resources.dagster_resources.asset_metadata import with_row_count
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.instance import ensure_spark_pool
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.runs import (
    ENDED_BADLY,
    EXPECTED_COUNT,
    RANGE_END,
    RANGE_START,
    RETRY_TAG,
    STREAM_TAG,
    ended_since,
    fail_dead_runs,
    in_flight_positions,
    span_of,
)
from resources.ingestion.claimed_units import forget_index
from resources.ingestion.discovery import Discovery, DiscoveryResult, Lister
from resources.ingestion.notification_discovery import NotificationDiscovery
from resources.ingestion.outcomes import COMMITTED, committed_outcome
from resources.ingestion.partition_keys import from_partition_key, to_partition_key
from resources.ingestion.reconciliation import ReconcileState, ReconcileStep, Reconciliation
from resources.ingestion.run_planner import RunPlan, plan_retry_runs, plan_runs
from resources.settings import parse_iso_duration
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

# Runless materializations one tick records at most; the rest in the following ticks.
MAX_RECORDED_PER_TICK = 5000
# Completed units one tick takes out of the dynamic partitions at most.
MAX_RETIRED_PER_TICK = 5000
# An UNASSIGNED unit this much older than any tick that is not a Dagster partition was made
# by a tick that died before Dagster kept its result (with notifications, its events are gone):
# added then. Younger ones may be another node's tick, still being applied.
ORPHAN_AFTER_S = 300.0


@dataclass(frozen=True)
class SensorCursor:
    """The sensor's cursor: discovery's listing cursor, the reconciliation pass, and the newest
    badly ended run already looked at. A plain string is a cursor of an earlier version (the
    listing cursor alone)."""

    discovery: str | None = None
    reconcile: ReconcileState = field(default_factory=ReconcileState)
    runs_seen_s: float = 0.0
    retired: str | None = None
    """The completion priority up to which COMPLETED units left the dynamic partitions."""

    @classmethod
    def parse(cls, raw: str | None) -> SensorCursor:
        if not raw:
            return cls()
        try:
            value = json.loads(raw)
        except ValueError:
            value = None
        if not isinstance(value, dict) or "discovery" not in value:
            return cls(discovery=raw)
        return cls(
            value["discovery"],
            ReconcileState.from_json(value.get("reconcile")),
            float(value.get("runs_seen_s", 0.0)),
            value.get("retired"),
        )

    def dump(self) -> str:
        return json.dumps(
            {
                "discovery": self.discovery,
                "reconcile": self.reconcile.to_json(),
                "runs_seen_s": self.runs_seen_s,
                "retired": self.retired,
            }
        )


@dataclass
class Coverage:
    """Positions of the dynamic partitions, and which runs in flight cover which."""

    order: list[str]
    position: dict[str, int]
    pending: set[int]
    """Covered by a run not started yet: it will take them."""
    started: dict[int, int]
    """Covered by a started run -> the newest such run's creation (epoch ms). It will take
    those still UNASSIGNED, and those that became available (lease expired, CLOSED item
    reopened) before it was created — it takes each chunk's leases only when it gets there."""

    @classmethod
    def of(cls, instance: DagsterInstance, partitions_name: str, stream: str) -> Coverage:
        order = list(instance.get_dynamic_partitions(partitions_name))
        position = {k: i for i, k in enumerate(order)}
        pending: set[int] = set()
        started: dict[int, int] = {}
        for span, positions in in_flight_positions(instance, stream, position):
            if not span.started:
                pending.update(positions)
                continue
            for p in positions:
                started[p] = max(started.get(p, 0), span.created_ms)
        return cls(order, position, pending, started)

    def taken_by_a_started_run(self, p: int, item: LeaseItem) -> bool:
        """Whether a started run covering position `p` will take `item` (due for retry)."""
        created_ms = self.started.get(p)
        if created_ms is None:
            return False
        if item.status is PartitionStatus.UNASSIGNED:
            return True
        # A lease that expired (or a CLOSED item that reopened) after the run was created
        # may be the run's own, one it stopped renewing: that is asked for again.
        available_ms = (
            item.ownership_timeout_ms
            if item.status is PartitionStatus.ASSIGNED
            else item.reopen_at_ms
        )
        return available_ms is not None and available_ms < created_ms


class DiscoveryTick:
    """One tick of a stream's discovery sensor: new objects and left-behind work become partitions
    and range runs."""

    def __init__(
        self,
        instance: DagsterInstance,
        stream: str,
        partitions: DynamicPartitionsDefinition,
        asset_key: AssetKey,
        coordination: CoordinationResource,
        lake: LakeResource,
    ) -> None:
        self.instance = instance
        self.stream = stream
        self.partitions = partitions
        self.asset_key = asset_key
        self.coordination = coordination
        self.lake = lake
        self.store: CoordinationStore = coordination.store
        self.sid = coordination.source_identifier(stream)
        self.summary = ""
        """What the last `evaluate` did, in one line (the sensor logs it on its tick)."""

    def evaluate(self, raw_cursor: str | None) -> SensorResult | SkipReason:
        cursor = SensorCursor.parse(raw_cursor)
        ensure_spark_pool(self.instance)  # before the UI queues runs: `ensure_spark_pool`
        dead = fail_dead_runs(self.instance, self.stream)
        config = self.lake.stream(self.stream)
        found, reconciled, events_seen = self._find_new(cursor, config)
        if found.skipped_reason:
            return SkipReason(found.skipped_reason)
        coverage = Coverage.of(self.instance, str(self.partitions.name), self.stream)
        if reconciled is None:  # what discovery just listed is known
            reconciled = self._reconcile(cursor, self.lake.lister(self.stream), config)
        added = list(
            dict.fromkeys(
                pk
                for k in [*found.source_keys, *reconciled.created]
                if (pk := to_partition_key(k)) not in coverage.position
            )
        )
        retry_plans, orphans = self._retry_plans(coverage)
        added += [pk for pk in orphans if pk not in added]
        runs = [self._request(plan) for plan in retry_plans]
        runs += [
            self._request(plan)
            for plan in plan_runs(self.stream, added, self.lake.max_partitions_per_run)
        ]
        ended, runs_seen_s = ended_since(
            self.instance, self.stream, cursor.runs_seen_s, ENDED_BADLY
        )
        events: list[AssetMaterialization] = []
        if ended or reconciled.finished_pass:
            events = self._unrecorded_commits(coverage)
            if len(events) > MAX_RECORDED_PER_TICK:
                events, runs_seen_s = events[:MAX_RECORDED_PER_TICK], cursor.runs_seen_s
        if runs_seen_s != cursor.runs_seen_s:  # each ended run once, when the cursor passes it
            self._report_ended(ended, coverage, {str(e.partition) for e in events})
        retired, retired_upto = self._retired(coverage, cursor.retired)
        flush_or_keep(self.store)
        next_cursor = SensorCursor(found.cursor, reconciled.state, runs_seen_s, retired_upto).dump()
        summary = (
            events_seen + f"{found.listed} objects listed ({len(found.source_keys)} units), "
            f"{len(reconciled.created)} units of late objects found ({reconciled.listed} "
            f"reconciled), {len(added)} partitions added, {len(retired)} retired, {len(runs)} "
            f"runs requested, {len(events)} commits recorded, {len(dead)} dead runs marked failed"
        )
        log.info("%s: discovery tick: %s", self.stream, summary)
        self.summary = summary
        if not runs and not added and not events and not retired:
            return SensorResult(skip_reason=f"nothing to do: {summary}", cursor=next_cursor)
        requests: list[AddDynamicPartitionsRequest | DeleteDynamicPartitionsRequest] = []
        if added:
            requests.append(self.partitions.build_add_request(added))
        if retired:
            requests.append(self.partitions.build_delete_request(retired))
        return SensorResult(
            run_requests=runs,
            dynamic_partitions_requests=requests,
            asset_events=events,
            cursor=next_cursor,
        )

    def _find_new(
        self, cursor: SensorCursor, config: StreamConfig
    ) -> tuple[DiscoveryResult, ReconcileStep | None, str]:
        """New objects made work units, as the stream's `discovery` says: from its S3 events
        (with the backstop pass's step), or listed after the cursor (the pass follows), or —
        keys not ordered — by the pass alone."""
        if config.discovery.notifications:
            step = NotificationDiscovery(
                self.store,
                self.stream,
                self.lake.event_queue(self.stream),
                self.lake.source_location(self.stream),
                owner=self.coordination.owner,
                timeout_s=self.coordination.ownership_timeout_seconds,
                max_messages=self.lake.max_objects_per_tick,
                visibility_s=self.lake.notification_visibility_seconds,
                backstop_interval_s=config.discovery.backstop_interval_s,
                unit_max_objects=config.partition.max_objects,
                unit_max_bytes=config.partition.max_bytes,
                on_change=config.on_change,
            ).discover(cursor.reconcile)
            seen = ", ".join(f"{n} {what}" for what, n in sorted(step.counts.items()) if n)
            return step.found, step.backstop, f"events: {seen or 'none'}; "
        forget_index(
            self.store,
            self.stream,
            self.coordination.owner,
            self.coordination.ownership_timeout_seconds,
        )
        if not config.discovery.ordered_keys:
            return DiscoveryResult([], 0, None), None, ""
        return self._discover(cursor, self.lake.lister(self.stream), config), None, ""

    def _discover(
        self, cursor: SensorCursor, lister: Lister, config: StreamConfig
    ) -> DiscoveryResult:
        """The objects listed after the discovery cursor, made work units."""
        return Discovery(
            self.store,
            self.stream,
            lister,
            owner=self.coordination.owner,
            timeout_s=self.coordination.ownership_timeout_seconds,
            max_objects_per_tick=self.lake.max_objects_per_tick,
            unit_max_objects=config.partition.max_objects,
            unit_max_bytes=config.partition.max_bytes,
        ).discover(cursor.discovery)

    def _reconcile(
        self, cursor: SensorCursor, lister: Lister, config: StreamConfig
    ) -> ReconcileStep:
        """One step of the reconciliation pass over objects behind the discovery cursor (the
        whole source when keys are not ordered: a finished pass then says the stream caught up
        with what landed before it started)."""
        whole = not config.discovery.ordered_keys
        step = Reconciliation(
            self.store,
            self.stream,
            lister,
            interval_s=self.lake.reconcile_interval_seconds,
            max_objects=self.lake.max_objects_per_tick,
            unit_max_objects=config.partition.max_objects,
            unit_max_bytes=config.partition.max_bytes,
            whole_source=whole,
            on_change=config.on_change,
        ).step(cursor.reconcile, cursor.discovery)
        if whole and step.finished_pass:
            record_caught_up(
                self.store,
                self.stream,
                self.coordination.owner,
                self.coordination.ownership_timeout_seconds,
                step.state.started_ms,
            )
        return step

    def _retired(self, coverage: Coverage, after: str | None) -> tuple[list[str], str | None]:
        """Work units COMPLETED longer ago than the retention leave the dynamic partitions
        (their materializations stay in the event log; their lease items and commit records
        stay in the store, so their objects stay held and are never ingested or added again).
        Read by completion time after the cursor: each unit once, ever, so a tick costs what
        completed since the last, not the history. A unit a queued or started run's range
        covers waits (ranges are positional: removing a key would shift them); the cursor stops
        before it. Dead letters stay: they are what the UI must keep showing."""
        retention_s = parse_iso_duration(self.lake.partition_retention, "partition_retention")
        before = self.store.now_ms() - to_millis(retention_s)
        items = whole_priority_groups(
            self.store.completed_between(self.sid, after, before, MAX_RETIRED_PER_TICK),
            MAX_RETIRED_PER_TICK,
        )
        retired: list[str] = []
        for item in items:
            pk = to_partition_key(item.partition_key)
            p = coverage.position.get(pk)
            if p is not None and (p in coverage.pending or p in coverage.started):
                break
            if p is not None and item.dead_letter_reason is None:
                retired.append(pk)
            after = item.priority
        return retired, after

    def _request(self, plan: RunPlan) -> RunRequest:
        tags = {
            STREAM_TAG: self.stream,
            RANGE_START: plan.first,
            RANGE_END: plan.last,
            EXPECTED_COUNT: str(plan.count),
        }
        if plan.retry:
            tags[RETRY_TAG] = "true"
        # No checks planned in it (they would show SKIPPED until the checks sensor's run):
        # the checks sensor runs them once the run ends.
        return RunRequest(
            run_key=plan.run_key, asset_selection=[self.asset_key], asset_check_keys=[], tags=tags
        )

    def _retry_plans(self, coverage: Coverage) -> tuple[list[RunPlan], list[str]]:
        """Runs for work left behind, and the partition keys of units the store holds that
        Dagster never got (`ORPHAN_AFTER_S`): they are added now, and run from the next tick."""
        max_runs = self.lake.max_retries_per_tick
        if max_runs == 0:
            return [], []
        items = self.store.due_for_retry(
            self.sid, max_runs * self.lake.max_partitions_per_run, unassigned_for_s=0
        )
        due, fingerprint, orphans = [], [], []
        orphan_before = self.store.now_ms() - to_millis(ORPHAN_AFTER_S)
        for item in items:
            pk = to_partition_key(item.partition_key)
            p = coverage.position.get(pk)
            if p is None and item.status is PartitionStatus.UNASSIGNED:
                if int(item.priority.split(".")[0]) < orphan_before:
                    orphans.append(pk)
                continue
            if p is None or p in coverage.pending:
                continue  # not a partition yet (discovery adds it), or a queued run takes it
            if coverage.taken_by_a_started_run(p, item):
                continue  # a started run will reach it
            due.append(pk)
            fingerprint.append(f"{pk}:{item.status.value}:{item.epoch}:{item.closed_count}")
        if not due:
            return [], orphans
        # The same work, unchanged, is asked for again once per lease timeout: a run that
        # failed before it took its leases left the items as they were.
        window = self.store.now_ms() // to_millis(self.coordination.ownership_timeout_seconds)
        key = f"{window}|" + "|".join(sorted(fingerprint))
        unleased: set[str] = set()
        while True:
            plans = plan_retry_runs(
                self.stream,
                coverage.order,
                due,
                max_partitions_per_run=self.lake.max_partitions_per_run,
                max_runs=max_runs,
                unleased=unleased,
                fingerprint=key,
            )
            spanned = [
                from_partition_key(k)
                for plan in plans
                for k in coverage.order[
                    coverage.position[plan.first] : coverage.position[plan.last] + 1
                ]
            ]
            missing = {to_partition_key(k) for k in self.store.missing_keys(self.sid, spanned)}
            if not missing - unleased:
                return plans, orphans
            unleased |= missing

    def _report_ended(
        self, ended: list[DagsterRun], coverage: Coverage, recorded: set[str]
    ) -> None:
        """A line in each badly ended run's own log (its page in the UI): what the store holds
        of its range now. One item read per partition of the run: what the run cost, once."""
        for run in ended:
            span = span_of(run)
            first, last = (coverage.position.get(k) for k in span) if span else (None, None)
            if first is None or last is None:
                continue  # its partitions left the dynamic partitions since (retention)
            keys = coverage.order[first : last + 1]
            held: Counter[str] = Counter()
            for pk in keys:
                item = self.store.get(self.sid, from_partition_key(pk))
                held[item.status.value if item else "without a lease item"] += 1
            message = (
                f"leasehold: this run ended {run.status.value}. Of its {len(keys)} partitions "
                f"the store now holds {held.pop(PartitionStatus.COMPLETED.value, 0)} committed "
                f"({len(recorded & set(keys))} of them recorded now, without a run), "
                f"{held.pop(PartitionStatus.UNASSIGNED.value, 0)} free (never taken or handed "
                "back; requested again by the discovery sensor), "
                f"{held.pop(PartitionStatus.ASSIGNED.value, 0)} leased (by another run, or "
                "until this run's leases expire)"
                + "".join(f", {n} {status}" for status, n in sorted(held.items()))
            )
            self.instance.report_engine_event(message, dagster_run=run)

    def _unrecorded_commits(self, coverage: Coverage) -> list[AssetMaterialization]:
        """Units COMPLETED in the store that Dagster shows unmaterialized, with no run in
        flight for them. Only the dynamic partitions without a materialization are read
        (one item each), never the store's history: a unit retired from the partitions
        (completed longer than the retention ago) is out of the UI's sight, and this scan,
        which follows every badly ended run, recorded it long before."""
        materialized = self.instance.get_materialized_partitions(self.asset_key)
        events = []
        for pk in coverage.order:
            p = coverage.position[pk]
            if pk in materialized or p in coverage.pending or p in coverage.started:
                continue
            item = self.store.get(self.sid, from_partition_key(pk))
            if (
                item is None
                or item.status is not PartitionStatus.COMPLETED
                or item.dead_letter_reason
            ):
                continue
            outcome = committed_outcome(
                item,
                COMMITTED,
                "recorded by the discovery sensor: committed in the store, but its run ended "
                "before Dagster recorded it",
            )
            events.append(
                AssetMaterialization(
                    asset_key=self.asset_key,
                    partition=pk,
                    metadata=with_row_count(outcome.metadata(), outcome.rows_written),
                )
            )
        return events
