"""The merge, publication and rollup passes of `leasehold run`: one loop, three declarations.

Each pass ticks its sensor in this process and executes the range runs it requests until it
requests none, or only ranges that already failed in this invocation (those stay due: the
sensor asks again next time). A `RangePass` says what differs between them: the sensor, its
cursor, the asset a run materializes and its checks, where the asset lists the table partitions
it failed, and how the report records one it made. `merge_pass`, `publication_pass` and
`rollup_pass` declare the three; `run_range_pass` runs one.
"""

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, cast

from dagster import (
    AssetChecksDefinition,
    AssetsDefinition,
    DagsterInstance,
    Definitions,
    RunRequest,
    SensorDefinition,
    SensorResult,
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
from coordination_assets.publication import (
    FAILED_PUBLICATIONS,
    build_publication_asset,
    build_publication_checks,
    build_publication_sensor,
    publish_cursor_key,
)
from coordination_assets.rollups import (
    FAILED_ROLLUPS,
    build_rollup_asset,
    build_rollup_checks,
    build_rollup_sensor,
    rollup_cursor_key,
)
from coordination_assets.run_report import MainJobReport
from coordination_assets.sensor_loop import QUIET, in_this_process, sensor_ticks
from resources.dagster_resources.runs import RANGE_END, RANGE_START


@dataclass(frozen=True)
class RangePass:
    """What differs between the merge, publication and rollup passes of `leasehold run`."""

    what: str
    """`merge`, `publication` or `rollup`, for the log."""
    sensor: SensorDefinition
    cursor_key: str
    asset_def: AssetsDefinition
    checks: Sequence[AssetChecksDefinition]
    """The asset's checks, for the checks run at the end."""
    failed_key: str
    """The metadata key under which the asset's `Failure` lists its failed table partitions."""
    failures: dict[str, str]
    """The report's failure lines of this pass, by `dt=<date>`: a line is put in when its
    table partition fails, taken out by `materialized` when a later run makes it."""
    materialized: Callable[[str, Mapping[str, Any]], str]
    """Records one table partition's materialization (its date, its metadata) in the report;
    the line to log."""


def merge_pass(stream: str, report: MainJobReport) -> RangePass:
    """Merges, carry-over included (it makes a partition due again at once)."""
    return RangePass(
        "merge",
        # Closed partitions' pending merges are due now: nothing committed stays unpublished.
        build_merge_sensor(stream, closed_due_now=True),
        merge_cursor_key(stream),
        build_merge_asset(stream),
        build_merge_checks(stream),
        FAILED_MERGES,
        report.not_merged,
        partial(report.record_merge, stream),
    )


def publication_pass(stream: str, report: MainJobReport) -> RangePass:
    """Publications of the published table, and repairs of a catalog that lags."""
    return RangePass(
        "publication",
        build_publication_sensor(stream),
        publish_cursor_key(stream),
        build_publication_asset(stream),
        build_publication_checks(stream),
        FAILED_PUBLICATIONS,
        report.not_published,
        partial(report.record_publication, stream),
    )


def rollup_pass(stream: str, report: MainJobReport) -> RangePass:
    """Every rollup of the stream brought up to the last commit."""
    return RangePass(
        "rollup",
        build_rollup_sensor(stream),
        rollup_cursor_key(stream),
        build_rollup_asset(stream),
        build_rollup_checks(stream),
        FAILED_ROLLUPS,
        report.not_rolled_up,
        partial(report.record_rollup, stream),
    )


def run_range_pass(
    ranges: RangePass,
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
    ticks = sensor_ticks(
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
    ranges: RangePass,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    report: MainJobReport,
    log: Callable[[str], None],
    stream: str,
) -> bool:
    """Execute a merge, publication or rollup run in this process, into the report; whether it
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
        log(ranges.materialized(str(event.partition), metadata))
    if outcome.success:
        return True
    for event in outcome.all_events:
        if event.is_step_failure:
            user = event.step_failure_data.user_failure_data
            if user is not None and ranges.failed_key in user.metadata:
                for line in cast(list[str], user.metadata[ranges.failed_key].value):
                    ranges.failures[line.split(":", 1)[0]] = line
            else:
                error = event.step_failure_data.error
                report.crashed_runs.append(error.message.strip() if error else str(event.message))
    first, last = run.tags[RANGE_START], run.tags[RANGE_END]
    log(f"{stream}: {ranges.what} run {first} .. {last} failed")
    return False
