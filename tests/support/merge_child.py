"""The merge protocol's processes for the compaction concurrency tests, and what they share with
the test process: the lake's description, its small objects and its merge runners.

`python -m tests.support.merge_child '<json>'` runs one role in its own OS process:
- `commit`: an ingestion committer. Commits `commits` source objects, each one to three small
  Parquet objects (a few rows each) over the given dates, through the real fenced commit that
  schedules the merge job, and closes a date after the commit `close_after` names. Every
  object's event ids and its ledger id go to `out` (JSON lines): the verdict's account,
  independent of the store.
- `merge_loop`: a merger, as the merge sensor and a run would be in one: `MergeSchedule` for
  the due dates no live merge holds, `MergeRunner.merge` on them, until `stop` exists. Every
  outcome goes to `out`.
- `merge`: one `MergeRunner.merge(dts)`, stopped at the `nth` time it reaches `step`
  ("written", "published", or "committing": inside the commit call, after the lease's own
  checks, so only the store's fencing stands between a zombie and the ledger). There it writes
  `marker` ({step, dt, epoch}) and then either SIGKILLs itself (`do: kill`) or blocks until
  `<marker>.release` exists (`do: pause`; the test SIGSTOPs it meanwhile). The outcomes go to
  `out` (a JSON list).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.compaction.merge_runner import MergeRunner
from resources.compaction.merge_schedule import MergeSchedule
from resources.coordination.items import ItemType
from resources.coordination.lease import LeaseTiming
from resources.ledger.merge import MergeCommit, MergeCommitResult
from resources.ledger.model import RegisteredObject, SmallObject
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.stores import build_store
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from resources.streams import StreamConfig, load_streams
from tests.support.arrow_merge import ArrowMergeWriter

ROOT = Path(__file__).resolve().parents[2]
TABLE = "events"
SOURCE = "events"
DAY_US = 86_400 * 1_000_000


@dataclass(frozen=True)
class Lake:
    """One test lake: its store, its table's directory, the merge limits and the lease timing.
    Round-trips through JSON, so a child process gets exactly the parent's."""

    settings: dict[str, Any]
    root: str
    max_objects: int
    max_bytes: int
    interval: str = "PT0.5S"
    timeout_s: float = 2.0
    renew_s: float = 0.5
    merge_s: float = 0.0
    """How long a merge's write lasts at least (`ArrowMergeWriter`'s `min_duration_s`)."""

    @property
    def table_dir(self) -> Path:
        return Path(self.root) / "lake"

    def store(self) -> CoordinationStore:
        return build_store(StoreSettings(**self.settings))

    def config(self) -> StreamConfig:
        """The repository's `events` stream, on this lake, with these limits. A commit landing
        in a partition another committer closed is delayed; its merge is due after the same
        short interval, not the stream's minutes."""
        base = load_streams(ROOT / "streams.yaml")[TABLE]
        merge = replace(
            base.merge,
            max_objects=self.max_objects,
            max_bytes=self.max_bytes,
            interval=self.interval,
            delayed_interval=self.interval,
        )
        return replace(base, table=f"file://{self.table_dir}", merge=merge)

    def objects(self) -> ObjectStore:
        return object_store_for(f"file://{self.table_dir}")

    def timing(self) -> LeaseTiming:
        return LeaseTiming(ownership_timeout_s=self.timeout_s, renew_interval_s=self.renew_s)

    def runner(
        self,
        store: CoordinationStore,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> MergeRunner:
        config = self.config()
        return MergeRunner(
            config=config,
            table=TABLE,
            store=store,
            objects=self.objects(),
            owner=owner,
            timing=self.timing(),
            write=ArrowMergeWriter(config, min_duration_s=self.merge_s).write,
            work_dir=Path(self.root) / "work" / owner,
            on_step=on_step,
        )


def epoch_us(dt: str) -> int:
    """Midnight UTC of `dt` in microseconds (the `events` stream's time zone is UTC)."""
    return int(datetime.fromisoformat(dt).replace(tzinfo=UTC).timestamp()) * 1_000_000


def event_ids(key: str, dt: str, rows: int) -> list[str]:
    return [f"{key}/{dt}/{n}" for n in range(rows)]


def write_small(lake: Lake, key: str, dt: str, rows: int, rng: random.Random) -> SmallObject:
    """One small Parquet object of `rows` events on `dt`, as ingestion writes them; event ids
    `<key>/<dt>/<n>` are unique across the test."""
    start = epoch_us(dt)
    table = pa.table(
        {
            "event_id": event_ids(key, dt, rows),
            "user_id": [f"user-{rng.randrange(50)}" for _ in range(rows)],
            "amount": [round(rng.uniform(0, 100), 2) for _ in range(rows)],
            "event_time": pa.array(
                [start + rng.randrange(DAY_US) for _ in range(rows)], pa.timestamp("us", tz="UTC")
            ),
        }
    )
    path = lake.table_dir / f"dt={dt}" / f"{key.replace('/', '-')}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return SmallObject(TABLE, dt, f"file://{path}", path.stat().st_size, rows)


def commit_source(
    store: CoordinationStore,
    key: str,
    objects: list[SmallObject],
    merge_after_s: float,
    timeout_s: float = 60.0,
) -> list[RegisteredObject]:
    """One source object's commit, fenced by its own lease, as ingestion makes it."""
    sid = store.source_identifier(SOURCE)
    store.create_partitions(sid, [key])
    item = store.acquire(sid, key, f"committer-{os.getpid()}", timeout_s)
    result = store.commit(item.token, objects, merge_after_s={TABLE: merge_after_s})
    return list(result.objects)


def catch_up(store: CoordinationStore, stream: str = SOURCE) -> None:
    """One discovery tick over an empty listing: discovery has caught up as of now, so the
    closing rule decides by the clock and the pending source partitions alone (the tests
    commit their objects without discovery)."""
    from resources.ingestion.discovery import Discovery

    Discovery(store, stream, lambda after, limit: ([], after), owner="catch-up").discover(None)


def append(out: Path, record: dict[str, Any]) -> None:
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")


def write_atomically(path: Path, data: Any) -> None:
    """So the test never reads half a file it is polling for."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data), encoding="utf-8")
    os.replace(tmp, path)


def read_lines(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]


# -- roles ---------------------------------------------------------------------------------------


def commit_role(lake: Lake, args: dict[str, Any]) -> None:
    store = lake.store()
    rng = random.Random(args["seed"])
    out = Path(args["out"])
    close_after = {int(i): dt for i, dt in args.get("close_after", {}).items()}
    dts: list[str] = args["dts"]
    for i in range(args["commits"]):
        key = f"{args['name']}/{i:04d}"
        feeds = sorted(rng.sample(dts, rng.choice([1, 1, 2, 3])))
        written = {}
        for dt in feeds:
            rows = rng.randint(*args["rows"])
            written[dt] = (write_small(lake, key, dt, rows, rng), event_ids(key, dt, rows))
        smalls = [small for small, _ in written.values()]
        for o in commit_source(store, key, smalls, args["merge_after_s"]):
            small, ids = written[o.dt]
            assert o.url == small.url
            append(
                out,
                {
                    "kind": "object", "commit": i, "dt": o.dt, "id": o.object_id, "url": o.url,
                    "rows": small.row_count, "delayed": o.delayed, "event_ids": ids,
                },
            )  # fmt: skip
        if i in close_after:
            closed = store.close_partition(TABLE, close_after[i])
            append(
                out,
                {
                    "kind": "closed", "commit": i, "dt": close_after[i],
                    "last_live": None if closed is None else closed.last_live_object_id,
                },
            )  # fmt: skip
        time.sleep(rng.uniform(0, 0.02))  # let the others interleave
    append(out, {"kind": "done"})
    store.close_store()


def merge_loop_role(lake: Lake, args: dict[str, Any]) -> None:
    store = lake.store()
    runner = lake.runner(store, args["name"])
    schedule = MergeSchedule(store, lake.config(), TABLE)
    out, stop = Path(args["out"]), Path(args["stop"])
    Path(args["ready"]).write_text("ready")
    while not stop.exists():
        partitions, _ = schedule.refresh()
        running = schedule.running()
        dts = [p.dt for p in schedule.due(partitions) if p.dt not in running]
        if not dts:
            time.sleep(0.05)
            continue
        for outcome in runner.merge(dts):
            append(out, asdict(outcome))
    store.close_store()


def merge_role(lake: Lake, args: dict[str, Any]) -> None:
    store = lake.store()
    job_sid = store.source_identifier(TABLE, ItemType.MERGE_JOB)
    marker = Path(args["marker"])
    release = marker.with_name(marker.name + ".release")
    reached: Counter[str] = Counter()

    def stop_here(step: str, dt: str) -> None:
        reached[step] += 1
        if step != args["step"] or reached[step] != args["nth"]:
            return
        item = store.get(job_sid, dt)
        write_atomically(marker, {"step": step, "dt": dt, "epoch": item.epoch if item else None})
        if args["do"] == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        deadline = time.monotonic() + args.get("pause_s", 60.0)
        while not release.exists() and time.monotonic() < deadline:
            time.sleep(0.02)

    if args["step"] == "committing":
        commit_merge = store.commit_merge

        def committing(token: Any, merge: MergeCommit) -> MergeCommitResult:
            stop_here("committing", merge.dt)
            return commit_merge(token, merge)

        store.commit_merge = committing  # type: ignore[method-assign]
    runner = lake.runner(store, args["name"], on_step=stop_here)
    outcomes = [asdict(o) for o in runner.merge(args["dts"])]
    write_atomically(Path(args["out"]), outcomes)
    store.close_store()


ROLES = {"commit": commit_role, "merge_loop": merge_loop_role, "merge": merge_role}


def main() -> None:
    args = json.loads(sys.argv[1])
    ROLES[args["role"]](Lake(**args["lake"]), args)


if __name__ == "__main__":
    main()
