"""The discovery and ingestion stage of `leasehold run`: the discovery sensor ticked in this
process, and each ingestion run it requests executed here.

A tick's new work units and the commits it records without a run go into the report; a run key
executes once, like the daemon's dedup; a failed run's partitions are listed with their reasons
(a later run that ingests one takes it out), other errors are crashed runs.
"""

import re
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, cast

from dagster import (
    AddDynamicPartitionsRequest,
    AssetMaterialization,
    AssetsDefinition,
    DagsterInstance,
    ExecuteInProcessResult,
    RunRequest,
    SensorResult,
    SkipReason,
    build_resources,
    materialize,
)

from coordination_assets.ingestion import (
    FAILED_KEYS,
    FAILED_PARTITIONS,
    RECORDED_BEFORE,
    build_discovery_sensor,
    main_job_cursor_key,
    partitions_for,
)
from coordination_assets.run_progress import Progress
from coordination_assets.run_report import MainJobReport
from coordination_assets.sensor_loop import QUIET, in_this_process, sensor_ticks
from resources.coordination.waiting import waiting_units
from resources.dagster_resources.discovery_tick import SensorCursor
from resources.dagster_resources.runs import EXPECTED_COUNT, RANGE_START, RETRY_TAG
from resources.ingestion.unit_progress import quarantine_table
from resources.ledger.committed_rows import CommitMarks, commit_marks, rows_committed_since
from resources.stores.base import CoordinationStore

CRASHES_IN_A_ROW = 3
"""Runs of a stream that crash one after the other (not a unit's failure: the run itself, e.g.
Spark's executors lack a library) after which `leasehold run` stops asking for more: each
would fail the same way, and the units are retried by the next `leasehold run` or the daemon."""


@contextmanager
def stream_store(resources: Mapping[str, Any]) -> Iterator[CoordinationStore]:
    """The coordination store of `resources` (its settings resolved, as in a run), for what
    `leasehold run` reads of it itself; closed at the end."""
    with build_resources({"coordination": resources["coordination"]}) as built:
        yield built.coordination.store


def ingested_tables(stream: str) -> tuple[str, str]:
    """The tables a stream's commits write: its table (named as the stream, as
    `LakeResource.table_name` names it) and its quarantine."""
    return stream, quarantine_table(stream)


def ingestion_marks(store: CoordinationStore, stream: str) -> CommitMarks:
    """Where the ledger stands before ingestion (`commit_marks`): O(dates)."""
    return commit_marks(store, ingested_tables(stream))


def account_for_ingestion(
    store: CoordinationStore, stream: str, marks: CommitMarks, report: MainJobReport
) -> None:
    """Once ingestion ended, into the report: the rows the ledger registered since `marks`
    (what this invocation committed, whatever its runs managed to report) and, when it
    ingested nothing, the units that wait (`waiting_units`: a status-index read, O(units
    waiting))."""
    table, quarantine = ingested_tables(stream)
    rows = rows_committed_since(store, marks, (table, quarantine))
    report.committed = {
        "rows_read": rows[table] + rows[quarantine],
        "rows_written": rows[table],
        "rows_quarantined": rows[quarantine],
    }
    if report.ingested_nothing:
        report.waiting = waiting_units(store, stream)


def run_ingestion(
    asset_def: AssetsDefinition,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    stream: str,
    report: MainJobReport,
    max_ticks: int,
    log: Callable[[str], None],
    progress: Progress | None,
) -> None:
    """Tick the discovery sensor and do what it says, as the daemon would, until it asks for
    nothing new: add its partitions, record its runless materializations, execute each run
    it requests (a run key executes once) and keep its cursor."""
    sensor = build_discovery_sensor(stream)
    executed: set[str] = set()
    ticks = sensor_ticks(
        sensor, instance, resources, partitions_for(stream), main_job_cursor_key(stream), max_ticks
    )
    passes = _ReconciliationPasses()
    crashes = 0
    for result in ticks:
        report.ticks += 1
        if isinstance(result, SkipReason) or not isinstance(result, SensorResult):
            report.discovery_skipped = str(getattr(result, "skip_message", result))
            log(f"{stream}: discovery skipped: {report.discovery_skipped}")
            break
        _record_tick(result, report)
        runs = [r for r in result.run_requests or [] if r.run_key not in executed]
        if not runs and not passes.continues(result.cursor):
            break
        for run in runs:
            executed.add(str(run.run_key))
            if progress is not None:
                progress.update(
                    f"run {report.runs + 1}: {run.tags.get(EXPECTED_COUNT, '1')} work units"
                    f" ({report.rows['rows_read']:,} records read so far)"
                )
            crashed = _execute_ingestion_run(
                run, asset_def, instance, resources, report, log, stream
            )
            crashes = crashes + 1 if crashed else 0
            if report.spark_stalled:
                log(
                    f"{stream}: Spark made no progress; no more runs this time (the next would "
                    "wait as long again; the units' leases are handed back)"
                )
                return
            if crashes >= CRASHES_IN_A_ROW:
                log(
                    f"{stream}: {crashes} runs in a row crashed; no more runs this time (their "
                    "units are retried by the next `leasehold run` or the daemon)"
                )
                return


class _ReconciliationPasses:
    """Whether a tick that asked for nothing new leaves a reconciliation pass to follow: its
    step lists a bounded page behind the discovery cursor (`LEASEHOLD_MAX_OBJECTS_PER_TICK`),
    so the late objects of a large source may lie pages ahead. `leasehold run` ticks on until
    the pass in progress ends — once: with an interval of 0 the next pass would start at once,
    and so on without end."""

    def __init__(self) -> None:
        self.seen = False
        """A tick of this run left a pass in progress."""
        self.ended = False
        """A pass in progress during this run has ended."""

    def continues(self, raw_cursor: str | None) -> bool:
        """Note the tick's cursor; True while the first pass seen in this run is in progress."""
        in_pass = SensorCursor.parse(raw_cursor).reconcile.in_pass
        self.ended = self.ended or (self.seen and not in_pass)
        self.seen = self.seen or in_pass
        return in_pass and not self.ended


def _record_tick(result: SensorResult, report: MainJobReport) -> None:
    """A tick's new work units, and the commits it recorded without a run (Dagster had missed
    them), into the report."""
    report.new_units += sum(
        len(request.partition_keys)
        for request in result.dynamic_partitions_requests or []
        if isinstance(request, AddDynamicPartitionsRequest)
    )
    for event in result.asset_events or []:
        report.recorded += 1
        if isinstance(event, AssetMaterialization):
            report.add_commit_rows(event.metadata)
            if event.partition is not None:
                report.not_ingested.pop(event.partition, None)


def _execute_ingestion_run(
    run: RunRequest,
    asset_def: AssetsDefinition,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    report: MainJobReport,
    log: Callable[[str], None],
    stream: str,
) -> bool:
    """Execute an ingestion run in this process, into the report: its commits' rows (a
    partition recorded before is not counted twice), its failed partitions, its crash. True
    when the run crashed (an error other than its partitions' failures)."""
    report.runs += 1
    retry = run.tags.get(RETRY_TAG) == "true"
    report.retry_runs += int(retry)
    count = run.tags.get(EXPECTED_COUNT, "1")
    report.partitions += int(count)
    outcome = materialize(
        [asset_def],
        instance=instance,
        resources=resources,
        tags={**run.tags, **in_this_process()},
        partition_key=run.partition_key,
        raise_on_error=False,
        run_config=QUIET,
    )
    for event in outcome.get_asset_materialization_events():
        if event.partition is not None:
            report.not_ingested.pop(event.partition, None)
        recorded = event.materialization.metadata.get(RECORDED_BEFORE)
        if recorded is not None and recorded.value:
            continue  # a complete partition recorded again: its rows were counted when it was
        report.materialized += 1
        report.add_commit_rows(event.materialization.metadata)
    first = run.tags.get(RANGE_START, run.partition_key)
    what = f"{stream}: {'retry ' if retry else ''}run {first} .. ({count} partitions)"
    if outcome.success:
        log(f"{what}: ok")
        return False
    partitions, errors = _failures(outcome)
    report.spark_stalled = report.spark_stalled or _raised(outcome, STALLED)
    report.not_ingested.update(partitions)
    report.crashed_runs += errors
    log(f"{what}: {len(partitions)} partitions failed" + (f"; {errors[0]}" if errors else ""))
    return bool(errors)


STALLED = "SparkStalledError"
"""The error a Spark job that made no progress is cancelled with (resources/spark/progress.py)."""


def _raised(result: ExecuteInProcessResult, error_class: str) -> bool:
    """Whether a step of the run failed with `error_class`, or an error it caused."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        info = event.step_failure_data.error
        while info is not None:
            if info.cls_name == error_class:
                return True
            info = info.cause or info.context
    return False


WRAPPERS = ("DagsterExecutionStepExecutionError", "DagsterUserCodeExecutionError")
"""Dagster's errors around the one a step raised, which they name as their cause."""


def error_line(info: Any) -> str:
    """What a step raised (Dagster's `SerializableErrorInfo`), on one line: the error inside
    Dagster's wrappers; leasehold's own (whose messages say everything) without their class
    name."""
    while info.cls_name in WRAPPERS and info.cause is not None:
        info = info.cause
    line = " ".join(info.message.split())
    own = re.match(r"^resources(?:\.\w+)+\.\w+: ", line)
    return line[own.end() :] if own else line


def _failures(result: ExecuteInProcessResult) -> tuple[dict[str, str], list[str]]:
    """(failure line per partition key, other errors) of a failed run."""
    partitions: dict[str, str] = {}
    errors: list[str] = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            user = data.user_failure_data
            if user is not None and FAILED_PARTITIONS in user.metadata:
                lines = cast(list[str], user.metadata[FAILED_PARTITIONS].value)
                keys = cast(list[str], user.metadata[FAILED_KEYS].value)
                partitions.update(zip(keys, lines, strict=True))
            else:
                errors.append(error_line(data.error) if data.error else str(event.message))
        elif event.is_run_failure and not (partitions or errors):
            errors.append(str(event.message))
    return partitions, errors
