"""`leasehold gc [--stream S] [--dry-run] [--json]`: garbage collection of the streams' tables.

The `GarbageCollector` decides what may go (`resources.publication.garbage`); this only runs
it per stream with the configured safety delay and says what was (or would be) reclaimed, by
reason. A stream whose collection stops (a manifest it cannot read, the store unreachable) does
not stop the others, and deletions that failed are left for the next run: each is one line on
stderr, and the exit status is 1 if there was one — the files are still there, so the next run
finds them again.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PublicationTarget
from resources.cli.stream_choice import chosen_streams
from resources.cli.table import local_catalog_path
from resources.errors import LeaseholdError
from resources.objects.factory import object_store_for
from resources.publication.settings import PublicationSettings
from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings, StreamConfig

if TYPE_CHECKING:
    from resources.publication.garbage import GcReport

log = logging.getLogger(__name__)


def served_target(config: StreamConfig, lake: LakeSettings) -> PublicationTarget | None:
    """The stream's publication target, whose history garbage collection keeps; None when its
    local catalog does not exist (nothing was published: no history — and opening the SQL
    catalog would create it)."""
    from resources.catalog.opening import target_for

    catalog = CatalogSettings.from_env()
    if catalog.catalog == "local" and not local_catalog_path(catalog, config.table_format).exists():
        return None
    return target_for(
        catalog, config.table_format, s3_endpoint_url=lake.s3_endpoint_url, s3_region=lake.region
    )


def cmd_gc(args: argparse.Namespace) -> int:
    from resources.publication.garbage import GarbageCollector

    settings = settings_from_env()
    delay_s = PublicationSettings.from_env().gc_safety_delay_seconds
    lake = LakeSettings.from_env()
    streams = lake.streams()
    names = chosen_streams(args.stream, streams)
    reports: list[GcReport] = []
    failed: list[str] = []
    # A dry run only reads: the store is opened read-only, as `status` and `check` open it.
    store = open_existing_store(settings, read_only=args.dry_run)
    try:
        for name in names:
            config = streams[name]
            objects = object_store_for(
                config.table, endpoint_url=lake.s3_endpoint_url, region=lake.region
            )
            collector = GarbageCollector(
                config, store, objects, safety_delay_s=delay_s, target=served_target(config, lake)
            )
            try:
                reports.append(collector.collect(dry_run=args.dry_run))
            except LeaseholdError as exc:
                log.debug("garbage collection of %s failed", name, exc_info=True)
                failed.append(f"{name}: {' '.join(str(exc).split())}")
    finally:
        store.close_store()
    if args.json:
        print(json.dumps([report_json(r, delay_s) for r in reports], indent=2))
    else:
        for report in reports:
            print(report_text(report, delay_s))
    for line in failed:
        print(f"leasehold: gc stopped: {line}", file=sys.stderr)
    for report in reports:
        for error in report.errors:
            print(f"leasehold: gc {report.table}: not deleted: {error}", file=sys.stderr)
        if report.failed > len(report.errors):
            more = report.failed - len(report.errors)
            print(f"leasehold: gc {report.table}: {more} more not deleted", file=sys.stderr)
    return 1 if failed or any(not r.ok for r in reports) else 0


def report_json(report: GcReport, safety_delay_s: float) -> dict[str, Any]:
    return {
        "table": report.table,
        "dryRun": report.dry_run,
        "safetyDelaySeconds": safety_delay_s,
        "files": report.files,
        "bytes": report.bytes,
        "byReason": {
            reason: {"files": files, "bytes": size}
            for reason, (files, size) in report.by_reason.items()
        },
        "forgottenPublications": report.forgotten_publications,
        "failedDeletions": report.failed,
    }


def report_text(report: GcReport, safety_delay_s: float) -> str:
    verb = "would delete" if report.dry_run else "deleted"
    lines = [
        f"{report.table}: {verb} {report.files} files, {report.bytes} bytes "
        f"(safety delay {safety_delay_s:g} s)"
    ]
    lines += [
        f"  {reason}: {files} files, {size} bytes"
        for reason, (files, size) in report.by_reason.items()
    ]
    forgot = "would forget" if report.dry_run else "forgot"
    lines.append(f"  {forgot} {report.forgotten_publications} superseded publication records")
    if report.failed:
        lines.append(f"  {report.failed} deletions failed (left for the next run)")
    return "\n".join(lines)


def add_gc_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
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
