"""`leasehold` command line: run the main job, check the streams, show coordination status and
the configuration, read the published tables as an engine does, collect garbage, purge expired
items.

The store is configured by the same `LEASEHOLD_*` environment variables as the Dagster
resource (`resources.stores.settings`); with none set it is the embedded SQLite file.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from resources.cli.config import configuration_text, effective_configuration
from resources.cli.doctor import DOCTOR_HELP, add_doctor_command
from resources.cli.gc import cmd_gc
from resources.cli.init import add_init_parser
from resources.cli.redrive import add_redrive_parser
from resources.cli.rollup import add_rollup_parser
from resources.cli.schema import add_schema_parser
from resources.cli.table import cmd_table_files, cmd_table_ls, cmd_table_read, date_arg
from resources.compaction.table_status import table_status_json, table_status_text
from resources.coordination.status import status_json, status_text  # noqa: E402
from resources.errors import ConfigError, LeaseholdError
from resources.ledger.model import TablePartition
from resources.settings import default_data_dir
from resources.stores import CoordinationStore, build_store, open_existing_store
from resources.stores.settings import StoreSettings, settings_from_env
from resources.streams import LakeSettings, StreamConfig

if TYPE_CHECKING:  # the Dagster side is imported only by the commands that run it
    from coordination_assets.run_report import MainJobReport


def print_status(settings: StoreSettings) -> None:
    store = build_store(settings)
    try:
        print()
        print(status_text(store.status()))
        for table, partitions in _tables(store):
            print(table_status_text(table, partitions))
    finally:
        store.close_store()


def _tables(store: CoordinationStore) -> list[tuple[str, list[TablePartition]]]:
    """Each stream's table and its partitions. Status works without a streams file (it reads
    only the store): then there is no table to show, and it says why on stderr."""
    try:
        streams = LakeSettings.from_env().streams()
    except ConfigError as exc:
        print(f"leasehold: table partitions not shown: {exc}", file=sys.stderr)
        return []
    return [(name, store.table_partitions(name)) for name in sorted(streams)]


def cmd_status(args: argparse.Namespace) -> int:
    store = open_existing_store(settings_from_env())
    try:
        summaries = store.status()
        tables = _tables(store)
    finally:
        store.close_store()
    if args.json:
        document = {
            "sources": status_json(summaries),
            "tables": [table_status_json(t, parts) for t, parts in tables],
        }
        print(json.dumps(document, indent=2))
    else:
        print(status_text(summaries))
        for table, partitions in tables:
            print(table_status_text(table, partitions))
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    config = effective_configuration()
    if args.json:
        print(json.dumps(config.as_json(), indent=2))
    else:
        print(configuration_text(config))
    return 0


def cmd_purge(args: argparse.Namespace) -> int:
    store = open_existing_store(settings_from_env(), read_only=False)
    try:
        purge = getattr(store, "purge_expired", None)
        if purge is None:
            print(f"the {store.backend} backend expires items itself (DynamoDB TTL)")
            return 0
        print(f"deleted {purge()} expired items")
        return 0
    finally:
        store.close_store()


def cmd_run(args: argparse.Namespace) -> int:
    """The main job: discovery -> range runs -> commits -> merges -> publication -> checks, on
    the configured stores; a line per stage, then per stream its dates and an audit line."""
    from coordination_assets.main_job import quiet_dagster_warnings, run_main_job
    from coordination_assets.run_progress import PlainProgress, Progress
    from resources.cli.story import TerminalProgress, audit_line, stream_table
    from resources.ingestion.sample_data import write_story_sources
    from resources.objects.base import object_store_for

    settings = settings_from_env()  # fail fast on bad store configuration
    lake = LakeSettings.from_env()
    streams = lake.streams()
    if args.stream is not None and args.stream not in streams:
        raise ConfigError(
            "--stream", f"{args.stream!r} is not a stream; the streams file has {sorted(streams)}"
        )
    names = [args.stream] if args.stream else sorted(streams)
    quiet_spark(args.verbose)
    for name in names:
        config = streams[name]
        source = object_store_for(
            config.source, endpoint_url=lake.s3_endpoint_url, region=lake.region
        )
        if config.source.startswith("file://") and not source.list_after(None, 1):
            root = Path(config.source[len("file://") :])
            if not fits_sample_data(config):
                print(f"{name}: no source objects under {root} yet")
                continue
            sample = write_story_sources(root, objects=args.sample_objects)
            print(f"{config.name}: wrote a sample under {root}: {sample.describe()}")
    progress: Progress | None = None
    if not args.verbose:
        quiet_dagster_warnings()
        progress = TerminalProgress() if sys.stdout.isatty() else PlainProgress()
    reports = run_main_job(
        names,
        default_data_dir() / "dagster_home",
        log=print if args.verbose else _drop,
        progress=progress,
    )
    store = build_store(settings)
    try:
        for name, report in zip(names, reports, strict=True):
            print()
            print("\n".join(stream_table(name, report, store.table_partitions(name))))
            print(audit_line(name, report))
    finally:
        store.close_store()
    if args.verbose:
        print_status(settings)
    print_held_elsewhere(settings, names)
    return run_outcome(reports)


def _drop(line: str) -> None:
    """The main job's detail lines, without --verbose: the stage lines and tables say it."""


SAMPLE_SCHEMA = {"event_id": "string", "user_id": "string", "amount": "double"}


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
    for line in crashed:
        print(f"leasehold: run failed: {' '.join(line.split())}", file=sys.stderr)
    for line in failed:
        print(f"leasehold: not ingested: {line}", file=sys.stderr)
    for name in checks:
        print(f"leasehold: check failed: {name} (details: leasehold check)", file=sys.stderr)
    if crashed:
        return EXIT_FAILURE
    if failed:
        return EXIT_PARTITIONS_FAILED
    return EXIT_CHECK_FAILED if checks else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from resources.cli.demo import run_demo

    settings = settings_from_env()
    work_dir = Path(args.work_dir) if args.work_dir else default_data_dir() / "demo"
    result = run_demo(settings, workers=args.workers, partitions=args.partitions, work_dir=work_dir)
    print(result.describe())
    print_status(settings)
    return 0 if result.ok else 1


def cmd_check(args: argparse.Namespace) -> int:
    """Every check of every stream (or of --stream): exit 4 when one fails. Each judges what
    changed since it last passed, or everything with --full (`resources.ledger.check_scope`)."""
    from resources.aggregation import checks as rollup_checks
    from resources.catalog.opening import catalog_for
    from resources.catalog.settings import CatalogSettings
    from resources.check_outcome import CheckOutcome
    from resources.compaction import checks as compaction_checks
    from resources.coordination.lease import TimingSettings
    from resources.ingestion.check_suite import run_all
    from resources.ingestion.source_listing import source_lister
    from resources.objects.base import ObjectStore, object_store_for
    from resources.publication import checks as publication_checks

    settings = settings_from_env()
    timing = TimingSettings.from_env()
    catalog_settings = CatalogSettings.from_env()
    lake = LakeSettings.from_env()
    streams = lake.streams()
    if args.stream is not None and args.stream not in streams:
        raise ConfigError(
            "--stream", f"{args.stream!r} is not a stream; the streams file has {sorted(streams)}"
        )

    def objects(url: str) -> ObjectStore:
        return object_store_for(url, endpoint_url=lake.s3_endpoint_url, region=lake.region)

    results: list[tuple[str, CheckOutcome]] = []
    # Writable: each check remembers what it has evaluated, so the next pass reads what changed.
    store = open_existing_store(settings, read_only=False)
    catalog = catalog_for(catalog_settings)
    try:
        for name in [args.stream] if args.stream else sorted(streams):
            config = streams[name]
            outcomes = run_all(
                store,
                config,
                table=name,  # a stream's ledger table is named after it
                lister=source_lister(objects(config.source)),
                read_column=objects(config.table).read_column,
                ownership_timeout_s=timing.ownership_timeout_seconds,
                unassigned_retry_after_s=timing.unassigned_retry_after_seconds,
                full=args.full,
            )
            outcomes += compaction_checks.run_all(
                store,
                config,
                objects=objects(config.table),
                ownership_timeout_s=timing.ownership_timeout_seconds,
                table=name,
                full=args.full,
            )
            outcomes += publication_checks.run_all(
                config, store, objects(config.table), catalog, full=args.full
            )
            outcomes += rollup_checks.run_all(
                config,
                store,
                objects(config.table),
                catalog,
                full=args.full,
                s3_endpoint_url=lake.s3_endpoint_url,
                region=lake.region,
            )
            results += [(name, outcome) for outcome in outcomes]
    finally:
        store.close_store()
    if args.json:
        rows = [
            {
                "stream": stream,
                "check": o.name,
                "verdict": o.verdict,
                "passed": o.passed,
                "severity": o.severity,
                "summary": o.summary,
                "metadata": o.metadata,
            }
            for stream, o in results
        ]
        print(json.dumps(rows, indent=2, default=str))
    else:
        width = max(len(stream) for stream, _ in results)
        names = max(len(o.name) for _, o in results)
        for stream, o in results:
            print(f"{o.verdict}  {stream:<{width}}  {o.name:<{names}}  {one_line(o.summary)}")
    return EXIT_CHECK_FAILED if any(o.failed for _, o in results) else 0


EXIT_FAILURE = 1
EXIT_CONFIG = 2  # also argparse's code for a bad command line
EXIT_PARTITIONS_FAILED = 3
EXIT_CHECK_FAILED = 4

EPILOG = """\
exit status:
  0  success (`check`, `run`: every check passed or only warned)
  1  failure: a store, object store or catalog unreachable, no store or catalog where one
     was looked for, a table or date the catalog does not have, a run that crashed, a stream
     whose garbage collection stopped (`gc` collects the others), a key `redrive` did not
     put back (not a dead letter, or no such item; the others were re-driven)
  2  invalid configuration (the message names the field; `leasehold config` checks it all
     and shows what each setting is and where it came from) or invalid command line
  3  `run`: some source partitions were not ingested, each listed with its reason and when it
     is retried; the others were ingested
  4  a check failed (`check`: one line per check: PASS, WARN or FAIL, stream, check, summary)

`init`: 1 when the source cannot become a stream (no objects, unreadable objects, nothing that
parses); 2 when the sample does not settle a choice: the message names the flag that does
(--format, --event-time, --record-id, --name).

An error leasehold expects is printed as one line, `leasehold: <message>`; --debug adds its
traceback and leasehold's debug logs. Any other error is a bug and prints its traceback.
"""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="leasehold",
        description=__doc__,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    debug_help = "on an error, print its traceback too; log leasehold's debug messages"
    parser.add_argument("--debug", action="store_true", help=debug_help)
    # Also accepted after the command (`leasehold status --debug`); SUPPRESS keeps a subcommand
    # from resetting a --debug given before it.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=debug_help)
    verbose_help = (
        "show what libraries print (Spark's and Java's logs, Dagster's warnings) and every "
        "detail line; without it Spark's log goes to LEASEHOLD_SPARK_LOG "
        "(default <data dir>/logs/spark.log)"
    )
    parser.add_argument("--verbose", action="store_true", help=verbose_help)
    common.add_argument(
        "--verbose", action="store_true", default=argparse.SUPPRESS, help=verbose_help
    )
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, help: str) -> argparse.ArgumentParser:
        return sub.add_parser(
            name, help=help, parents=[common], epilog=EPILOG, formatter_class=parser.formatter_class
        )

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
    add_init_parser(add)
    demo = add("demo", help="worker processes racing over one lease store")
    demo.add_argument("--workers", type=int, default=4)
    demo.add_argument("--partitions", type=int, default=300)
    demo.add_argument("--work-dir", default=None)
    demo.set_defaults(fn=cmd_demo)
    status = add("status", help="lease counts, expired leases, dead letters, metrics")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(fn=cmd_status)
    config = add(
        "config",
        help="every setting: its variable, value and whether the environment set it; "
        "validates them all",
    )
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(fn=cmd_config)
    add_doctor_command(add("doctor", help=DOCTOR_HELP))
    purge = add("purge-expired", help="delete items whose TTL passed (SQLite)")
    purge.set_defaults(fn=cmd_purge)
    check = add(
        "check",
        help="run every check of every stream: rows reconcile, unique record ids, lease "
        "health, source completeness, merge chains, publication (exit 4 when one fails); each "
        "judges what changed since it last passed",
    )
    check.add_argument("--stream", default=None, help="only this stream of the streams file")
    check.add_argument(
        "--full",
        action="store_true",
        help="a full audit: judge every table partition and list the whole source, not only "
        "what changed since each check last passed (a pass is full by itself once a day)",
    )
    check.add_argument("--json", action="store_true", help="machine-readable output")
    check.set_defaults(fn=cmd_check)
    table = add(
        "table",
        help="a stream's published table as a query engine sees it: through the catalog "
        "(LEASEHOLD_CATALOG) and the manifest each partition points at",
    )
    table_sub = table.add_subparsers(dest="table_command", required=True)

    def add_table(name: str, help: str) -> argparse.ArgumentParser:
        command = table_sub.add_parser(
            name, help=help, parents=[common], epilog=EPILOG, formatter_class=parser.formatter_class
        )
        command.add_argument("stream", help="the stream (its table has the stream's name)")
        return command

    ls = add_table(
        "ls", help="the catalog's partitions: dt, publication seq, version, files, schema versions"
    )
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(fn=cmd_table_ls)
    files = add_table("files", help="the data files a partition's manifest lists, with lengths")
    files.add_argument("date", type=date_arg, help="the partition's date, YYYY-MM-DD")
    files.add_argument("--json", action="store_true", help="machine-readable output")
    files.set_defaults(fn=cmd_table_files)
    read = add_table("read", help="a partition's rows, read through its manifest")
    read.add_argument("date", type=date_arg, help="the partition's date, YYYY-MM-DD")
    read.add_argument(
        "--limit", type=non_negative, default=None, help="at most N rows (default: all)"
    )
    read.add_argument("--json", action="store_true", help="one JSON object per row")
    read.set_defaults(fn=cmd_table_read)
    gc = add(
        "gc",
        help="delete the table files no retained manifest version and no ledger state needs, "
        "once LEASEHOLD_GC_SAFETY_DELAY_SECONDS passed",
    )
    gc.add_argument("--stream", default=None, help="only this stream of the streams file")
    gc.add_argument(
        "--dry-run", action="store_true", help="say what would be deleted; delete nothing"
    )
    gc.add_argument("--json", action="store_true", help="machine-readable output")
    gc.set_defaults(fn=cmd_gc)
    add_redrive_parser(add)
    add_rollup_parser(add, common)
    add_schema_parser(add)
    return parser


def non_negative(value: str) -> int:
    """argparse type of a count (a bad one is exit 2)."""
    try:
        number = int(value)
    except ValueError:
        number = -1
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} is not a count (0, 1, 2, ...)")
    return number


def configure_logging(debug: bool) -> None:
    """Warnings and errors of every library on stderr; leasehold's own debug messages too with
    --debug. The root stays at WARNING even then: botocore's debug log prints signed request
    headers (session tokens among them), py4j's every gateway command."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    if debug:
        for name in ("resources", "coordination_assets"):
            logging.getLogger(name).setLevel(logging.DEBUG)


def quiet_libraries(verbose: bool) -> None:
    """Unless --verbose, what libraries print for their developers stays out of the output:
    PySpark's warning about the pandas version is dropped (`quiet_spark` moves the JVM's log)."""
    if verbose:
        return
    warnings.filterwarnings("ignore", message="PySpark does not yet fully support pandas")


def quiet_spark(verbose: bool) -> None:
    """For a command that starts Spark: unless --verbose, the Spark JVM's log (Java's module
    warning, log4j's start-up lines, Hadoop's native-code WARN) goes to a file. An explicit
    LEASEHOLD_SPARK_LOG wins either way."""
    if not verbose:
        log = default_data_dir() / "logs" / "spark.log"
        os.environ.setdefault("LEASEHOLD_SPARK_LOG", str(log))


def one_line(exc: BaseException) -> str:
    """The error's message on one line (a message from a library may span several)."""
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command. A `LeaseholdError` ends it with one line on stderr and exit code 2
    (`ConfigError`) or 1; any other error is a bug and propagates with its traceback."""
    args = build_parser().parse_args(argv)
    configure_logging(args.debug)
    quiet_libraries(args.verbose)
    try:
        return args.fn(args)
    except BrokenPipeError:
        # The reader stopped reading (`| head`): nothing wrong with the command. Python's own
        # advice: point stdout at devnull, so flushing it at exit raises nothing more.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except LeaseholdError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"leasehold: {one_line(exc)}", file=sys.stderr)
        return EXIT_CONFIG if isinstance(exc, ConfigError) else EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())
