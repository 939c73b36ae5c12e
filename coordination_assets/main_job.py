"""The main job, end to end in one process: what the daemon would do, without the daemon.

`leasehold run` uses it: evaluate the discovery sensor, apply its dynamic-partition request and
the commits it records, execute each run it requests (new ranges and work left behind), until
it asks for nothing new; then the same with the merge sensor (close the table partitions whose
day ended, once ingestion caught up; merge those due, and every closed partition with a pending
merge job — its delayed objects — without waiting for its due time), then with the
publication sensor (switch and publish what became due, repair a catalog that lags), then,
for a stream that declares rollups, with the rollup sensor (every rollup brought up to the
last commit); then, for a stream with `source_cleanup`, one clean-up pass; then run the asset
checks. The same sensors, assets and checks that `dagster dev`
runs — only the scheduling differs.

This module is the driver: the stages in order and the checks run. The stages are in
`ingestion_pass` and `range_passes`, the in-process sensor loop in `sensor_loop`, what a run
found and its wording in `run_report`, the stage lines in `run_progress`.
"""

import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from dagster import (
    AssetChecksDefinition,
    AssetCheckSeverity,
    AssetsDefinition,
    AssetSelection,
    BetaWarning,
    DagsterInstance,
    Definitions,
    PreviewWarning,
    materialize,
)

from coordination_assets.cleanup import has_cleanup_job, run_cleanup_job
from coordination_assets.definitions import build_definitions
from coordination_assets.ingestion import build_ingestion_asset, build_ingestion_checks
from coordination_assets.ingestion_pass import (
    account_for_ingestion,
    ingestion_marks,
    run_ingestion,
    stream_store,
)
from coordination_assets.range_passes import (
    merge_pass,
    publication_pass,
    rollup_pass,
    run_range_pass,
)
from coordination_assets.rollups import rollup_asset_key
from coordination_assets.run_progress import Progress, reported_stage
from coordination_assets.run_report import (
    MainJobReport,
    checks_verdict,
    ingestion_line,
    merge_line,
    publication_summary,
    rollup_summary,
    table_states,
)
from coordination_assets.sensor_loop import QUIET, console_level, in_this_process
from resources.dagster_resources.door import open_instance
from resources.dagster_resources.instance import (
    ensure_spark_pool,
    write_instance_yaml,
    written_by_leasehold,
)
from resources.dagster_resources.runs import CHECKS_TAG


def run_stream(
    defs: Definitions,
    instance: DagsterInstance,
    stream: str,
    *,
    max_ticks: int = 100,
    log: Callable[[str], None] = print,
    progress: Progress | None = None,
) -> MainJobReport:
    """Each stage of the main job for `stream`, as the daemon would run them: discovery and
    ingestion, closing and merges, publication, rollups (when the stream declares them), then
    the checks of every asset. Each sensor is ticked until it asks for nothing new."""
    report = MainJobReport(table_before=table_states(instance, stream))
    # The same builders the code location uses, unbound, so `materialize` can bind resources.
    asset_def = build_ingestion_asset(stream)
    resources = defs.resources or {}
    with (
        reported_stage(progress, stream, "discovery and ingestion") as done,
        stream_store(resources) as store,
    ):
        marks = ingestion_marks(store, stream)
        run_ingestion(asset_def, instance, resources, stream, report, max_ticks, log, progress)
        account_for_ingestion(store, stream, marks, report)
        done.append(ingestion_line(report))
    with reported_stage(progress, stream, "closing and merges") as done:
        merges = merge_pass(stream, report)
        report.merge_runs += run_range_pass(merges, defs, instance, stream, report, max_ticks, log)
        done.append(merge_line(report))
    with reported_stage(progress, stream, "publication") as done:
        publications = publication_pass(stream, report)
        report.publish_runs += run_range_pass(
            publications, defs, instance, stream, report, max_ticks, log
        )
        report.table = table_states(instance, stream)
        done.append(publication_summary(report))
    passes = [merges, publications]
    if _declares_rollups(defs, stream):
        with reported_stage(progress, stream, "rollups") as done:
            rollups = rollup_pass(stream, report)
            report.rollup_runs += run_range_pass(
                rollups, defs, instance, stream, report, max_ticks, log
            )
            passes.append(rollups)
            done.append(rollup_summary(report))
    if has_cleanup_job(defs, stream):
        with reported_stage(progress, stream, "source clean-up") as done:
            done.append(run_cleanup_job(defs, instance, stream))
    with reported_stage(progress, stream, "checks") as done:
        assets = [asset_def, *(p.asset_def for p in passes)]
        checks = [*build_ingestion_checks(stream), *(c for p in passes for c in p.checks)]
        _run_checks(assets, checks, instance, resources, stream, report)
        done.append(checks_verdict(report))
    return report


def _declares_rollups(defs: Definitions, stream: str) -> bool:
    return any(getattr(a, "key", None) == rollup_asset_key(stream) for a in defs.assets or [])


def _run_checks(
    assets: Sequence[AssetsDefinition],
    checks: Sequence[AssetChecksDefinition],
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    stream: str,
    report: MainJobReport,
) -> None:
    """Run every check of the stream's assets in one run, in this process, into the report:
    its verdict, whether it only warned, its metadata."""
    check_run = materialize(
        [*assets, *checks],
        instance=instance,
        resources=resources,
        selection=AssetSelection.checks(*checks),
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
    them in the tests), not for someone running the job; nor are its console records of the
    runs executed here: a failed step's or run's stack (leasehold says the failure in one line
    of its own, `run_outcome`) and leasehold's own warnings again (printed once, by the CLI's
    log handler). `--verbose` keeps them all."""
    console_level("CRITICAL")
    warnings.filterwarnings("ignore", category=BetaWarning)
    warnings.filterwarnings("ignore", category=PreviewWarning)
