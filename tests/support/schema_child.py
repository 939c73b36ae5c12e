"""A schema writer in its own OS process, for the schema version race
(`tests/ledger/test_schema_versions_contract.py`).

`python -m tests.support.schema_child '<json>'` opens the store the payload's `settings` name
(it must exist: nothing is created), writes `ready`, waits for `go` (every writer starts at
once), then asks `record_schema` for each of `requests` in turn — each a list of (name, type),
as a run that met new fields asks for the columns it needs — with an origin naming `writer` and
the request's index. `think_s` is a pause after each read of the versions, before the put it
decides (as a slow network would make it): the window in which another writer's put lands.
Each answer (the version number and its columns) and how many races for a version number its
`_put_schema_version` lost go to `out`, as JSON, written atomically: the test's own account of
what each writer was told, beside what the store holds.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from resources.ledger.schema_versions import SchemaVersionTakenError
from resources.schema.columns import ColumnSpec
from resources.schema.versions import SchemaOrigin, SchemaVersion
from resources.stores import open_existing_store
from resources.stores.settings import StoreSettings

GO_LIMIT_S = 60.0


def main() -> None:
    args: dict[str, Any] = json.loads(sys.argv[1])
    store = open_existing_store(StoreSettings(**args["settings"]), read_only=False)
    lost = 0
    read, put = store.schema_versions, store._put_schema_version

    def slow_read(stream: str) -> list[SchemaVersion]:
        versions = read(stream)
        time.sleep(args["think_s"])
        return versions

    def counted_put(stream: str, version: SchemaVersion) -> None:
        nonlocal lost
        try:
            put(stream, version)
        except SchemaVersionTakenError:
            lost += 1
            raise

    store.schema_versions = slow_read  # type: ignore[method-assign]
    store._put_schema_version = counted_put  # type: ignore[method-assign]
    Path(args["ready"]).write_text("ready")
    go, deadline = Path(args["go"]), time.monotonic() + GO_LIMIT_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise SystemExit(f"no {go.name} after {GO_LIMIT_S} s")
        time.sleep(0.002)
    answers = []
    for n, request in enumerate(args["requests"]):
        columns = [ColumnSpec(name, type_) for name, type_ in request]
        origin = SchemaOrigin(unit=args["writer"], object_key=f"request-{n}", line=n + 1)
        version = store.record_schema(args["stream"], columns, origin)
        answers.append({"version": version.version, "columns": version.names})
    store.close_store()
    out = Path(args["out"])
    partial = out.with_name(f".{out.name}.{os.getpid()}")
    partial.write_text(json.dumps({"answers": answers, "lost_races": lost}))
    os.replace(partial, out)


if __name__ == "__main__":
    main()
