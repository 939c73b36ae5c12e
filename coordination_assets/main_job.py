"""The main job, end to end in one process: what the daemon would do, without the daemon.

`leasehold run` uses it: evaluate the discovery sensor, apply its dynamic-partition request,
execute each requested range run, run the asset checks, until discovery finds nothing new.
The same sensor, asset and checks that `dagster dev` runs — only the scheduling differs.
"""

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dagster import (
    AssetSelection,
    DagsterInstance,
    Definitions,
    SensorResult,
    SkipReason,
    build_sensor_context,
    materialize,
)

from coordination_assets.definitions import build_definitions
from coordination_assets.ingestion import (
    build_discovery_sensor,
    build_ingestion_asset,
    build_ingestion_checks,
    main_job_cursor_key,
    partitions_for,
)
from resources.dagster_resources.instance import write_instance_yaml, written_by_leasehold

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass
class MainJobReport:
    ticks: int = 0
    runs: int = 0
    failed_runs: int = 0
    partitions: int = 0
    materialized: int = 0
    rows: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("rows_read", "rows_written", "rows_quarantined"), 0)
    )
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.failed_runs == 0 and all(self.checks.values())

    def describe(self) -> str:
        checks = ", ".join(f"{k}={'pass' if v else 'FAIL'}" for k, v in self.checks.items())
        return (
            f"discovery ticks: {self.ticks}; runs: {self.runs} ({self.failed_runs} failed); "
            f"partitions: {self.partitions}; materialized: {self.materialized}\n"
            f"rows read: {self.rows['rows_read']}, written: {self.rows['rows_written']}, "
            f"quarantined: {self.rows['rows_quarantined']}\n"
            f"checks: {checks or 'none'}"
        )


def run_stream(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    *,
    max_ticks: int = 100,
    log: Callable[[str], None] = print,
) -> MainJobReport:
    report = MainJobReport()
    # The same builders the code location uses, unbound, so `materialize` can bind resources.
    sensor = build_discovery_sensor(stream)
    asset_def = build_ingestion_asset(stream)
    checks = build_ingestion_checks(stream)
    resources = defs.resources or {}
    state_key = main_job_cursor_key(stream)
    cursor = instance.run_storage.get_cursor_values({state_key}).get(state_key)
    for _ in range(max_ticks):
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
            result = sensor(ctx)
        report.ticks += 1
        if isinstance(result, SkipReason) or not isinstance(result, SensorResult):
            log(f"{stream}: discovery skipped: {getattr(result, 'skip_message', result)}")
            break
        for request in result.dynamic_partitions_requests or []:
            instance.add_dynamic_partitions(partitions_for(stream).name, request.partition_keys)
        runs = result.run_requests or []
        if not runs:
            break
        for run in runs:
            report.runs += 1
            report.partitions += int(run.tags.get("leasehold/partition_count", 0))
            outcome = materialize(
                [asset_def],
                instance=instance,
                resources=resources,
                tags=run.tags,
                raise_on_error=False,
                run_config=QUIET,
            )
            report.failed_runs += 0 if outcome.success else 1
            for event in outcome.get_asset_materialization_events():
                report.materialized += 1
                metadata = event.materialization.metadata
                for name in report.rows:
                    report.rows[name] += int(metadata[name].value)
            log(
                f"{stream}: run {run.tags['dagster/asset_partition_range_start']} .. "
                f"({run.tags.get('leasehold/partition_count')} partitions): "
                f"{'ok' if outcome.success else 'FAILED'}"
            )
        cursor = result.cursor
        instance.run_storage.set_cursor_values({state_key: cursor or ""})
    check_run = materialize(
        [asset_def, *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
        raise_on_error=False,
        run_config=QUIET,
    )
    for evaluation in check_run.get_asset_check_evaluations():
        report.checks[evaluation.check_name] = evaluation.passed
    return report


def run_main_job(
    streams: Sequence[str], default_home: Path, log: Callable[[str], None] = print
) -> bool:
    """`leasehold run`: every stream on the instance at `DAGSTER_HOME` (`default_home` when
    unset). True when every run and check passed."""
    home = Path(os.environ.setdefault("DAGSTER_HOME", str(default_home)))
    # An instance configured by someone else keeps its configuration; one leasehold wrote is
    # written again, so it names the storage classes where this version keeps them.
    if not (home / "dagster.yaml").exists() or written_by_leasehold(home):
        write_instance_yaml(home)
    defs = build_definitions()
    ok = True
    with DagsterInstance.get() as instance:
        for name in streams:
            report = run_stream(defs, instance, name, log=log)
            log(f"{name}: {report.describe()}")
            ok = ok and report.ok
    return ok
