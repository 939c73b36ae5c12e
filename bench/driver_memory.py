"""The driver's peak memory as what one run ingests grows: it holds object lists and metadata,
never rows (issue 34).

    .venv/bin/python bench/driver_memory.py [--cases unit-32 unit-256 large-1024]

Each case runs in a fresh process (peaks are per process): one SparkSession (`local[*]`), a
warm-up ingestion of a few small objects, then the real runner (SQLite store, local object
store) ingests:
  unit-32     one work unit of 32 MiB (64 JSON-lines objects of 0.5 MiB),
  unit-256    one work unit of 256 MiB (512 objects of 0.5 MiB): the default unit's maximum,
  large-1024  one 1 GiB object read in chunks of 128 MiB (`commit_every_bytes`): byte ranges
              parsed by parallel tasks, committed in order.
Measured: the peak resident memory (VmHWM) of the driver's Python process and of its JVM (in
`local[*]` the JVM also hosts the executors' side of the tasks; the Python workers that parse
are processes of their own and are not the driver). Every record is checked committed once.
Target (issue 34): the driver's peak (Python + JVM) of the largest case within 1.2x of the
smallest's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

MIB = 1 << 20
STREAM = "events"
CASES = {"unit-32": (64, MIB // 2), "unit-256": (512, MIB // 2), "large-1024": (1, 1024 * MIB)}
CHUNK = 128 * MIB


def write_objects(directory: Path, count: int, size: int) -> int:
    """`count` JSON-lines objects of ~`size` bytes over three dates; the record count."""
    line = (
        '{{"event_id": "e{:012d}", "user_id": "u{}", "amount": {}.5, '
        '"event_time": "2026-01-0{}T{:02d}:00:00Z"}}\n'
    )
    directory.mkdir(parents=True, exist_ok=True)
    n = 0
    for i in range(count):
        written = 0
        with (directory / f"part-{i:05d}.jsonl").open("w") as out:
            while written < size:
                block = "".join(
                    line.format(j, j % 97, j % 1000, 1 + j % 3, j % 24) for j in range(n, n + 2000)
                )
                out.write(block)
                written += len(block)
                n += 2000
    return n


def peak_kib(pid: int) -> int:
    for text in Path(f"/proc/{pid}/status").read_text().splitlines():
        if text.startswith("VmHWM:"):
            return int(text.split()[1])
    raise RuntimeError(f"no VmHWM for {pid}")


def ingest(spark: Any, base: Path, source: Path, keys: list[str], large: bool) -> int:
    """Every object of `source` as one unit (one object read in chunks when `large`); the
    rows committed."""
    from resources.coordination.lease import LeaseTiming
    from resources.ingestion.outcomes import COMMITTED
    from resources.ingestion.runner import IngestionRunner
    from resources.ingestion.split_task import StoreAddress
    from resources.ingestion.task_reader import TaskReader
    from resources.ingestion.work_units import UnitObject, WorkUnit
    from resources.stores import build_store
    from resources.stores.settings import StoreSettings
    from resources.streams import load_streams

    base.mkdir(parents=True)
    streams = base / "streams.yaml"
    streams.write_text(
        f"""
streams:
  {STREAM}:
    source: file://{source}
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    table: file://{base / "lake"}
"""
    )
    config = load_streams(streams)[STREAM]
    store = build_store(StoreSettings(sqlite_path=str(base / "c.db")))
    unit = WorkUnit(keys[0], tuple(UnitObject(k, (source / k).stat().st_size) for k in keys))
    store.create_partitions(
        store.source_identifier(STREAM), [unit.key], progress_states=[unit.progress_state()]
    )
    reader = TaskReader(spark, config, StoreAddress.of(config, None, None))
    runner = IngestionRunner(
        stream=STREAM,
        table=STREAM,
        store=store,
        owner="bench",
        timing=LeaseTiming(ownership_timeout_s=600, renew_interval_s=60),
        read_batch=reader.read,
        read_large=lambda u, obj, reached, attempt: reader.read_large(
            u, obj, reached, CHUNK, attempt
        ),
        commit_every_bytes=CHUNK if large else None,
    )
    (outcome,) = runner.ingest([unit.key])
    assert outcome.outcome == COMMITTED, outcome.message
    return sum(o.row_count for o in store.ledger_objects(STREAM))  # type: ignore[attr-defined]


def run_case(name: str) -> dict[str, Any]:
    """Child side: one case in this fresh process."""
    from resources.spark.session import build_spark_session

    count, size = CASES[name]
    base = Path(tempfile.mkdtemp(prefix="leasehold-mem-"))
    spark = build_spark_session(master="local[*]", app_name="bench-memory")
    jvm = spark.sparkContext._gateway.proc.pid
    try:
        write_objects(base / "warm-src", 4, 64 << 10)
        ingest(
            spark, base / "warm", base / "warm-src", sorted(os.listdir(base / "warm-src")), False
        )
        records = write_objects(base / "src", count, size)
        keys = sorted(os.listdir(base / "src"))
        before = (peak_kib(os.getpid()), peak_kib(jvm))
        started = time.perf_counter()
        rows = ingest(spark, base / "run", base / "src", keys, name.startswith("large"))
        took = time.perf_counter() - started
        assert rows == records, (rows, records)
        return {
            "case": name,
            "records": records,
            "seconds": took,
            "python_kib": peak_kib(os.getpid()),
            "jvm_kib": peak_kib(jvm),
            "python_before_kib": before[0],
            "jvm_before_kib": before[1],
        }
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_case(args.child)))
        return 0
    results = []
    for name in args.cases:
        out = subprocess.run(
            [sys.executable, __file__, "--child", name], capture_output=True, text=True, check=True
        )
        results.append(json.loads(out.stdout.strip().splitlines()[-1]))
    print("\n| case | records | seconds | driver Python peak, MiB | driver JVM peak, MiB | both |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in results:
        both = (r["python_kib"] + r["jvm_kib"]) / 1024
        print(
            f"| {r['case']} | {r['records']:,} | {r['seconds']:.1f} | {r['python_kib'] / 1024:.0f} "
            f"| {r['jvm_kib'] / 1024:.0f} | {both:.0f} |"
        )
    peaks = [r["python_kib"] + r["jvm_kib"] for r in results]
    ratio = max(peaks) / min(peaks)
    print(
        f"\nlargest / smallest driver peak: {ratio:.2f}x (target <= 1.2x): "
        f"{'met' if ratio <= 1.2 else 'MISSED'}"
    )
    return 0 if ratio <= 1.2 else 1


if __name__ == "__main__":
    sys.exit(main())
