"""A rollup's incremental update against a full recomputation, as the table grows 10x.

    .venv/bin/python bench/rollup.py [--objects 200] [--new 20] [--rows 200] [--backend sqlite]

One table partition of the `events` stream's shape (event id, a user out of 1,000, an amount),
committed through the real fenced commit: `--objects` small objects of `--rows` rows, rolled up
(`per_user`: count, sum and max of amount per user, transactional) until current; then
`--new` objects more. Two ways to bring the rollup up to date, measured at the table's size and
again at 10x its size, in the same run:
  (a) incremental: `RollupRunner.run` — reads only the new objects' rows (one batch), writes the
      keys they touch (the real store: SQLite's file, or DynamoDB on a local moto server);
  (b) full: recompute the partition from scratch (every object's rows, aggregated by pyarrow):
      what a rollup without txid'd state would do on every update.
Each is run three times (a fresh set of new objects each time), best counts. Targets (issue 22):
(a) at 10x the table within 1.5x of (a) at 1x (O(new)); (b) grows with the table (O(all)) —
the point of keeping state. Rows of the state are checked against (b) every time.
"""

from __future__ import annotations

import argparse
import math
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from resources.aggregation.partials import ArrowPartials, read_files  # noqa: E402
from resources.aggregation.runner import ROLLED_UP, RollupRunner  # noqa: E402
from resources.coordination.lease import LeaseTiming  # noqa: E402
from resources.ledger.model import SmallObject  # noqa: E402
from resources.objects.local import LocalObjectStore  # noqa: E402
from resources.rollup.cursor import rollup_id  # noqa: E402
from resources.rollup.spec import parse_rollups  # noqa: E402
from resources.schema.columns import ColumnSpec  # noqa: E402
from resources.stores import build_store  # noqa: E402
from resources.stores.base import CoordinationStore  # noqa: E402
from resources.stores.settings import StoreSettings  # noqa: E402

TABLE, DT = "events", "2026-01-01"
COLUMNS = [
    ColumnSpec("event_id", "string"),
    ColumnSpec("user_id", "string"),
    ColumnSpec("amount", "long"),
]
SPEC = parse_rollups(
    {
        "per_user": {
            "group_by": ["user_id"],
            "aggregates": {"events": "count", "amount": "sum(amount)", "largest": "max(amount)"},
        }
    },
    {c.name: c.type for c in COLUMNS},
)[0]


class Table:
    def __init__(self, store: CoordinationStore, root: Path, rows: int) -> None:
        self.store, self.root, self.rows = store, root, rows
        self.rng = random.Random(22)
        self.count = 0
        self.files: list[str] = []

    def add(self, n: int) -> None:
        """`n` small objects, each committed by its own source partition's fenced commit."""
        sid = self.store.source_identifier("bench")
        keys = [f"object-{self.count + i:07d}" for i in range(n)]
        self.store.create_partitions(sid, keys)
        for key in keys:
            path = self.root / f"dt={DT}" / f"{key}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            users = [f"u{self.rng.randrange(1000)}" for _ in range(self.rows)]
            pq.write_table(
                pa.table(
                    {
                        "event_id": [f"{key}/{i}" for i in range(self.rows)],
                        "user_id": users,
                        "amount": [self.rng.randrange(10_000) for _ in range(self.rows)],
                    }
                ),
                path,
            )
            self.files.append(str(path))
            obj = SmallObject(TABLE, DT, f"file://{path}", path.stat().st_size, self.rows)
            lease = self.store.acquire(sid, key, "bench", 60)
            self.store.commit(lease.token, [obj])
        self.count += n


def incremental(runner: RollupRunner) -> float:
    started = time.perf_counter()
    [outcome] = runner.run([DT])
    elapsed = time.perf_counter() - started
    assert outcome.outcome == ROLLED_UP, outcome.describe()
    return elapsed


def full(table: Table) -> tuple[float, dict]:
    started = time.perf_counter()
    result = ArrowPartials.of_table(SPEC, read_files(table.files, COLUMNS[1:]))
    return time.perf_counter() - started, result


def measure(table: Table, runner: RollupRunner, new: int) -> tuple[float, float]:
    best_inc = best_full = math.inf
    for _ in range(3):
        table.add(new)
        best_inc = min(best_inc, incremental(runner))
        elapsed, reference = full(table)
        best_full = min(best_full, elapsed)
        state = {
            k: s.value for k, s in table.store.rollup_states(rollup_id(TABLE, SPEC), DT).items()
        }
        assert state == reference, "the rollup's state differs from the recomputation"
    return best_inc, best_full


def store_settings(backend: str, work: Path) -> tuple[StoreSettings, object]:
    if backend == "sqlite":
        return StoreSettings(backend="sqlite", sqlite_path=str(work / "store.db")), None
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "bench")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "bench")
    settings = StoreSettings(
        backend="dynamodb",
        table_name="leasehold-bench",
        region="us-east-1",
        endpoint_url=f"http://{host}:{port}",
    )
    return settings, server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--new", type=int, default=20)
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--backend", choices=["sqlite", "dynamodb"], default="sqlite")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-rollup-") as tmp:
        work = Path(tmp)
        settings, server = store_settings(args.backend, work)
        store = build_store(settings)
        table = Table(store, work / "table", args.rows)
        runner = RollupRunner(
            store,
            LocalObjectStore(work / "table"),
            TABLE,
            SPEC,
            lambda input_bytes: ArrowPartials(COLUMNS),
            owner="bench",
            timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
            work_dir=work / "scratch",
            max_objects_per_batch=args.new,
        )
        results = {}
        for size in (args.objects, args.objects * 10):
            table.add(size - table.count)
            runner.max_batches = 10**6
            runner.run([DT])  # current before the measured updates
            results[size] = measure(table, runner, args.new)
            inc, rec = results[size]
            print(
                f"{size:>6} objects ({size * args.rows:,} rows) + {args.new} new: "
                f"incremental {inc * 1000:8.1f} ms, full recomputation {rec * 1000:8.1f} ms"
            )
        (inc1, full1), (inc10, full10) = results.values()
        print(
            f"as the table grew 10x ({args.backend}): incremental {inc10 / inc1:.2f}x "
            f"(target <= 1.5x), full recomputation {full10 / full1:.2f}x; at 10x the "
            f"incremental update is {full10 / inc10:.1f}x cheaper than recomputing"
        )
        store.close_store()
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
