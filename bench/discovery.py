"""Discovery of new objects: S3 event notifications (SQS) against listing, up to 10⁶ objects.

    .venv/bin/python bench/discovery.py [--objects 1000000] [--small 10000] [--new 1000]
        [--per-tick 20000] [--repeats 3] [--wait-s 1] [--latency-ms 15]

S3 and SQS are `bench/fast_aws.py`, a near-free stand-in in a process of its own (moto answers
~100 requests a second), reached by leasehold's own clients (`S3ObjectStore`, `EventQueue`,
boto3) over loopback HTTP: S3 and SQS calls are counted exactly by the server; seconds are the
client's cost (botocore, parsing, leasehold's code, the store) plus the server's small one. The
store is the embedded default (SQLite in a temporary directory), one file per mode; units are the
default `partition` (1,000 objects, 256 MiB); `--per-tick` is `max_objects_per_tick` (listing)
and `max_messages` (notifications, whose backstop pass is not due).

For a bucket of `--small` and one of `--objects` objects (keys growing, `object_key`; their S3
events on the queue in random order, as a standard queue delivers them):
  (a) discover all of them, by listing (`Discovery` ticks until one lists less than a tick's
      worth) and by notifications (`NotificationDiscovery` ticks until one receives less);
  (b) `--repeats` rounds, the two buckets alternately: `--new` objects land whose keys grow
      (after every key) with their events, then one listing tick (after the cursor) and one
      notifications tick; then `--new` objects whose keys do not grow (spread at random among
      the old ones, as late uploads) with their events, then one listing tick (the cursor finds
      none) and one notifications tick. A row is the median round by wall time. Last, the pass
      that finds the spread ones for listing, `Reconciliation(whole_source=True)` (keys not
      ordered), ticks until its pass over the whole bucket ends.
Rows: ticks, wall and CPU seconds (this process: boto3, leasehold, SQLite), S3 and SQS calls,
store calls (every `CoordinationStore` method discovery calls, but `now_ms` and
`source_identifier`), units created, objects found, the server's CPU, and a model of the wall
time against AWS: the server's CPU replaced by `--latency-ms` a call (S3's LISTs one after
the other, SQS's calls `EventQueue.PARALLEL` at a time). `--wait-s` is `EventQueue`'s long
polling (1 s, the production default): each receive that finds the queue empty waits that long
(summed over the receivers), shown apart.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.fast_aws import object_key, object_size, queue_url  # noqa: E402
from resources.ingestion.discovery import Discovery  # noqa: E402
from resources.ingestion.notification_discovery import (  # noqa: E402
    NotificationDiscovery,
    SourceLocation,
)
from resources.ingestion.reconciliation import ReconcileState, Reconciliation  # noqa: E402
from resources.ingestion.source_listing import source_lister  # noqa: E402
from resources.ingestion.work_units import unit_of  # noqa: E402
from resources.notifications.queue import PARALLEL, EventQueue  # noqa: E402
from resources.objects.s3 import S3ObjectStore  # noqa: E402
from resources.stores import build_store  # noqa: E402
from resources.stores.settings import StoreSettings  # noqa: E402
from resources.stream_sections import PartitionSettings  # noqa: E402

STREAM = "events"
PREFIX = "events"
OWNER = "bench"
UNIT = PartitionSettings()
AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "bench",
    "AWS_SECRET_ACCESS_KEY": "bench",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
CALLS = {
    "LIST": "S3 ListObjectsV2",
    "HEAD": "S3 HeadObject",
    "Receive": "SQS ReceiveMessage",
    "DeleteBatch": "SQS DeleteMessageBatch",
}
UNCOUNTED = {"now_ms", "source_identifier"}


class FastAws:
    """`bench/fast_aws.py` in a child process."""

    def __init__(self) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-m", "bench.fast_aws"],
            cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.child.stdout is not None
        self.port = int(self.child.stdout.readline())
        self.url = f"http://127.0.0.1:{self.port}"

    def post(self, path: str, spec: dict[str, Any]) -> Any:
        request = urllib.request.Request(self.url + path, json.dumps(spec).encode(), method="POST")
        with urllib.request.urlopen(request, timeout=600) as reply:
            return json.loads(reply.read())

    def counts(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url + "/_bench/counts", timeout=60) as reply:
            return json.loads(reply.read())

    def stop(self) -> None:
        self.child.terminate()
        self.child.wait(10)


class CountingStore:
    """The store, every call discovery makes into it counted by method (into `calls`) and
    timed (the seconds into `calls["seconds"]`)."""

    def __init__(self, store: Any, calls: Counter[Any]) -> None:
        self._store = store
        self._calls = calls

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr) or name.startswith("_") or name in UNCOUNTED:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self._calls[name] += 1
            started = time.perf_counter()
            try:
                return attr(*args, **kwargs)
            finally:
                self._calls["seconds"] += time.perf_counter() - started

        return counted


@dataclass
class Cost:
    what: str
    old: int
    ticks: int = 0
    wall_s: float = 0.0
    cpu_s: float = 0.0
    waited_s: float = 0.0
    server_cpu_s: float = 0.0
    calls: Counter[str] = field(default_factory=Counter)
    store: Counter[str] = field(default_factory=Counter)
    store_s: float = 0.0
    units: int = 0
    found: int = 0

    def modelled_s(self, latency_s: float) -> float:
        """Against AWS: the stand-in's time (its CPU) replaced by `latency_s` a call — S3's
        LISTs one after the other, SQS's calls `PARALLEL` at a time (`EventQueue`)."""
        sqs = self.calls["SQS ReceiveMessage"] + self.calls["SQS DeleteMessageBatch"]
        s3 = sum(self.calls.values()) - sqs
        return self.wall_s - self.server_cpu_s + (s3 + sqs / PARALLEL) * latency_s


Run = Callable[[], tuple[int, int, int]]
"""One measured piece of work: (ticks, units created, objects found)."""


@dataclass
class Source:
    """One bucket and its queue, discovered by both modes into a store each."""

    aws: FastAws
    old: int
    args: argparse.Namespace
    tmp: Path
    store_calls: Counter[Any] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self.bucket = f"src-{self.old}"
        objects = S3ObjectStore(self.bucket, PREFIX, endpoint_url=self.aws.url)
        self.lister = source_lister(objects)
        self.location = SourceLocation(self.bucket, PREFIX, objects, self.lister)
        self.queue = EventQueue(queue_url(self.aws.port, self.bucket), wait_s=self.args.wait_s)
        self.listing_store = self._store("listing")
        self.notified_store = self._store("notifications")
        self.cursor: str | None = None
        self.pass_state = ReconcileState()
        self.pass_units: list[str] = []
        self.backstop = ReconcileState(last_finished_ms=self.notified_store.now_ms())
        self.landed = 0
        self.late = iter(random.Random(self.old).sample(range(self.old), self.old))

    def _store(self, mode: str) -> Any:
        path = self.tmp / f"{mode}-{self.old}.db"
        return CountingStore(build_store(StoreSettings(sqlite_path=str(path))), self.store_calls)

    def populate(self) -> None:
        spec = {"bucket": self.bucket, "prefix": PREFIX, "queue": self.bucket, "shuffle": 7}
        self.aws.post("/_bench/populate", {**spec, "start": 0, "count": self.old})

    def land(self, late: bool) -> None:
        """`--new` objects with their events: keys after every key, or spread among the old."""
        n = self.args.new
        if late:
            indexes = [next(self.late) for _ in range(n)]
        else:
            indexes = list(range(self.old + self.landed, self.old + self.landed + n))
            self.landed += n
        keys = [object_key(i, late) for i in indexes]
        spec = {"bucket": self.bucket, "prefix": PREFIX, "queue": self.bucket}
        sizes = [object_size(i) for i in indexes]
        self.aws.post("/_bench/land", {**spec, "keys": keys, "sizes": sizes})

    def listing_tick(self) -> tuple[bool, int, int]:
        """One `Discovery` tick after the cursor: (caught up, units, objects)."""
        result = Discovery(
            self.listing_store,
            STREAM,
            self.lister,
            OWNER,
            max_objects_per_tick=self.args.per_tick,
            unit_max_objects=UNIT.max_objects,
            unit_max_bytes=UNIT.max_bytes,
        ).discover(self.cursor)
        self.cursor = result.cursor
        return result.listed < self.args.per_tick, result.created, result.listed

    def notifications_tick(self) -> tuple[bool, int, int]:
        """One `NotificationDiscovery` tick, its backstop pass not due: (drained, units,
        objects)."""
        step = NotificationDiscovery(
            self.notified_store,
            STREAM,
            self.queue,
            self.location,
            OWNER,
            max_messages=self.args.per_tick,
            unit_max_objects=UNIT.max_objects,
            unit_max_bytes=UNIT.max_bytes,
        ).discover(self.backstop)
        self.backstop = step.backstop.state
        assert not step.backstop.listed, "the backstop pass ran"
        drained = step.counts["messages"] < self.args.per_tick
        return drained, step.found.created, step.counts["objects"]

    def pass_tick(self) -> tuple[bool, int, int]:
        """One step of the whole-source pass (`Reconciliation`, keys not ordered)."""
        step = Reconciliation(
            self.listing_store,
            STREAM,
            self.lister,
            interval_s=900,
            max_objects=self.args.per_tick,
            unit_max_objects=UNIT.max_objects,
            unit_max_bytes=UNIT.max_bytes,
            whole_source=True,
        ).step(self.pass_state, self.cursor)
        self.pass_state = step.state
        self.pass_units += step.created
        return step.finished_pass, len(step.created), step.listed

    def pass_found(self) -> int:
        """Objects in the units the pass made (read after it, not counted)."""
        store = self.listing_store._store
        sid = store.source_identifier(STREAM)
        return sum(len(unit_of(store.get(sid, key)).objects) for key in self.pass_units)


def until_done(tick: Callable[[], tuple[bool, int, int]]) -> Run:
    """Ticks until one says it is done: (ticks, units, objects)."""

    def run() -> tuple[int, int, int]:
        ticks = units = objects = 0
        done = False
        while not done:
            done, made, found = tick()
            ticks, units, objects = ticks + 1, units + made, objects + found
        return ticks, units, objects

    return run


def measure(source: Source, what: str, run: Run) -> Cost:
    before, store_before = source.aws.counts(), Counter(source.store_calls)
    wall, cpu = time.perf_counter(), time.process_time()
    ticks, units, found = run()
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    after = source.aws.counts()
    calls = Counter(after["counts"])
    calls.subtract(before["counts"])
    store = Counter(source.store_calls)
    store.subtract(store_before)
    store_s = store.pop("seconds", 0.0)
    return Cost(
        what,
        source.old,
        ticks,
        wall,
        cpu,
        after["waited_s"] - before["waited_s"],
        after["cpu_s"] - before["cpu_s"],
        +calls,
        +store,
        store_s,
        units,
        found,
    )


def one(tick: Callable[[], tuple[bool, int, int]]) -> Run:
    def run() -> tuple[int, int, int]:
        _, units, objects = tick()
        return 1, units, objects

    return run


def median(costs: list[Cost]) -> Cost:
    return sorted(costs, key=lambda c: c.wall_s)[len(costs) // 2]


ROWS = (
    "discover all: listing",
    "discover all: notifications",
    "tick, keys grow: listing",
    "tick, keys grow: notifications",
    "tick, keys spread: listing (cursor)",
    "tick, keys spread: notifications",
    "keys spread: listing's whole pass",
)


def discover_all(source: Source) -> list[Cost]:
    """(a): every object of the bucket, by listing and by notifications."""
    started = time.perf_counter()
    source.populate()
    made = time.perf_counter() - started
    print(f"{source.old:,} objects and events made in {made:.1f} s", flush=True)
    costs = [
        measure(source, ROWS[0], until_done(source.listing_tick)),
        measure(source, ROWS[1], until_done(source.notifications_tick)),
    ]
    for cost in costs:
        assert cost.found == source.old, f"{cost.what} found {cost.found} of {source.old}"
        print(f"  {cost.what}: {cost.wall_s:.1f} s", flush=True)
    return costs


def new_objects_round(source: Source, rows: dict[tuple[str, int], list[Cost]]) -> None:
    """(b), once: objects whose keys grow, then objects spread among the old ones, a tick of
    each mode after each landing."""

    def tick(what: str, run: Run, found: int) -> None:
        cost = measure(source, what, run)
        assert cost.found == found, f"{what} found {cost.found}, not {found}"
        rows.setdefault((what, source.old), []).append(cost)

    new = source.args.new
    source.land(late=False)
    tick(ROWS[2], one(source.listing_tick), new)
    tick(ROWS[3], one(source.notifications_tick), new)
    source.land(late=True)
    tick(ROWS[4], one(source.listing_tick), 0)
    tick(ROWS[5], one(source.notifications_tick), new)


def whole_pass(source: Source, rounds: int) -> Cost:
    """Listing's pass over the whole bucket, which finds the spread objects."""
    cost = measure(source, ROWS[6], until_done(source.pass_tick))
    cost.found = source.pass_found()
    assert cost.found == rounds * source.args.new, f"the pass found {cost.found}"
    print(f"  {cost.what}, {source.old:,} old objects: {cost.wall_s:.1f} s", flush=True)
    return cost


def run_all(aws: FastAws, args: argparse.Namespace, tmp: Path) -> list[Cost]:
    """Both buckets discovered; then the rounds of new objects, the buckets alternately (load
    on the machine falls on both alike; a row is the median round by wall time); then the
    whole passes. Rows in `ROWS` order, the small bucket first."""
    olds = sorted({min(args.small, args.objects), args.objects})
    sources = [Source(aws, old, args, tmp) for old in olds]
    costs = [cost for source in sources for cost in discover_all(source)]
    rows: dict[tuple[str, int], list[Cost]] = {}
    for _ in range(args.repeats):
        for source in sources:
            new_objects_round(source, rows)
    costs += [median(found) for found in rows.values()]
    costs += [whole_pass(source, args.repeats) for source in sources]
    return sorted(costs, key=lambda c: (ROWS.index(c.what), c.old))


def table(costs: list[Cost], latency_s: float) -> list[str]:
    lines = [
        "| measure | old objects | ticks | wall s (long-poll wait) | CPU s | in the store s | LIST "
        "| HEAD | Receive | DeleteBatch | store calls | units made | objects found "
        f"| server CPU s | model: wall - server CPU + calls x {latency_s * 1000:.0f} ms, s |",
        "| --- " * 15 + "|",
    ]
    for c in costs:
        calls = " | ".join(f"{c.calls[CALLS[name]]:,}" for name in CALLS)
        lines.append(
            f"| {c.what} | {c.old:,} | {c.ticks} | {c.wall_s:.2f} ({c.waited_s:.2f}) "
            f"| {c.cpu_s:.2f} | {c.store_s:.2f} | {calls} | {sum(c.store.values()):,} "
            f"| {c.units:,} | {c.found:,} | {c.server_cpu_s:.2f} | {c.modelled_s(latency_s):.1f} |"
        )
    return lines


def summary(costs: list[Cost]) -> list[str]:
    """Per object calls of bulk discovery; the ticks at the small bucket against the big."""
    by = {(c.what, c.old): c for c in costs}
    olds = sorted({c.old for c in costs})
    lines = []
    for c in costs:
        if c.what.startswith("discover all") and c.old == olds[-1]:
            per = {name: c.calls[CALLS[name]] / c.found for name in CALLS}
            store = ", ".join(f"{k} {v:,}" for k, v in sorted(c.store.items()))
            lines.append(
                f"{c.what}: per object {', '.join(f'{n} {v:.4f}' for n, v in per.items())}; "
                f"{c.cpu_s / c.found * 1e6:.0f} µs CPU; store calls: {store}"
            )
    if len(olds) > 1:
        small, big = olds
        for what in sorted({c.what for c in costs if not c.what.startswith("discover")}):
            a, b = by[(what, small)], by[(what, big)]
            lines.append(
                f"{what}: {big:,} old objects against {small:,}: CPU x{b.cpu_s / a.cpu_s:.2f}, "
                f"wall less long-poll wait x{(b.wall_s - b.waited_s) / (a.wall_s - a.waited_s):.2f}"
                f", in the store {b.store_s:.3f} s against {a.store_s:.3f} s, calls "
                f"{sum(b.calls.values()):,} against {sum(a.calls.values()):,}"
            )
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--objects", type=int, default=1_000_000)
    parser.add_argument("--small", type=int, default=10_000)
    parser.add_argument("--new", type=int, default=1000)
    parser.add_argument("--per-tick", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--wait-s", type=int, default=1)
    parser.add_argument("--latency-ms", type=float, default=15.0)
    args = parser.parse_args()
    os.environ.update(AWS_ENV)
    print(f"load average at the start: {os.getloadavg()}", flush=True)
    aws = FastAws()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            costs = run_all(aws, args, Path(tmp))
        server = aws.counts()
    finally:
        aws.stop()
    print(f"load average at the end: {os.getloadavg()}; the server's CPU: {server['cpu_s']:.1f} s")
    print("\n".join(["", *table(costs, args.latency_ms / 1000), "", *summary(costs)]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
