"""`leasehold run`: the main job end to end on the configured stores, and what it prints.

A sample is written first into a local source that is empty (for a stream shaped like the
sample one); then the main job runs (`coordination_assets.main_job`), a line per stage; then
each stream's table and audit line, the partitions other owners hold, and one line per thing
that went wrong, with the exit status that says which kind.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from resources.cli.exit_status import EXIT_CHECK_FAILED, EXIT_FAILURE, EXIT_PARTITIONS_FAILED
from resources.cli.spark_log import quiet_spark
from resources.cli.status import print_status
from resources.cli.stream_choice import chosen_streams
from resources.settings import default_data_dir
from resources.stores import build_store, open_existing_store
from resources.stores.settings import StoreSettings, settings_from_env
from resources.streams import LakeSettings, StreamConfig

if TYPE_CHECKING:  # the Dagster side is imported only by the commands that run it
    from coordination_assets.run_report import MainJobReport


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: discovery -> range runs -> commits -> merges -> publication -> checks, on
    the configured stores; a line per stage, then per stream its dates and an audit line."""
    from coordination_assets.main_job import quiet_dagster_warnings, run_main_job
    from coordination_assets.run_progress import PlainProgress, Progress
    from resources.cli.door import check_door
    from resources.cli.story import TerminalProgress

    settings = settings_from_env()  # fail fast on bad store configuration
    lake = LakeSettings.from_env()
    streams = lake.streams()
    names = chosen_streams(args.stream, streams)
    check_door([streams[name] for name in names])  # Spark and Glue: once, not in every run
    quiet_spark(args.verbose)
    write_samples(lake, {name: streams[name] for name in names}, args.sample_objects)
    progress: Progress = PlainProgress()  # --verbose: the stage lines among the details
    if not args.verbose:
        quiet_dagster_warnings()
        progress = TerminalProgress() if sys.stdout.isatty() else PlainProgress()
    reports = run_main_job(
        names,
        default_data_dir() / "dagster_home",
        log=print if args.verbose else _drop,
        progress=progress,
    )
    print_tables(settings, [streams[name] for name in names], reports)
    if args.verbose:
        print_status(settings)
    print_held_elsewhere(settings, names)
    return run_outcome(reports)


def _drop(line: str) -> None:
    """The main job's detail lines, without --verbose: the stage lines and tables say it."""


SAMPLE_SCHEMA = {"event_id": "string", "user_id": "string", "amount": "double"}


def write_samples(lake: LakeSettings, streams: Mapping[str, StreamConfig], objects: int) -> None:
    """Into each local source directory that holds no object yet, `objects` sample objects,
    when the stream's records are shaped like them; else say the source is empty."""
    from resources.ingestion.sample_data import write_story_sources
    from resources.objects.factory import object_store_for

    for name, config in streams.items():
        source = object_store_for(
            config.source, endpoint_url=lake.s3_endpoint_url, region=lake.region
        )
        if config.source.startswith("file://") and not source.list_after(None, 1):
            root = Path(config.source[len("file://") :])
            if not fits_sample_data(config):
                print(f"{name}: no source objects under {root} yet")
                continue
            sample = write_story_sources(root, objects=objects)
            print(f"{config.name}: wrote a sample under {root}: {sample.describe()}")


def fits_sample_data(config: StreamConfig) -> bool:
    """Whether the generated sample objects (`write_story_sources`) are records of this
    stream: an empty directory of a stream of the user's own (`leasehold init`) stays empty
    rather than filling with records its schema would quarantine."""
    types = {c.name: c.type for c in config.columns}
    return (
        config.format == "jsonl"
        and all(types.get(k) == v for k, v in SAMPLE_SCHEMA.items())
        and types.get(config.event_time) in ("timestamp", "string")
        and config.event_time == "event_time"
    )


def print_tables(
    settings: StoreSettings, configs: Sequence[StreamConfig], reports: Sequence[MainJobReport]
) -> None:
    """Each stream's table partitions as the run left them, its audit line, and how to query
    it."""
    from resources.catalog.settings import CatalogSettings
    from resources.cli.changes import pending_changes, pending_line
    from resources.cli.story import audit_line, query_line, stream_table

    catalog = CatalogSettings.from_env()
    store = build_store(settings)
    try:
        for config, report in zip(configs, reports, strict=True):
            name = config.name
            print()
            print("\n".join(stream_table(name, report, store.table_partitions(name))))
            print(audit_line(name, report))
            changed = pending_line(name, pending_changes(store, name))
            if changed is not None:
                print(changed)
            print(query_line(config, catalog))
    finally:
        store.close_store()


def print_held_elsewhere(settings: StoreSettings, streams: Sequence[str]) -> None:
    """Partitions still ASSIGNED after this run's work: another owner holds them — a run going
    on elsewhere, or a killed run whose leases have not expired yet. Say when they are free."""
    from resources.coordination.health import MAX_PENDING_READ
    from resources.coordination.items import PartitionStatus, iso_utc

    store = open_existing_store(settings)
    try:
        for stream in streams:
            # By status (O(pending)), not one item per work unit of history.
            pending = store.pending_partitions(store.source_identifier(stream), MAX_PENDING_READ)
            held = [item for item in pending if item.status is PartitionStatus.ASSIGNED]
            if held:
                free_by = max(i.ownership_timeout_ms or 0 for i in held)
                print(
                    f"{stream}: {len(held)} partitions are held by other owners' leases (a run "
                    f"elsewhere, or a killed run's: those expire by {iso_utc(free_by)}; the next "
                    "run after that retries them)"
                )
    finally:
        store.close_store()


def run_outcome(reports: Sequence[MainJobReport]) -> int:
    """Print what went wrong, one line each, and the exit status that says which kind."""
    crashed = [line for r in reports for line in r.crashed_runs]
    failed = [line for r in reports for line in r.failed_partitions]
    checks = [name for r in reports for name in r.failed_checks]
    for name in (name for r in reports for name in r.warned):
        print(f"leasehold: check warned: {name} (details: leasehold check)", file=sys.stderr)
    for line, times in Counter(" ".join(line.split()) for line in crashed).items():
        again = f" ({times} runs)" if times > 1 else ""
        print(f"leasehold: run failed{again}: {line}", file=sys.stderr)
    for line in failed:
        print(f"leasehold: not ingested: {line}", file=sys.stderr)
    for name in checks:
        print(f"leasehold: check failed: {name} (details: leasehold check)", file=sys.stderr)
    if crashed:
        return EXIT_FAILURE
    if failed:
        return EXIT_PARTITIONS_FAILED
    return EXIT_CHECK_FAILED if checks else 0


def add_run_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    run = add(
        "run", help="run the main job end to end on the configured (default: embedded) stores"
    )
    run.add_argument(
        "--sample-objects",
        type=int,
        default=300,
        help="objects to generate when a local source directory is empty (streams declared "
        "like the sample one)",
    )
    run.add_argument("--stream", default=None, help="only this stream of the streams file")
    run.set_defaults(fn=cmd_run)
