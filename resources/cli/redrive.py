"""`leasehold redrive STREAM (KEY ... | --all) [--dry-run]`: put dead letters back to be retried.

A work unit is dead-lettered after `LEASEHOLD_MAX_CLOSED_COUNT` failed reads (COMPLETED with a
`deadLetterReason`) and no run takes it again: that is the point, since retrying a broken
object forever costs every run. Once the cause is fixed (permissions, a missing object put
back, a credential), an operator says so with this command; `LeaseStore.redrive` makes each
unit CLOSED and due at once, its tries counted from zero, its committed objects kept done. The
discovery sensor's next tick (or the next `leasehold run`) asks for a run of it like any
reopened CLOSED unit. Each key is one conditional write that applies only to a dead letter, so
a unit that completed or is being retried is never taken back, and running this twice is safe.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from resources.cli.stream_choice import chosen_streams
from resources.coordination.errors import PartitionNotFoundError, PartitionUnavailableError
from resources.coordination.items import LeaseItem
from resources.coordination.lease_store import LeaseStore
from resources.errors import ConfigError, LeaseholdError
from resources.ingestion.partition_keys import from_partition_key
from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings

EXIT_SOME_REFUSED = 1


def add_redrive_parser(add: Any) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    redrive = add(
        "redrive",
        help="put dead-lettered source partitions back to be retried (after fixing the cause)",
    )
    redrive.add_argument("stream", help="the stream of the streams file")
    redrive.add_argument(
        "keys",
        nargs="*",
        metavar="PARTITION_KEY",
        help="a dead letter's key as `leasehold status` shows it (or the UI's partition key)",
    )
    redrive.add_argument("--all", action="store_true", help="every dead letter of the stream")
    redrive.add_argument(
        "--dry-run", action="store_true", help="say what would be re-driven; change nothing"
    )
    redrive.add_argument("--json", action="store_true", help="machine-readable output")
    redrive.set_defaults(fn=cmd_redrive)


def cmd_redrive(args: argparse.Namespace) -> int:
    if bool(args.keys) == bool(args.all):
        raise ConfigError(
            "PARTITION_KEY", "give dead letters' keys or --all, not both", what="command line"
        )
    chosen_streams(args.stream, LakeSettings.from_env().streams(), field="stream")
    store = open_existing_store(settings_from_env(), read_only=args.dry_run)
    try:
        sid = store.source_identifier(args.stream)
        keys = [d.partition_key for d in store.dead_letters(sid)] if args.all else args.keys
        results = [_redrive_one(store, sid, key, dry_run=args.dry_run) for key in keys]
    finally:
        store.close_store()
    if args.json:
        print(json.dumps({"stream": args.stream, "dryRun": args.dry_run, "results": results}))
    else:
        _print_text(args.stream, results, dry_run=args.dry_run, all_=args.all)
    return EXIT_SOME_REFUSED if any(not r["redriven"] for r in results) else 0


def _redrive_one(store: LeaseStore, sid: str, key: str, *, dry_run: bool) -> dict[str, Any]:
    """One key: re-driven (or, dry, would be), or why not. The key is the lease item's; a
    Dagster partition key (percent-escaped `|` and `%`) is understood too when no item has
    the key as given."""
    item = store.get(sid, key)
    if item is None and (decoded := _decoded(key)) != key:
        key, item = decoded, store.get(sid, decoded)
    if item is None:
        return _refused(key, None, "no lease item with this key")
    if dry_run:
        if item.dead_letter_reason is None:
            return _refused(key, item, f"not a dead letter ({item.status.value})")
        return _result(key, item, redriven=True)
    try:
        after = store.redrive(sid, key)
    except PartitionNotFoundError:
        return _refused(key, None, "no lease item with this key")
    except PartitionUnavailableError as exc:
        return _refused(key, exc.current, f"not a dead letter ({exc.current.status.value})")
    return _result(key, item, redriven=True, after=after)


def _decoded(key: str) -> str:
    try:
        return from_partition_key(key)
    except LeaseholdError:
        return key


def _refused(key: str, item: LeaseItem | None, why: str) -> dict[str, Any]:
    return {**_result(key, item, redriven=False), "refused": why}


def _result(
    key: str, before: LeaseItem | None, *, redriven: bool, after: LeaseItem | None = None
) -> dict[str, Any]:
    return {
        "sourcePartitionKey": key,
        "redriven": redriven,
        "deadLetterReason": None if before is None else before.dead_letter_reason,
        "closedCount": None if before is None else before.closed_count,
        "sourcePartitionStatus": None if after is None else after.status.value,
    }


def _print_text(stream: str, results: list[dict[str, Any]], *, dry_run: bool, all_: bool) -> None:
    if not results and all_:
        print(f"{stream}: no dead letters")
    verb = "would re-drive" if dry_run else "re-driven"
    for r in results:
        key = r["sourcePartitionKey"]
        if r["redriven"]:
            print(
                f"{stream}: {verb} {key!r} (dead-lettered after {r['closedCount']} closes: "
                f"{r['deadLetterReason']})"
            )
        else:
            print(f"leasehold: {stream}: not re-driven {key!r}: {r['refused']}", file=sys.stderr)
    if any(r["redriven"] for r in results) and not dry_run:
        print(
            f"{stream}: CLOSED and due now, tries counted from 0; the discovery sensor's next "
            "tick (or the next `leasehold run`) retries the objects not committed yet"
        )
