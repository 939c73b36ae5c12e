"""`leasehold cleanup [--stream S] [--dry-run] [--json]`: one source clean-up pass per stream.

For each stream whose `source_cleanup.mode` is `archive` or `delete` (every other stream is
skipped, saying so), one bounded pass of `SourceCleaner` (`resources.cleanup`): the source
objects of COMPLETED work units whose rows are published, `after` their unit completed, are
archived or deleted, and the stream's counts and cursor saved. `--dry-run` lists what would go
— key, unit and why it is due — and changes nothing (the store is opened read-only). A stream
whose pass stops (the store or an object store unreachable) does not stop the others: it is
one line on stderr and the exit status is 1; the next pass redoes the unit it was at.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from resources.cleanup.cleaner import CleanupReport
from resources.cleanup.opening import source_cleaner
from resources.cli.exit_status import EXIT_FAILURE
from resources.cli.stream_choice import chosen_streams
from resources.coordination.lease import TimingSettings, new_owner_id
from resources.errors import LeaseholdError
from resources.publication.settings import PublicationSettings
from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings

log = logging.getLogger(__name__)


def cmd_cleanup(args: argparse.Namespace) -> int:
    lake = LakeSettings.from_env()
    streams = lake.streams()
    names = chosen_streams(args.stream, streams)
    per_pass = PublicationSettings.from_env().cleanup_objects_per_pass
    timeout_s = TimingSettings.from_env().ownership_timeout_seconds
    reports: list[CleanupReport] = []
    failed: list[str] = []
    store = open_existing_store(settings_from_env(), read_only=args.dry_run)
    try:
        for name in names:
            if not streams[name].source_cleanup.enabled:
                if not args.json:
                    print(f"{name}: source_cleanup is off; nothing to do")
                continue
            cleaner = source_cleaner(
                streams[name],
                store,
                endpoint_url=lake.s3_endpoint_url,
                region=lake.region,
                objects_per_pass=per_pass,
                owner=new_owner_id(),
                timeout_s=timeout_s,
            )
            try:
                reports.append(cleaner.run_pass(dry_run=args.dry_run))
            except LeaseholdError as exc:
                log.debug("source clean-up of %s failed", name, exc_info=True)
                failed.append(f"{name}: {' '.join(str(exc).split())}")
            if not args.json and reports and reports[-1].stream == name:
                print(report_text(reports[-1]))
    finally:
        store.close_store()
    if args.json:
        print(json.dumps([report_json(r) for r in reports], indent=2))
    for line in failed:
        print(f"leasehold: cleanup stopped: {line}", file=sys.stderr)
    return EXIT_FAILURE if failed else 0


def report_text(report: CleanupReport) -> str:
    """The pass's line, then (dry run) one line per object that would go."""
    lines = [report.describe()]
    lines += [f"  {d.key}  (unit {d.unit}: {d.why})" for d in report.due]
    if not report.dry_run:
        s = report.state
        lines.append(
            f"  since clean-up began: {s.archived} archived, {s.deleted} deleted, {s.gone} "
            f"already gone, {s.bytes} bytes"
        )
    return "\n".join(lines)


def report_json(report: CleanupReport) -> dict[str, Any]:
    r, s = report.removed, report.state
    return {
        "stream": report.stream,
        "mode": report.mode,
        "dryRun": report.dry_run,
        "busy": report.busy,
        "units": report.units,
        "unitsPassedOver": report.passed_over,
        "archived": r.archived,
        "deleted": r.deleted,
        "alreadyGone": r.gone,
        "bytes": r.bytes,
        "due": [{"key": d.key, "unit": d.unit, "why": d.why} for d in report.due],
        "waiting": None
        if report.waiting is None
        else {"unit": report.waiting[0], "why": report.waiting[1]},
        "total": {
            "archived": s.archived,
            "deleted": s.deleted,
            "alreadyGone": s.gone,
            "bytes": s.bytes,
            "cursor": s.cursor,
        },
    }


def add_cleanup_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    cleanup = add(
        "cleanup",
        help="archive or delete the source objects whose rows are published, for the streams "
        "with source_cleanup (one bounded pass each)",
    )
    cleanup.add_argument("--stream", default=None, help="only this stream of the streams file")
    cleanup.add_argument(
        "--dry-run",
        action="store_true",
        help="list what would go (key, unit, why it is due); change nothing",
    )
    cleanup.add_argument("--json", action="store_true", help="machine-readable output")
    cleanup.set_defaults(fn=cmd_cleanup)
