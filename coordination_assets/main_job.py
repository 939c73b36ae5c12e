"""The main job, end to end in one process: what the daemon would do, without the daemon.

`leasehold run` uses it: evaluate the discovery sensor, apply its dynamic-partition request and
the commits it records, execute each run it requests (new ranges and work left behind), until
it asks for nothing new; then the same with the merge sensor (close the table partitions whose
day ended, once ingestion caught up; merge those due, and every closed partition with a pending
merge job — its delayed objects — without waiting for its due time), then with the
publication sensor (switch and publish what became due, repair a catalog that lags), then,
for a stream that declares rollups, with the rollup sensor (every rollup brought up to the
last commit); then run the asset checks. The same sensors, assets and checks that `dagster dev`
runs — only the scheduling differs.
"""

import os
import time
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dagster import (
    AddDynamicPartitionsRequest,
    AssetCheckSeverity,
    AssetKey,
    AssetMaterialization,
    AssetRecordsFilter,
    AssetsDefinition,
    AssetSelection,
    BetaWarning,
    DagsterInstance,
    Definitions,
    DynamicPartitionsDefinition,
    ExecuteInProcessResult,
    PreviewWarning,
    RunRequest,
    SensorDefinition,
    SensorResult,
    SkipReason,
    build_sensor_context,
    materialize,
)

from coordination_assets.compaction import (
    FAILED_MERGES,
    build_merge_asset,
    build_merge_checks,
    build_merge_sensor,
    dates_for,
    merge_cursor_key,
)
from coordination_assets.definitions import build_definitions
from coordination_assets.ingestion import (
    FAILED_KEYS,
    FAILED_PARTITIONS,
    RECORDED_BEFORE,
    build_discovery_sensor,
    build_ingestion_asset,
    build_ingestion_checks,
    main_job_cursor_key,
    partitions_for,
)
from coordination_assets.publication import (
    FAILED_PUBLICATIONS,
    build_publication_asset,
    build_publication_checks,
    build_publication_sensor,
    publish_cursor_key,
    table_asset_key,
)
from coordination_assets.rollups import (
    FAILED_ROLLUPS,
    build_rollup_asset,
    build_rollup_checks,
    build_rollup_sensor,
    rollup_asset_key,
    rollup_cursor_key,
)
from resources.dagster_resources.door import open_instance
from resources.dagster_resources.instance import (
    ensure_spark_pool,
    write_instance_yaml,
    written_by_leasehold,
)
from resources.dagster_resources.runs import (
    CHECKS_TAG,
    EXPECTED_COUNT,
    PROCESS_TAG,
    RANGE_END,
    RANGE_START,
    RETRY_TAG,
    apply_partition_requests,
    process_identity,
)

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}

MAX_TABLE_LINES = 30
"""Table partitions the summary lists one per line; the rest are counted (`leasehold table ls`
lists them all)."""


@dataclass(frozen=True)
class TablePartitionState:
    """What Dagster last recorded for a table partition of the published table."""

    dt: str
    seq: int = 0
    """0: never published."""
    switched: bool = False
    upper: int = 0
    files: int = 0
    rows: int = 0

    def describe(self) -> str:
        if self.seq == 0:
            return f"dt={self.dt}: not published"
        kind = "merged" if self.switched else "live"
        return (
            f"dt={self.dt}: v{self.seq} ({kind}, ids 1..{self.upper}), "
            f"{_count(self.files, 'file')}, {self.rows} rows"
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


class Progress(Protocol):
    """Where `leasehold run` says how far it got: one stage at a time (discovery, ingestion,
    merges, publication, checks), each started, updated while it works, and finished with
    what it did. The CLI draws it (a live line on a terminal, plain lines otherwise)."""

    def start(self, stream: str, stage: str) -> None: ...

    def update(self, text: str) -> None: ...

    def finish(self, text: str) -> None: ...


class PlainProgress:
    """One line per finished stage, with its duration: what a log file or CI shows."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.stream, self.stage, self.started = "", "", 0.0

    def start(self, stream: str, stage: str) -> None:
        self.stream, self.stage, self.started = stream, stage, time.monotonic()

    def update(self, text: str) -> None:
        """Plain output keeps to one line per stage: the details are in the summary."""

    def finish(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.out(f"{self.stream} > {self.stage}: {text} ({elapsed:.1f} s)")


@contextmanager
def _stage(progress: Progress | None, stream: str, stage: str) -> Iterator[list[str]]:
    """A stage of `progress` around a block; what the block appends is its finishing line."""
    if progress is not None:
        progress.start(stream, stage)
    done: list[str] = []
    yield done
    if progress is not None:
        progress.finish(done[0] if done else "done")


@dataclass
class MainJobReport:
    ticks: int = 0
    runs: int = 0
    retry_runs: int = 0
    partitions: int = 0
    materialized: int = 0
    recorded: int = 0
    """Commits Dagster had missed, recorded by the sensor without a run."""
    rows: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("rows_read", "rows_written", "rows_quarantined"), 0)
    )
    schema_version: int = 0
    """The highest schema version this invocation's commits wrote with."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this invocation's commits added to the schema (`schema_evolution: add`)."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields left out of the table (`schema_evolution: ignore`): records holding each."""
    not_ingested: dict[str, str] = field(default_factory=dict)
    """Partition key -> its latest failure line (key, reason, when it is retried). A later run
    of the same invocation that ingests the partition (a retry of work a failed run left
    behind) takes it out: what is reported is what was still not ingested at the end."""
    crashed_runs: list[str] = field(default_factory=list)
    """Runs that failed for another reason than their partitions (a store down, a bug)."""
    checks: dict[str, bool] = field(default_factory=dict)
    warned: list[str] = field(default_factory=list)
    """Checks that did not pass with severity WARN (a dead letter, a partition waiting): said,
    but not a failure, as in `leasehold check`."""
    check_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each check's metadata of this invocation's checks run (its counts: duplicates, ...)."""
    new_units: int = 0
    """Work units discovery created in this invocation (one Dagster partition each)."""
    merge_runs: int = 0
    merges: list[str] = field(default_factory=list)
    """One line per merge committed: table partition, objects, rows, bytes, range."""
    not_merged: dict[str, str] = field(default_factory=dict)
    """Table partition -> why its merge failed (it stays due; the merge sensor asks again)."""
    merge_totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("objects_merged", "rows", "carry_over"), 0)
    )
    publish_runs: int = 0
    publications: list[str] = field(default_factory=list)
    """One line per publication made current: table partition, version, kind, files, rows,
    the Spectrum manifest's URL."""
    switched_now: int = 0
    not_published: dict[str, str] = field(default_factory=dict)
    """`dt=<date>` -> why its publication failed (it stays due; the sensor asks again)."""
    rollup_runs: int = 0
    rollups: list[str] = field(default_factory=list)
    """One line per table partition whose rollups moved: batches, keys, ids covered."""
    not_rolled_up: dict[str, str] = field(default_factory=dict)
    """`dt=<date>` -> why a rollup of it failed (it stays due; the rollup sensor asks again)."""
    table: dict[str, TablePartitionState] = field(default_factory=dict)
    """Each table partition Dagster knows (its dates) -> what it publishes at the end, by dt."""
    table_before: dict[str, TablePartitionState] = field(default_factory=dict)
    """The same when this invocation started: what it published is the difference."""

    @property
    def idle(self) -> bool:
        """Nothing was discovered, ingested, recorded, merged or published."""
        return not (
            self.new_units or self.runs or self.recorded or self.merges or self.publications
        )

    def published_now(self) -> dict[str, int]:
        """Table partition -> rows its publication gained in this invocation (only those that
        changed). With every commit published, their sum is the rows committed now."""
        gained = {}
        for dt, state in self.table.items():
            before = self.table_before.get(dt)
            rows = state.rows - (before.rows if before else 0)
            if state != before:
                gained[dt] = rows
        return gained

    @property
    def failed_checks(self) -> list[str]:
        """Checks that failed with severity ERROR: those fail the run."""
        return [n for n, ok in self.checks.items() if not ok and n not in self.warned]

    @property
    def failed_partitions(self) -> list[str]:
        """One line per source partition not ingested: key, reason, when it is retried."""
        return list(self.not_ingested.values())

    def describe(self) -> str:
        checks = ", ".join(f"{k}={'pass' if v else 'FAIL'}" for k, v in self.checks.items())
        return (
            f"discovery ticks: {self.ticks}; runs: {self.runs} ({self.retry_runs} of work left "
            f"behind, {len(self.crashed_runs)} crashed); partitions: {self.partitions}; "
            f"materialized: {self.materialized}; commits recorded without a run: "
            f"{self.recorded}; failed: {len(self.failed_partitions)}\n"
            f"rows read: {self.rows['rows_read']}, written: {self.rows['rows_written']}, "
            f"quarantined: {self.rows['rows_quarantined']}\n"
            f"merge runs: {self.merge_runs}; merges: {len(self.merges)} "
            f"({self.merge_totals['objects_merged']} small objects, "
            f"{self.merge_totals['rows']} rows, {self.merge_totals['carry_over']} carried over); "
            f"not merged: {len(self.not_merged)}\n"
            f"publication runs: {self.publish_runs}; publications: {len(self.publications)} "
            f"({self.switched_now} switched now); not published: {len(self.not_published)}\n"
            f"rollup runs: {self.rollup_runs}; partitions rolled up: {len(self.rollups)}; "
            f"not rolled up: {len(self.not_rolled_up)}\n"
            f"{self.describe_table()}\n"
            f"checks: {checks or 'none'}"
        )

    def describe_table(self) -> str:
        """Each table partition's published version and file count, one line each."""
        states = list(self.table.values())
        published = [s for s in states if s.seq > 0]
        merged = sum(s.switched for s in published)
        lines = [
            f"table partitions: {len(published)} published ({merged} merged, "
            f"{len(published) - merged} live), {len(states) - len(published)} not published"
        ]
        lines += [f"  {s.describe()}" for s in states[:MAX_TABLE_LINES]]
        if len(states) > MAX_TABLE_LINES:
            lines.append(
                f"  (and {len(states) - MAX_TABLE_LINES} more: leasehold table ls <stream>)"
            )
        return "\n".join(lines)


def _failures(result: ExecuteInProcessResult) -> tuple[dict[str, str], list[str]]:
    """(failure line per partition key, other errors) of a failed run."""
    partitions: dict[str, str] = {}
    errors: list[str] = []
    for event in result.all_events:
        if event.is_step_failure:
            data = event.step_failure_data
            user = data.user_failure_data
            if user is not None and FAILED_PARTITIONS in user.metadata:
                lines = user.metadata[FAILED_PARTITIONS].value
                keys = user.metadata[FAILED_KEYS].value
                partitions.update(zip(keys, lines, strict=True))
            else:
                errors.append(data.error.message.strip() if data.error else str(event.message))
        elif event.is_run_failure and not (partitions or errors):
            errors.append(str(event.message))
    return partitions, errors


def run_stream(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    *,
    max_ticks: int = 100,
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> MainJobReport:
    """Tick the discovery sensor and do what it says, as the daemon would, until it asks for
    nothing new: add its partitions, record its runless materializations, execute each run
    it requests (a run key executes once, like the daemon's dedup) and keep its cursor."""
    report = MainJobReport(table_before=table_states(instance, stream))
    # The same builders the code location uses, unbound, so `materialize` can bind resources.
    sensor = build_discovery_sensor(stream)
    asset_def = build_ingestion_asset(stream)
    checks = build_ingestion_checks(stream)
    resources = defs.resources or {}
    executed: set[str] = set()
    ticks = _sensor_ticks(
        sensor, instance, resources, partitions_for(stream), main_job_cursor_key(stream), max_ticks
    )
    with _stage(progress, stream, "discovery and ingestion") as done:
        for result in ticks:
            report.ticks += 1
            if isinstance(result, SkipReason) or not isinstance(result, SensorResult):
                log(f"{stream}: discovery skipped: {getattr(result, 'skip_message', result)}")
                break
            report.new_units += sum(
                len(request.partition_keys)
                for request in result.dynamic_partitions_requests or []
                if isinstance(request, AddDynamicPartitionsRequest)
            )
            for event in result.asset_events or []:
                report.recorded += 1
                if isinstance(event, AssetMaterialization):
                    _add_rows(report, event.metadata)
                    if event.partition is not None:
                        report.not_ingested.pop(event.partition, None)
            runs = [r for r in result.run_requests or [] if r.run_key not in executed]
            if not runs:
                break
            for run in runs:
                executed.add(str(run.run_key))
                if progress is not None:
                    progress.update(
                        f"run {report.runs + 1}: {run.tags.get(EXPECTED_COUNT, '1')} work units"
                        f" ({report.rows['rows_read']:,} records read so far)"
                    )
                _execute(run, asset_def, instance, resources, report, log, stream)
        done.append(ingestion_line(report))
    with _stage(progress, stream, "closing and merges") as done:
        merge_asset, merge_checks = _merge(defs, instance, stream, report, max_ticks, log)
        done.append(merge_line(report))
    with _stage(progress, stream, "publication") as done:
        table_asset, publication_checks = _publish(defs, instance, stream, report, max_ticks, log)
        report.table = table_states(instance, stream)
        done.append(publication_summary(report))
    rollup_assets: list[AssetsDefinition] = []
    rollup_checks: list = []
    if _declares_rollups(defs, stream):
        with _stage(progress, stream, "rollups") as done:
            rollup_asset, rollup_checks = _roll_up(defs, instance, stream, report, max_ticks, log)
            rollup_assets.append(rollup_asset)
            done.append(rollup_summary(report))
    all_checks = [*checks, *merge_checks, *publication_checks, *rollup_checks]
    with _stage(progress, stream, "checks") as done:
        check_run = materialize(
            [asset_def, merge_asset, table_asset, *rollup_assets, *all_checks],
            instance=instance,
            resources=resources,
            selection=AssetSelection.checks(*all_checks),
            raise_on_error=False,
            run_config=QUIET,
            tags={CHECKS_TAG: stream, **in_this_process()},
        )
        for evaluation in check_run.get_asset_check_evaluations():
            report.checks[evaluation.check_name] = evaluation.passed
            if not evaluation.passed and evaluation.severity == AssetCheckSeverity.WARN:
                report.warned.append(evaluation.check_name)
            report.check_metadata[evaluation.check_name] = {
                k: v.value for k, v in evaluation.metadata.items()
            }
        done.append(checks_verdict(report))
    return report


def checks_verdict(report: MainJobReport) -> str:
    """`all 13 passed`, `12 of 13 passed, 1 warned: lease_health`, or `FAILED: ...`."""
    failed, warned, total = report.failed_checks, report.warned, len(report.checks)
    parts = [f"FAILED: {', '.join(failed)}"] if failed else []
    if warned:
        parts.append(f"{len(warned)} warned: {', '.join(warned)}")
    passed = total - len(failed) - len(warned)
    if failed:
        return "; ".join(parts)
    return ", ".join([f"{passed} of {total} passed", *parts]) if warned else f"all {total} passed"


def _add_rows(report: MainJobReport, metadata: Mapping[str, Any]) -> None:
    """Add a commit's row counts (its materialization's metadata) to the report's, and what
    it did to the schema."""

    def value(name: str) -> Any:
        raw = metadata.get(name)
        return getattr(raw, "value", raw)

    for name in report.rows:
        report.rows[name] += int(value(name) or 0)
    report.schema_version = max(report.schema_version, int(value("schema_version") or 0))
    for column in str(value("new_columns") or "").split(", "):
        if column and column not in report.new_columns:
            report.new_columns.append(column)
    for part in str(value("unknown_fields") or "none").split(", "):
        name, _, count = part.rpartition(": ")
        if name:
            report.unknown_fields[name] = report.unknown_fields.get(name, 0) + int(count)


def ingestion_line(report: MainJobReport) -> str:
    if not (report.new_units or report.runs or report.recorded):
        return "nothing new: every source object listed is already ingested"
    rows = report.rows
    line = (
        f"{_count(report.new_units, 'new work unit')}; {_count(report.runs, 'run')} ingested "
        f"{_count(report.materialized, 'unit')}: {rows['rows_read']:,} records read, "
        f"{rows['rows_quarantined']:,} quarantined, {rows['rows_written']:,} committed"
    )
    if report.new_columns:
        line += f"; schema version {report.schema_version} added {', '.join(report.new_columns)}"
    if report.unknown_fields:
        fields = ", ".join(f"{n} ({c:,})" for n, c in sorted(report.unknown_fields.items()))
        line += f"; records with fields left out (schema_evolution: ignore): {fields}"
    if report.recorded:
        line += f"; {_count(report.recorded, 'commit')} of earlier runs recorded"
    if report.not_ingested:
        line += f"; {_count(len(report.not_ingested), 'unit')} NOT ingested (listed below)"
    return line


def merge_line(report: MainJobReport) -> str:
    if not report.merges and not report.not_merged:
        return "nothing due"
    totals = report.merge_totals
    line = (
        f"{_count(len(report.merges), 'merge')}: {_count(totals['objects_merged'], 'small object')}"
        f", {totals['rows']:,} rows"
    )
    return line + (f"; {len(report.not_merged)} NOT merged" if report.not_merged else "")


def publication_summary(report: MainJobReport) -> str:
    if not report.publications and not report.not_published:
        return "nothing new to publish"
    line = (
        f"{_count(len(report.publications), 'table partition')} published "
        f"({report.switched_now} switched to merged files)"
    )
    return line + (f"; {len(report.not_published)} NOT published" if report.not_published else "")


def rollup_summary(report: MainJobReport) -> str:
    if not report.rollups and not report.not_rolled_up:
        return "nothing new to roll up"
    line = f"{_count(len(report.rollups), 'table partition')} rolled up"
    return line + (f"; {len(report.not_rolled_up)} NOT rolled up" if report.not_rolled_up else "")


def _declares_rollups(defs: Definitions, stream: str) -> bool:
    return any(getattr(a, "key", None) == rollup_asset_key(stream) for a in defs.assets or [])


def _sensor_ticks(
    sensor: SensorDefinition,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    partitions: DynamicPartitionsDefinition,
    state_key: str,
    max_ticks: int,
) -> Iterator[Any]:
    """Up to `max_ticks` evaluations of `sensor` from the cursor kept under `state_key`. A
    `SensorResult` is applied as the daemon would before it is yielded (its partitions added
    to `partitions`, its runless events reported, its cursor kept), so the caller only executes
    the runs it asks for; anything else (a skip) is yielded as it is, and the caller stops."""
    cursor = instance.run_storage.get_cursor_values({state_key}).get(state_key)
    for _ in range(max_ticks):
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
            result = sensor(ctx)
        if isinstance(result, SensorResult):
            apply_partition_requests(instance, result.dynamic_partitions_requests or [])
            for event in result.asset_events or []:
                instance.report_runless_asset_event(event)
            cursor = result.cursor
            instance.run_storage.set_cursor_values({state_key: cursor or ""})
        yield result


def _merge(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    report: MainJobReport,
    max_ticks: int,
    log: Callable[[str], None],
) -> tuple[AssetsDefinition, list]:
    """Tick the merge sensor and execute the merge runs it requests until it requests none
    (carry-over makes a partition due again at once) or only ranges that already failed in
    this invocation. Returns the merge asset and its checks, for the checks run."""
    asset_def = build_merge_asset(stream)

    def merged(dt: str, metadata: Mapping[str, Any]) -> None:
        report.not_merged.pop(dt, None)
        for name in report.merge_totals:
            report.merge_totals[name] += int(metadata[name])
        line = (
            f"{stream} dt={dt}: merged {metadata['objects_merged']} objects "
            f"({metadata['delayed_objects_merged']} delayed), {metadata['rows']} rows, "
            f"{metadata['bytes_in']} -> {metadata['bytes_out']} bytes into range "
            f"{metadata['range']}" + ("; carried over" if metadata["carry_over"] else "")
        )
        report.merges.append(line)
        log(line)

    merges = _RangePass(
        "merge",
        # Closed partitions' pending merges are due now: nothing committed stays unpublished.
        build_merge_sensor(stream, closed_due_now=True),
        merge_cursor_key(stream),
        asset_def,
        FAILED_MERGES,
        report.not_merged,
        merged,
    )
    report.merge_runs += _range_runs(merges, defs, instance, stream, report, max_ticks, log)
    return asset_def, build_merge_checks(stream)


def _publish(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    report: MainJobReport,
    max_ticks: int,
    log: Callable[[str], None],
) -> tuple[AssetsDefinition, list]:
    """Tick the publication sensor and execute the publication runs it requests until it
    requests none, or only ranges that already failed in this invocation. Returns the
    published-table asset and its checks, for the checks run."""
    asset_def = build_publication_asset(stream)

    def published(dt: str, metadata: Mapping[str, Any]) -> None:
        report.not_published.pop(f"dt={dt}", None)
        report.switched_now += bool(metadata["switched_now"])
        line = f"{stream} dt={dt}: {publication_line(metadata)}"
        report.publications.append(line)
        log(line)

    publications = _RangePass(
        "publication",
        build_publication_sensor(stream),
        publish_cursor_key(stream),
        asset_def,
        FAILED_PUBLICATIONS,
        report.not_published,
        published,
    )
    report.publish_runs += _range_runs(publications, defs, instance, stream, report, max_ticks, log)
    return asset_def, build_publication_checks(stream)


def _roll_up(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    report: MainJobReport,
    max_ticks: int,
    log: Callable[[str], None],
) -> tuple[AssetsDefinition, list]:
    """Tick the rollup sensor and execute the rollup runs it requests until it requests none,
    or only ranges that already failed in this invocation. Returns the rollup asset and its
    check, for the checks run."""
    asset_def = build_rollup_asset(stream)

    def rolled_up(dt: str, metadata: Mapping[str, Any]) -> None:
        report.not_rolled_up.pop(f"dt={dt}", None)
        moved = {k[: -len("_upto")]: v for k, v in metadata.items() if k.endswith("_upto")}
        line = f"{stream} dt={dt}: {metadata['batches']} batches; " + ", ".join(
            f"{name} at id {upto}" for name, upto in sorted(moved.items())
        )
        report.rollups.append(line)
        log(line)

    rollups = _RangePass(
        "rollup",
        build_rollup_sensor(stream),
        rollup_cursor_key(stream),
        asset_def,
        FAILED_ROLLUPS,
        report.not_rolled_up,
        rolled_up,
    )
    report.rollup_runs += _range_runs(rollups, defs, instance, stream, report, max_ticks, log)
    return asset_def, build_rollup_checks(stream)


@dataclass(frozen=True)
class _RangePass:
    """What differs between the merge, publication and rollup passes of `leasehold run`."""

    what: str
    """`merge`, `publication` or `rollup`, for the log."""
    sensor: SensorDefinition
    cursor_key: str
    asset_def: AssetsDefinition
    failed_key: str
    """The metadata key under which the asset's `Failure` lists its failed table partitions."""
    failures: dict[str, str]
    """The report's failure lines of this pass, by `dt=<date>`: a line is put in when its
    table partition fails, taken out by `materialized` when a later run makes it."""
    materialized: Callable[[str, Mapping[str, Any]], None]
    """Records one table partition's materialization (its date, its metadata) in the report."""


def _range_runs(
    ranges: _RangePass,
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    report: MainJobReport,
    max_ticks: int,
    log: Callable[[str], None],
) -> int:
    """Tick the pass's sensor and execute each range run it requests, until it requests none
    or only ranges that already failed in this invocation: one that failed is not executed
    again (it stays due, and the sensor asks again next time). The number of runs executed."""
    executed = 0
    failed_ranges: set[tuple[str, str]] = set()
    resources = defs.resources or {}
    ticks = _sensor_ticks(
        ranges.sensor, instance, resources, dates_for(stream), ranges.cursor_key, max_ticks
    )
    for result in ticks:
        if not isinstance(result, SensorResult):
            break
        runs = [
            r
            for r in result.run_requests or []
            if (r.tags[RANGE_START], r.tags[RANGE_END]) not in failed_ranges
        ]
        if not runs:
            break
        for run in runs:
            executed += 1
            if not _execute_range(run, ranges, instance, resources, report, log, stream):
                failed_ranges.add((run.tags[RANGE_START], run.tags[RANGE_END]))
    return executed


def _execute_range(
    run: RunRequest,
    ranges: _RangePass,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    report: MainJobReport,
    log: Callable[[str], None],
    stream: str,
) -> bool:
    """Execute a merge or publication run in this process, into the report; whether it
    succeeded. An error that is not a table partition's failure is a crashed run."""
    outcome = materialize(
        [ranges.asset_def],
        instance=instance,
        resources=resources,
        tags={**run.tags, **in_this_process()},
        raise_on_error=False,
        run_config=QUIET,
    )
    for event in outcome.get_asset_materialization_events():
        metadata = {k: v.value for k, v in event.materialization.metadata.items()}
        ranges.materialized(str(event.partition), metadata)
    if outcome.success:
        return True
    for event in outcome.all_events:
        if event.is_step_failure:
            user = event.step_failure_data.user_failure_data
            if user is not None and ranges.failed_key in user.metadata:
                for line in user.metadata[ranges.failed_key].value:  # type: ignore[union-attr]
                    ranges.failures[line.split(":", 1)[0]] = line
            else:
                error = event.step_failure_data.error
                report.crashed_runs.append(error.message.strip() if error else str(event.message))
    first, last = run.tags[RANGE_START], run.tags[RANGE_END]
    log(f"{stream}: {ranges.what} run {first} .. {last} failed")
    return False


def publication_line(metadata: Mapping[str, Any]) -> str:
    """`published v3 (merged, switched now): 1 file, 3996 rows, manifest <url>` from the
    published-table asset's metadata."""
    verb = "catalog repaired to" if metadata["outcome"] == "catalog_repaired" else "published"
    kind = str(metadata["kind"]) + (", switched now" if metadata["switched_now"] else "")
    return (
        f"{verb} v{metadata['seq']} ({kind}): {_count(int(metadata['files']), 'file')}, "
        f"{metadata['rows']} rows, manifest {metadata['manifest']}"
    )


def table_states(instance: DagsterInstance, stream: str) -> dict[str, TablePartitionState]:
    """Each of the stream's dates -> what Dagster last recorded as its publication."""
    key: AssetKey = table_asset_key(stream)
    states = {}
    for dt in sorted(instance.get_dynamic_partitions(dates_for(stream).name)):
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, asset_partitions=[dt]), limit=1
        ).records
        materialization = records[0].asset_materialization if records else None
        if materialization is None:
            states[dt] = TablePartitionState(dt)
            continue
        metadata = {k: v.value for k, v in materialization.metadata.items()}
        states[dt] = TablePartitionState(
            dt,
            seq=int(metadata["seq"]),  # type: ignore[arg-type]
            switched=bool(metadata["switched"]),
            upper=int(metadata["upper"]),  # type: ignore[arg-type]
            files=int(metadata["files"]),  # type: ignore[arg-type]
            rows=int(metadata["rows"]),  # type: ignore[arg-type]
        )
    return states


def in_this_process() -> dict[str, str]:
    """The tag naming this process, for a run created here to execute here: set from the run's
    creation, so a tick can tell the run is dead if this process is killed at any moment after
    it, even before the run starts (`runs.fail_dead_runs`)."""
    return {PROCESS_TAG: process_identity()}


def _execute(
    run: RunRequest,
    asset_def: AssetsDefinition,
    instance: DagsterInstance,
    resources: dict,
    report: MainJobReport,
    log: Callable[[str], None],
    stream: str,
) -> None:
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
        _add_rows(report, event.materialization.metadata)
    first = run.tags.get(RANGE_START, run.partition_key)
    what = f"{stream}: {'retry ' if retry else ''}run {first} .. ({count} partitions)"
    if outcome.success:
        log(f"{what}: ok")
        return
    partitions, errors = _failures(outcome)
    report.not_ingested.update(partitions)
    report.crashed_runs += errors
    log(f"{what}: {len(partitions)} partitions failed" + (f"; {errors[0]}" if errors else ""))


def run_main_job(
    streams: Sequence[str],
    default_home: Path,
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> list[MainJobReport]:
    """`leasehold run`: every stream on the instance at `DAGSTER_HOME` (`default_home` when
    unset); one report per stream. Without `progress`, each stream's report is logged."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(default_home)))
    # An instance configured by someone else keeps its configuration; one leasehold wrote is
    # written again, so it names the storage classes where this version keeps them.
    if not (home / "dagster.yaml").exists() or written_by_leasehold(home):
        write_instance_yaml(home)
    defs = build_definitions()
    reports = []
    with open_instance(str(home)) as instance:
        ensure_spark_pool(instance)  # for the runs `dagster dev` queues on this instance later
        for name in streams:
            report = run_stream(defs, instance, name, log=log, progress=progress)
            if progress is None:
                log(f"{name}: {report.describe()}")
            reports.append(report)
    return reports


def quiet_dagster_warnings() -> None:
    """Dagster's warnings that an API is beta or preview are for the code's authors (who see
    them in the tests), not for someone running the job."""
    warnings.filterwarnings("ignore", category=BetaWarning)
    warnings.filterwarnings("ignore", category=PreviewWarning)
