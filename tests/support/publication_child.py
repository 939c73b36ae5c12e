"""The publication race's own processes (`tests/chaos/test_publication_race.py`); committers and
the merger are `tests.support.merge_child`'s.

`python -m tests.support.publication_child '<json>'` runs one role in its own OS process:
- `publish_loop`: a publisher, as the published-table asset's runs would be back to back:
  `Publisher.publish(Publisher.due())` until `stop` exists. Every outcome goes to `out`.
- `publish`: one `Publisher.publish(Publisher.due())`, SIGKILLed at the `nth` time it reaches
  `step` ("written", "recorded" or "cataloged"), after writing `marker` ({step, dt}).
- `read_loop`: an engine reading the table again and again until `stop` exists: per table
  partition, one catalog lookup, the symlink manifest its location names listed and read as
  `reader.partition_files` does, and every file read. Each sample goes to `out`: the catalog's
  seq and location, a digest of the file list and of the sorted record ids, the row count, any
  file or record id seen twice, and any error. An engine sees exactly this, so the verdict is
  independent of what the ledger claims.

- `publish_at_once`: one `Publisher.publish` (of `dts`, or of `Publisher.due()` when it is
  null) into an Iceberg table, started when `go` exists, whose first switch plan waits (at most
  `meet_s`) until every file of `peers` exists after writing its own `planned`: publishers
  meeting there have all planned on the same table head, so all but the first to commit must
  re-plan. Writes the outcomes and how many plans it made to `out`.

`catalog` in the payload says which catalog every role opens: {"kind": "local", "path"},
{"kind": "glue", "database", "endpoint_url"} or {"kind": "iceberg", "spec"} (a `TargetSpec`
as JSON: the `publish` roles publish into its Iceberg table).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sys
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from resources.catalog.base import Catalog, CatalogPartition, Column, TableDefinition
from resources.catalog.glue import GlueCatalog
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.catalog.target import PublicationTarget
from resources.publication.outcome import PublicationOutcome
from resources.publication.publisher import Publisher
from resources.publication.reader import (
    PartitionNotPublishedError,
    TableNotPublishedError,
    partition_files,
)
from tests.support.merge_child import TABLE, Lake, append, write_atomically
from tests.support.target_lake import TargetSpec

REGION = "us-east-1"


def open_catalog(spec: dict[str, Any]) -> Catalog:
    if spec["kind"] == "local":
        return LocalCatalog(Path(spec["path"]))
    return GlueCatalog(spec["database"], region=REGION, endpoint_url=spec["endpoint_url"])


def digest(items: Iterable[str]) -> str:
    """One short fingerprint of a list of strings, in the given order."""
    return hashlib.sha256("\n".join(items).encode()).hexdigest()[:16]


def outcome_record(o: PublicationOutcome) -> dict[str, Any]:
    p = o.publication
    return {
        "at_ms": int(time.time() * 1000), "dt": o.dt, "outcome": o.outcome,
        "message": o.message, "switched_now": o.switched_now,
        "seq": p.seq if p else None, "switched": p.switched if p else None,
        "upper": p.upper if p else None,
    }  # fmt: skip


# -- the engine's view -------------------------------------------------------------------------


class OneLookup(Catalog):
    """A catalog that remembers the partition its one lookup returned: `partition_files`
    resolves through it exactly as through the real one, and the sample knows which seq and
    location the files it read came from (a second lookup could see a newer one)."""

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog
        self.seen: CatalogPartition | None = None

    def ensure_table(self, table: TableDefinition) -> None:
        raise AssertionError("a reader never writes the catalog")

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        raise AssertionError("a reader never writes the catalog")

    def table(self, name: str) -> TableDefinition | None:
        return self.catalog.table(name)

    def tables(self) -> list[str]:
        return self.catalog.tables()

    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        raise AssertionError("a reader never writes the catalog")

    def partition(self, table: str, dt: str) -> CatalogPartition | None:
        self.seen = self.catalog.partition(table, dt)
        return self.seen

    def partitions(self, table: str) -> list[CatalogPartition]:
        return self.catalog.partitions(table)


def sample(catalog: Catalog, dt: str) -> dict[str, Any]:
    """What an engine reading partition `dt` now is served."""
    record: dict[str, Any] = {"dt": dt, "at_ms": int(time.time() * 1000)}
    once = OneLookup(catalog)
    try:
        urls = partition_files(HiveManifestsTarget(once), TABLE, dt)
    except (TableNotPublishedError, PartitionNotPublishedError):
        return {**record, "kind": "unpublished"}
    except Exception as exc:  # noqa: BLE001 — every failure is the verdict's evidence
        return {**record, "kind": "error", "error": f"{type(exc).__name__}: {exc}"}
    assert once.seen is not None
    record.update(seq=once.seen.seq, location=once.seen.location)
    ids: list[str] = []
    for url in urls:
        try:
            table = pq.read_table(url.removeprefix("file://"), columns=["event_id"])
        except Exception as exc:  # noqa: BLE001 — a missing or unreadable file is the finding
            return {**record, "kind": "error", "error": f"{url}: {type(exc).__name__}: {exc}"}
        ids += table.column(0).to_pylist()
    twice = lambda xs: sorted(x for x, n in Counter(xs).items() if n > 1)[:5]  # noqa: E731
    return {
        **record,
        "kind": "sample",
        "files": len(urls),
        "files_digest": digest(urls),
        "files_twice": twice(urls),
        "rows": len(ids),
        "ids_digest": digest(sorted(ids)),
        "ids_twice": twice(ids),
    }


# -- roles ---------------------------------------------------------------------------------------


def publisher(lake: Lake, args: dict[str, Any], **kwargs: Any) -> Publisher:
    spec = args["catalog"]
    target: PublicationTarget = (
        TargetSpec.from_json(spec["spec"]).open()
        if spec["kind"] == "iceberg"
        else HiveManifestsTarget(open_catalog(spec))
    )
    return Publisher(lake.config(), lake.store(), lake.objects(), target, **kwargs)


def publish_loop_role(lake: Lake, args: dict[str, Any]) -> None:
    pub = publisher(lake, args)
    out, stop = Path(args["out"]), Path(args["stop"])
    Path(args["ready"]).write_text("ready")
    while not stop.exists():
        dts = pub.due()
        if not dts:
            time.sleep(0.05)
            continue
        for outcome in pub.publish(dts):
            append(out, outcome_record(outcome))
    pub.store.close_store()


def publish_role(lake: Lake, args: dict[str, Any]) -> None:
    marker = Path(args["marker"])
    reached: Counter[str] = Counter()

    def stop_here(step: str, dt: str) -> None:
        reached[step] += 1
        if step == args["step"] and reached[step] == args["nth"]:
            write_atomically(marker, {"step": step, "dt": dt})
            os.kill(os.getpid(), signal.SIGKILL)

    pub = publisher(lake, args, on_step=stop_here)
    outcomes = [outcome_record(o) for o in pub.publish(pub.due())]
    write_atomically(Path(args["out"]), outcomes)
    pub.store.close_store()


def read_loop_role(lake: Lake, args: dict[str, Any]) -> None:
    catalog = open_catalog(args["catalog"])
    out, stop = Path(args["out"]), Path(args["stop"])
    Path(args["ready"]).write_text("ready")
    while not stop.exists():
        for dt in args["dts"]:
            append(out, {"reader": args["name"], **sample(catalog, dt)})
        time.sleep(0.02)  # an engine's queries are not a busy loop: leave the writers CPU


def publish_at_once_role(lake: Lake, args: dict[str, Any]) -> None:
    from resources.catalog.iceberg import target as iceberg_target

    planned, peers = Path(args["planned"]), [Path(p) for p in args["peers"]]
    plans: list[bool] = []  # per plan: whether the peers were met before it went on
    plan_switch = iceberg_target.plan_switch

    def meeting_plan(*a: Any, **kw: Any) -> Any:
        plan = plan_switch(*a, **kw)
        met = True
        if not plans:
            planned.write_text("planned")
            deadline = time.monotonic() + args["meet_s"]
            while not all(p.exists() for p in peers) and (met := time.monotonic() < deadline):
                time.sleep(0.005)
        plans.append(met)
        return plan

    iceberg_target.plan_switch = meeting_plan  # type: ignore[assignment]
    pub = publisher(lake, args)
    go = Path(args["go"])
    while not go.exists():
        time.sleep(0.005)
    outcomes = [outcome_record(o) for o in pub.publish(args["dts"] or pub.due())]
    write_atomically(Path(args["out"]), {"outcomes": outcomes, "plans": plans})
    pub.store.close_store()


ROLES = {
    "publish_loop": publish_loop_role,
    "publish": publish_role,
    "read_loop": read_loop_role,
    "publish_at_once": publish_at_once_role,
}


def main() -> None:
    args = json.loads(sys.argv[1])
    ROLES[args["role"]](Lake(**args["lake"]), args)


if __name__ == "__main__":
    main()
