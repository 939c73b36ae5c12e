"""`leasehold status`: the lease store's counts, expired leases, dead letters and metrics, and
each stream's table partitions (`print_status` is the same, after `run --verbose` and `demo`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from resources.cli.changes import pending_changes, pending_line
from resources.compaction.table_status import table_status_json, table_status_text
from resources.coordination.cleanup_state import CleanupState, read_cleanup_state
from resources.coordination.source_changes import SourceChange
from resources.coordination.status import status_json, status_text
from resources.coordination.supplier import EVENT_COUNTS, SUPPLIER_STATE
from resources.errors import ConfigError
from resources.ledger.model import TablePartition
from resources.stores import CoordinationStore, build_store, open_existing_store
from resources.stores.settings import StoreSettings, settings_from_env
from resources.streams import LakeSettings


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


def _cleanups(store: CoordinationStore) -> list[tuple[str, str, CleanupState]]:
    """(stream, mode, clean-up state) of each stream whose `source_cleanup` is on."""
    try:
        streams = LakeSettings.from_env().streams()
    except ConfigError:
        return []  # `_tables` said why
    return [
        (name, config.source_cleanup.mode, read_cleanup_state(store, name))
        for name, config in sorted(streams.items())
        if config.source_cleanup.enabled
    ]


def _event_counts(store: CoordinationStore) -> list[tuple[str, dict[str, int]]]:
    """(stream, totals by what became of each event) of each stream discovering by
    notifications."""
    try:
        streams = LakeSettings.from_env().streams()
    except ConfigError:
        return []  # `_tables` said why
    return [
        (name, store.read_global_state(name, SUPPLIER_STATE).get(EVENT_COUNTS) or {})
        for name, config in sorted(streams.items())
        if config.discovery.notifications
    ]


def _changes(store: CoordinationStore) -> list[tuple[str, list[SourceChange]]]:
    """(stream, its pending source changes) of each stream that has some."""
    try:
        streams = LakeSettings.from_env().streams()
    except ConfigError:
        return []  # `_tables` said why
    found = [(name, pending_changes(store, name)) for name in sorted(streams)]
    return [(name, pending) for name, pending in found if pending]


def events_text(stream: str, counts: dict[str, int]) -> str:
    """One line: what became of the S3 events the stream received so far."""
    seen = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()) if n) or "none yet"
    return f"{stream} S3 events since discovery by notifications began: {seen}"


def cleanup_text(stream: str, mode: str, state: CleanupState) -> str:
    """One line: what source clean-up (`mode`) took out of the stream's source so far."""
    return (
        f"{stream} source clean-up ({mode}): {state.archived} archived, {state.deleted} "
        f"deleted, {state.gone} already gone, {state.bytes} bytes; {state.passes} passes"
    )


def cmd_status(args: argparse.Namespace) -> int:
    store = open_existing_store(settings_from_env())
    try:
        summaries = store.status()
        tables = _tables(store)
        cleanups = _cleanups(store)
        events = _event_counts(store)
        changes = _changes(store)
    finally:
        store.close_store()
    if args.json:
        document = {
            "sources": status_json(summaries),
            "tables": [table_status_json(t, parts) for t, parts in tables],
            "sourceCleanup": [
                {"stream": name, "mode": mode, **state.to_json()} for name, mode, state in cleanups
            ],
            "events": [{"stream": name, "counts": counts} for name, counts in events],
            "pendingChanges": [
                {"stream": name, "keys": [c.key for c in pending]} for name, pending in changes
            ],
        }
        print(json.dumps(document, indent=2))
    else:
        print(status_text(summaries))
        for table, partitions in tables:
            print(table_status_text(table, partitions))
        for name, mode, state in cleanups:
            print(cleanup_text(name, mode, state))
        for name, counts in events:
            print(events_text(name, counts))
        for name, pending in changes:
            print(pending_line(name, pending))
    return 0


def add_status_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    status = add("status", help="lease counts, expired leases, dead letters, metrics")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    status.set_defaults(fn=cmd_status)
