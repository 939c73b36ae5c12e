"""What a rollup recomputed per publication (`dedupe: latest`, `on_change: replace`) costs,
against a batch of the new rows only (`first`, `none`), as the date grows 10x.

    .venv/bin/python bench/served_rollup.py [--rows 1000000] [--repeats 3]

A date served as files of 262,144 rows (the size ingestion's Spark tasks write them at this
scale), an event id, a user out of 1,000 and an amount; `--rows` rows, then 10x as many. Per
size, in the same run:
  (a) recomputed: what `RollupRunner` does per publication of such a stream — every served
      file's rollup columns read and aggregated (pyarrow: `ArrowPartials`, the engine below
      256 MiB of input; Spark above, not measured here), and the state set
      (`write_rollup_values`, SQLite: the ~1,000 keys);
  (b) a batch: the same for one file of new rows only (`write_rollup_batch`), what a rollup
      under `first` does for a publication of 262,144 new rows.
Best of `--repeats`; the states of both are checked against each other's rows. Reported: ms,
and ns per served row of (a).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from bench.rollup import COLUMNS, DT, SPEC  # noqa: E402
from resources.aggregation.partials import ArrowPartials  # noqa: E402
from resources.coordination.items import ItemType  # noqa: E402
from resources.stores import build_store  # noqa: E402
from resources.stores.settings import StoreSettings  # noqa: E402

FILE_ROWS = 1 << 18


def served_files(root: Path, rows: int, rng: np.random.Generator) -> list[str]:
    paths = []
    for n, start in enumerate(range(0, rows, FILE_ROWS)):
        size = min(FILE_ROWS, rows - start)
        users = rng.integers(0, 1000, size)
        table = pa.table(
            {
                "event_id": pa.array([f"e{start + i}" for i in range(size)]),
                "user_id": pa.array(np.char.add("u", users.astype(str))),
                "amount": pa.array(rng.integers(0, 10_000, size)),
            }
        )
        path = root / f"part-{n:05d}.parquet"
        pq.write_table(table, path)
        paths.append(str(path))
    return paths


def timed(store, job_token, files: list[str], txid: int, recompute: bool) -> tuple[float, dict]:
    started = time.perf_counter()
    values = ArrowPartials(COLUMNS).compute(SPEC, {txid: files})[txid]
    if recompute:
        store.write_rollup_values(job_token, "bench|per_user", DT, txid, values)
    else:
        store.write_rollup_batch(job_token, "bench|b", DT, SPEC.mode, SPEC.aggregates, txid, values)
    return time.perf_counter() - started, values


def measure(root: Path, rows: int, repeats: int) -> tuple[float, float]:
    rng = np.random.default_rng(45)
    files = served_files(root, rows, rng)
    batch = files[-1:]
    store = build_store(StoreSettings(backend="sqlite", sqlite_path=str(root / "store.db")))
    sid = store.source_identifier("bench|per_user", ItemType.ROLLUP_JOB)
    store.create_partitions(sid, [DT])
    token = store.acquire(sid, DT, "bench", 600).token
    best_a = best_b = math.inf
    for txid in range(1, repeats + 1):
        a, values = timed(store, token, files, txid, recompute=True)
        b, _ = timed(store, token, batch, txid, recompute=False)
        best_a, best_b = min(best_a, a), min(best_b, b)
        state = {k: s.value for k, s in store.rollup_states("bench|per_user", DT).items()}
        assert state == values, "the recomputed state differs from its rows' aggregate"
    store.close_store()
    return best_a, best_b


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    print("| served rows | (a) recomputed | ns per served row | (b) a batch of 262,144 new rows |")
    print("| --- | --- | --- | --- |")
    results = []
    for rows in (args.rows, 10 * args.rows):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = measure(Path(tmp), rows, args.repeats)
        results.append((a, b))
        print(f"| {rows:,} | {a * 1000:,.1f} ms | {a / rows * 1e9:.0f} | {b * 1000:,.1f} ms |")
    (a1, b1), (a10, b10) = results
    print(f"| 10x the date | {a10 / a1:.2f}x | | {b10 / b1:.2f}x |")


if __name__ == "__main__":
    main()
