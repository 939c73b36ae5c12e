"""`leasehold rollup read STREAM DATE`: a stream's rollups of one date, from the lease store.

What it prints is the state itself (each key's value as the last committed batch left it) and
where the state is (the object id its batches reached, and a batch being written if one is):
a reader comparing it with the published table sees both sides. Exit 1 when the stream
declares no rollup (or not the one asked for).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from typing import Any

from resources.aggregation.rollup_table import state_rows
from resources.cli.table import date_arg, rows_text
from resources.coordination.items import ItemType
from resources.errors import ConfigError, LeaseholdError
from resources.rollup.cursor import RollupCursor, rollup_id
from resources.rollup.spec import RollupSpec
from resources.stores import open_existing_store
from resources.stores.base import CoordinationStore
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings


class NoRollupError(LeaseholdError):
    """The stream declares no such rollup."""


def rollup_rows(
    store: CoordinationStore, table: str, spec: RollupSpec, dt: str
) -> tuple[RollupCursor, list[dict[str, Any]]]:
    """The state of `spec` for `dt` as rows: group_by columns, then the aggregates, by key."""
    item = store.get(store.source_identifier(rollup_id(table, spec), ItemType.ROLLUP_JOB), dt)
    cursor = RollupCursor() if item is None else RollupCursor.of(item.progress)
    return cursor, state_rows(store, table, spec, dt)


def cmd_rollup_read(args: argparse.Namespace) -> int:
    lake = LakeSettings.from_env()
    streams = lake.streams()
    if args.stream not in streams:
        raise ConfigError("stream", f"{args.stream!r} is not a stream; have {sorted(streams)}")
    config = streams[args.stream]
    specs = [s for s in config.rollups if args.rollup in (None, s.name)]
    if not specs:
        declared = ", ".join(s.name for s in config.rollups) or "none"
        raise NoRollupError(
            f"stream {args.stream!r} has no rollup {args.rollup or ''}; declared: {declared} "
            "(streams.yaml, `rollups:`)"
        )
    store = open_existing_store(settings_from_env())
    try:
        for spec in specs:
            cursor, rows = rollup_rows(store, args.stream, spec, args.date)
            if args.json:
                for row in rows:
                    print(json.dumps({"rollup": spec.name, "dt": args.date, **row}))
                continue
            print(f"rollup {args.stream}.{spec.name} dt={args.date} {_where(spec, cursor)}")
            print(rows_text(rows))
    finally:
        store.close_store()
    return 0


def _where(spec: RollupSpec, cursor: RollupCursor) -> str:
    """What the state covers: the ids its batches reached, or the publication it was
    recomputed from (a stream whose published rows can leave), and a write in progress."""
    pending = f"; batch up to id {cursor.pending[1]} is being written" if cursor.pending else ""
    if cursor.seq:
        return (
            f"(recomputed per publication): state of publication {cursor.seq}, ids "
            f"1..{cursor.upto}{pending}"
        )
    return f"({spec.mode.value}): state at object id {cursor.upto}{pending}"


def add_rollup_parser(add: Callable[[str, str], argparse.ArgumentParser], common: Any) -> None:
    rollup = add("rollup", "a stream's rollups (streams.yaml `rollups:`), from the lease store")
    sub = rollup.add_subparsers(dest="rollup_command", required=True)
    read = sub.add_parser("read", help="one date's rollup state: a row per key", parents=[common])
    read.add_argument("stream", help="the stream whose rollups to read")
    read.add_argument("date", type=date_arg, help="the table partition's date, YYYY-MM-DD")
    read.add_argument("--rollup", default=None, help="only this rollup (default: all)")
    read.add_argument("--json", action="store_true", help="one JSON object per row")
    read.set_defaults(fn=cmd_rollup_read)
