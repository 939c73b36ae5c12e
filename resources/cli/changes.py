"""`leasehold changes ls|ack STREAM [KEY]`: the source objects rewritten in place after a work
unit took them, and the operator's acknowledgement of those left unread.

Discovery records each such change once per key and new fingerprint
(`resources/coordination/source_changes.py`). Under `on_change: ignore` a change stays
`pending` — in `leasehold status`, the run's story and the `changed_sources` check — until it is
acknowledged here: the operator has decided (the rewrite was a producer's retry; the new data
went under a new key; the object was deleted by hand). `ack` changes nothing else: the object is
still not read, and acknowledging twice is harmless. A change appended or replaced
(`on_change: append | replace`) needs nothing.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from resources.cli.exit_status import EPILOG
from resources.cli.stream_choice import chosen_streams
from resources.coordination.source_changes import ACKNOWLEDGED, PENDING, SourceChange
from resources.stores import CoordinationStore, open_existing_store
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings


def add_changes_parser(add: Any, common: argparse.ArgumentParser) -> None:
    """Register `changes ls` and `changes ack` with `parser.build_parser`'s `add(name, help)`;
    each takes the common options (`common`) too."""
    changes = add("changes", help="source objects rewritten in place after they were ingested")
    sub = changes.add_subparsers(dest="changes_command", required=True)
    listing = sub.add_parser(
        "ls", help="the changes recorded for a stream", parents=[common], epilog=EPILOG
    )
    acking = sub.add_parser(
        "ack",
        help="acknowledge pending changes (they stay unread)",
        parents=[common],
        epilog=EPILOG,
    )
    for parser in (listing, acking):
        parser.add_argument("stream", help="the stream of the streams file")
        parser.add_argument("key", nargs="?", help="only this source object's key")
        parser.add_argument("--json", action="store_true", help="machine-readable output")
    listing.set_defaults(fn=cmd_changes_ls)
    acking.set_defaults(fn=cmd_changes_ack)


def cmd_changes_ls(args: argparse.Namespace) -> int:
    """Print the stream's changes (of `args.key` alone when given). Exit 0."""
    chosen_streams(args.stream, LakeSettings.from_env().streams(), field="stream")
    store = open_existing_store(settings_from_env(), read_only=True)
    try:
        found = store.source_changes(store.source_identifier(args.stream), args.key)
    finally:
        store.close_store()
    if args.json:
        print(json.dumps([_json(c) for c in found], indent=2))
        return 0
    for change in found:
        print(change_text(change))
    pending = sum(1 for c in found if c.state == PENDING)
    print(f"{args.stream}: {len(found)} changes recorded, {pending} pending")
    return 0


def cmd_changes_ack(args: argparse.Namespace) -> int:
    """Acknowledge the stream's pending changes (of `args.key` alone when given). Exit 0."""
    chosen_streams(args.stream, LakeSettings.from_env().streams(), field="stream")
    store = open_existing_store(settings_from_env(), read_only=False)
    try:
        sid = store.source_identifier(args.stream)
        pending = [c for c in pending_changes(store, args.stream) if args.key in (None, c.key)]
        for change in pending:
            store.set_change_state(sid, change, ACKNOWLEDGED)
    finally:
        store.close_store()
    if args.json:
        print(json.dumps({"stream": args.stream, "acknowledged": [_json(c) for c in pending]}))
    else:
        print(f"{args.stream}: {len(pending)} pending changes acknowledged (not read)")
    return 0


def pending_line(stream: str, pending: list[SourceChange]) -> str | None:
    """One line naming a stream's pending changes and the command that clears them (what
    `leasehold status` and `leasehold run` print); None when there is none."""
    if not pending:
        return None
    more = f" (and {len(pending) - 1} more)" if len(pending) > 1 else ""
    objects = "1 source object" if len(pending) == 1 else f"{len(pending)} source objects"
    return (
        f"{stream}: {objects} changed since they were ingested, not read "
        f"again (on_change: ignore): {pending[0].key}{more}; see leasehold changes ls {stream}, "
        f"clear with leasehold changes ack {stream}"
    )


def pending_changes(store: CoordinationStore, stream: str) -> list[SourceChange]:
    """The stream's changes still `pending` (one read of its change records)."""
    found = store.source_changes(store.source_identifier(stream))
    return [c for c in found if c.state == PENDING]


def change_text(change: SourceChange) -> str:
    """One line: the object, its new fingerprint and size, what it was, the state."""
    was = change.was_etag or "unknown"
    return (
        f"{change.state:12} {change.key}  fingerprint {change.etag}, {change.size} bytes "
        f"(was {was}, {change.was_size}; unit {change.unit})"
    )


def _json(change: SourceChange) -> dict[str, Any]:
    return {
        "key": change.key,
        "etag": change.etag,
        "size": change.size,
        "wasEtag": change.was_etag,
        "wasSize": change.was_size,
        "unit": change.unit,
        "seenMs": change.seen_ms,
        "state": change.state,
    }
