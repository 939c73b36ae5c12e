"""`leasehold schema STREAM`: the stream's schema versions, as the lease store records them.

Each version: its number, when it was recorded (UTC), where its new columns were first seen (a
work unit's object and line, or streams.yaml) and what it added, with types; then the latest
version's columns. `--json`: one JSON object per version. A stream no run has met yet has no
recorded version: its schema is streams.yaml's, shown as version 1 (not recorded).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from datetime import datetime, timezone

from resources.errors import ConfigError
from resources.schema.versions import CONFIG_ORIGIN, SchemaVersion
from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env
from resources.stores.stream_schema import declared_columns
from resources.streams import LakeSettings


def cmd_schema(args: argparse.Namespace) -> int:
    streams = LakeSettings.from_env().streams()
    if args.stream not in streams:
        raise ConfigError("stream", f"{args.stream!r} is not a stream; have {sorted(streams)}")
    config = streams[args.stream]
    store = open_existing_store(settings_from_env())
    try:
        versions = store.schema_versions(args.stream)
    finally:
        store.close_store()
    recorded = bool(versions)
    if not versions:
        columns = tuple(declared_columns(config))
        versions = [SchemaVersion(1, columns, tuple(c.name for c in columns), CONFIG_ORIGIN)]
    if args.json:
        for v in versions:
            print(json.dumps({"stream": args.stream, "recorded": recorded, **v.to_json()}))
        return 0
    print(f"{args.stream}: schema_evolution {config.schema_evolution}")
    for v in versions:
        when = (
            datetime.fromtimestamp(v.created_at_ms / 1000, timezone.utc).strftime(
                "%Y-%m-%dT%H:%M:%SZ"
            )
            if recorded
            else "not recorded yet"
        )
        types = {c.name: c.type for c in v.columns}
        added = ", ".join(f"{n} {types[n]}" for n in v.added)
        print(f"  v{v.version}  {when}  {v.origin.describe()}  adds: {added}")
    latest = versions[-1]
    print(
        f"  columns (v{latest.version}): " + ", ".join(f"{c.name} {c.type}" for c in latest.columns)
    )
    return 0


def add_schema_parser(
    add: Callable[[str, str], argparse.ArgumentParser],
) -> None:
    schema = add("schema", "a stream's schema versions: when, where first seen, what each added")
    schema.add_argument("stream")
    schema.add_argument("--json", action="store_true", help="one JSON object per version")
    schema.set_defaults(fn=cmd_schema)
