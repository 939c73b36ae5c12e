"""`leasehold check`: every check of every stream (or of `--stream`), the code the asset checks
run, printed one line per check (or as JSON); exit 4 when one fails.

Each check judges what changed since it last passed, or everything with `--full`
(`resources.ledger.check_scope`).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from resources.cli.exit_status import EXIT_CHECK_FAILED
from resources.cli.one_line import one_line
from resources.cli.stream_choice import chosen_streams
from resources.stores import CoordinationStore, open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings, StreamConfig

if TYPE_CHECKING:
    from resources.catalog.target import PublicationTarget
    from resources.check_outcome import CheckOutcome
    from resources.coordination.lease import TimingSettings
    from resources.objects.base import ObjectStore


def cmd_check(args: argparse.Namespace) -> int:
    """Every check of every stream (or of --stream): exit 4 when one fails."""
    from resources.catalog.opening import target_for
    from resources.catalog.settings import CatalogSettings
    from resources.coordination.lease import TimingSettings

    settings = settings_from_env()
    timing = TimingSettings.from_env()
    catalog_settings = CatalogSettings.from_env()
    lake = LakeSettings.from_env()
    streams = lake.streams()
    names = chosen_streams(args.stream, streams)
    results: list[tuple[str, CheckOutcome]] = []
    # Writable: each check remembers what it has evaluated, so the next pass reads what changed.
    store = open_existing_store(settings, read_only=False)
    targets: dict[str, PublicationTarget] = {}
    try:
        for name in names:
            table_format = streams[name].table_format
            if table_format not in targets:
                targets[table_format] = target_for(
                    catalog_settings,
                    table_format,
                    s3_endpoint_url=lake.s3_endpoint_url,
                    s3_region=lake.region,
                )
            target = targets[table_format]
            outcomes = stream_checks(store, target, lake, timing, streams[name], name, args.full)
            results += [(name, outcome) for outcome in outcomes]
    finally:
        store.close_store()
    print_results(results, as_json=args.json)
    return EXIT_CHECK_FAILED if any(o.failed for _, o in results) else 0


def stream_checks(
    store: CoordinationStore,
    target: PublicationTarget,
    lake: LakeSettings,
    timing: TimingSettings,
    config: StreamConfig,
    table: str,
    full: bool,
) -> list[CheckOutcome]:
    """One stream's checks, in order: ingestion, merges, publication, rollups; `target`
    serves the stream's tables (its `table_format`)."""
    from resources.aggregation import checks as rollup_checks
    from resources.compaction import checks as compaction_checks
    from resources.ingestion.check_suite import run_all
    from resources.ingestion.source_listing import source_lister
    from resources.publication import checks as publication_checks
    from resources.publication.publication_state import served_and_sources

    objects = _object_stores(lake)
    outcomes = run_all(
        store,
        config,
        table=table,  # a stream's ledger table is named after it
        lister=source_lister(objects(config.source)),
        read_column=objects(config.table).read_column,
        ownership_timeout_s=timing.ownership_timeout_seconds,
        unassigned_retry_after_s=timing.unassigned_retry_after_seconds,
        full=full,
        served_urls=partial(served_and_sources, objects(config.table)),
    )
    outcomes += compaction_checks.run_all(
        store,
        config,
        objects=objects(config.table),
        ownership_timeout_s=timing.ownership_timeout_seconds,
        table=table,
        full=full,
    )
    outcomes += publication_checks.run_all(config, store, objects(config.table), target, full=full)
    outcomes += rollup_checks.run_all(
        config,
        store,
        objects(config.table),
        target,
        full=full,
        s3_endpoint_url=lake.s3_endpoint_url,
        region=lake.region,
    )
    return outcomes


def _object_stores(lake: LakeSettings) -> Callable[[str], ObjectStore]:
    """The object store of a URL, with the lake's S3 endpoint and region."""
    from resources.objects.factory import object_store_for

    def objects(url: str) -> ObjectStore:
        return object_store_for(url, endpoint_url=lake.s3_endpoint_url, region=lake.region)

    return objects


def print_results(results: Sequence[tuple[str, CheckOutcome]], *, as_json: bool) -> None:
    """One line per check (verdict, stream, check, summary), columns aligned; or JSON."""
    if as_json:
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
        return
    width = max(len(stream) for stream, _ in results)
    names = max(len(o.name) for _, o in results)
    for stream, o in results:
        print(f"{o.verdict}  {stream:<{width}}  {o.name:<{names}}  {one_line(o.summary)}")


def add_check_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
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
