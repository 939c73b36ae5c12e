"""A large object read in chunks: finishing after a crash near its end, resumed vs restarted.

    .venv/bin/python bench/large_object.py [--mib 1024] [--chunk-mib 128] [--gzip]

One JSON-lines object of `--mib` MiB is ingested by the real runner (SQLite store, local object
store, one SparkSession for everything, its start excluded) with `partition.commit_every_bytes`
= `--chunk-mib`:
  (a) restart: the whole object from the beginning, as a unit read in one piece would be after
      a crash (and as the first attempt is);
  (b) resume: a first attempt dies after committing the chunks that cover ~90 % of the object
      (its store fails the next commit, like a kill at that moment); the time counted is the
      second attempt's, which takes the unit over and resumes at the committed offset.
Both end with the same rows committed once (checked); a warm-up attempt runs first.
Target (issue 20): (b) <= 0.3x (a).
With `--gzip` the object is gzipped: the resume decompresses up to the offset again (gzip
cannot seek), which the numbers show.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from resources.coordination.errors import StoreUnavailableError  # noqa: E402
from resources.coordination.lease import LeaseTiming  # noqa: E402
from resources.ingestion.outcomes import COMMITTED  # noqa: E402
from resources.ingestion.runner import IngestionRunner  # noqa: E402
from resources.ingestion.split_task import StoreAddress  # noqa: E402
from resources.ingestion.task_reader import TaskReader  # noqa: E402
from resources.ingestion.work_units import UnitObject, WorkUnit  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402
from resources.stores import build_store  # noqa: E402
from resources.stores.settings import StoreSettings  # noqa: E402
from resources.streams import load_streams  # noqa: E402

STREAM = "events"
MIB = 1 << 20


def write_object(path: Path, mib: int, gz: bool) -> int:
    """~`mib` MiB of one-line JSON records over three dates; returns the record count."""
    line_template = (
        '{{"event_id": "e{:012d}", "user_id": "u{}", "amount": {}.5, '
        '"event_time": "2026-01-0{}T{:02d}:00:00Z"}}\n'
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    out = gzip.open(path, "wt", compresslevel=1) if gz else path.open("w")
    n = written = 0
    with out:
        while written < mib * MIB:
            block = "".join(
                line_template.format(i, i % 97, i % 1000, 1 + i % 3, i % 24)
                for i in range(n, n + 10_000)
            )
            out.write(block)
            written += len(block)
            n += 10_000
    return n


def attempt(store, reader, key: str, chunk: int, fail_at: int | None):  # type: ignore[no-untyped-def]
    """One run of the runner over the unit; with `fail_at`, the store fails that commit."""
    commits = {"n": 0}
    real = store.commit

    def commit(*args, **kwargs):  # type: ignore[no-untyped-def]
        commits["n"] += 1
        if fail_at is not None and commits["n"] == fail_at:
            raise StoreUnavailableError("bench: the run dies here")
        return real(*args, **kwargs)

    store.commit = commit
    runner = IngestionRunner(
        stream=STREAM,
        table=STREAM,
        store=store,
        owner=f"bench-{time.monotonic_ns()}",
        timing=LeaseTiming(ownership_timeout_s=600, renew_interval_s=60),
        read_batch=reader.read,
        read_large=lambda unit, obj, reached, attempt: reader.read_large(
            unit, obj, reached, chunk, attempt
        ),
        commit_every_bytes=chunk,
    )
    started = time.perf_counter()
    outcomes = list(runner.ingest([key]))
    store.commit = real
    return time.perf_counter() - started, outcomes[0], commits["n"]


def run_case(base: Path, spark, name: str, size: int, chunk: int, fail_at: int | None):  # type: ignore[no-untyped-def]
    work = base / name
    work.mkdir()
    streams = work / "streams.yaml"
    streams.write_text(
        f"""
streams:
  {STREAM}:
    source: file://{base / "src"}
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    table: file://{work / "lake"}
"""
    )
    config = load_streams(streams)[STREAM]
    store = build_store(StoreSettings(sqlite_path=str(work / "c.db")))
    key = next(p.name for p in (base / "src").iterdir())
    unit = WorkUnit(key, (UnitObject(key, size),))
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, [key], progress_states=[unit.progress_state()])
    reader = TaskReader(spark, config, StoreAddress.of(config, None, None))
    first = attempt(store, reader, key, chunk, fail_at)
    if fail_at is None:
        rows = sum(o.row_count for o in store.ledger_objects(STREAM))
        return first[0], first, rows
    store.clock = lambda: 10**10  # the dead run's lease has expired
    second = attempt(store, reader, key, chunk, None)
    rows = sum(o.row_count for o in store.ledger_objects(STREAM))
    return second[0], (first, second), rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mib", type=int, default=1024)
    parser.add_argument("--chunk-mib", type=int, default=128)
    parser.add_argument("--gzip", action="store_true")
    args = parser.parse_args()
    spark = build_spark_session(
        master="local[*]", app_name="bench-large", extra_conf={"spark.driver.memory": "6g"}
    )
    base = Path(tempfile.mkdtemp(prefix="leasehold-large-"))
    try:
        name = "big.jsonl.gz" if args.gzip else "big.jsonl"
        records = write_object(base / "src" / name, args.mib, args.gzip)
        size = (base / "src" / name).stat().st_size
        chunk = args.chunk_mib * MIB
        chunks = -(-args.mib // args.chunk_mib)
        # Dies at the commit after ~90 % of the chunks: the resume has the rest to do.
        survives = max(1, round(chunks * 0.9))
        # Warm-up (JIT, codegen), so neither path pays it: a first attempt that dies at once.
        run_case(base, spark, "warm", size, chunk, 2)
        restart, (_, outcome, commits), rows = run_case(base, spark, "restart", size, chunk, None)
        assert outcome.outcome == COMMITTED and rows == records, (outcome, rows, records)
        resume, ((died, _, _), (_, again, _)), rows2 = run_case(
            base, spark, "resume", size, chunk, survives + 1
        )
        assert again.outcome == COMMITTED and rows2 == records, (again, rows2, records)
    finally:
        spark.stop()
        shutil.rmtree(base, ignore_errors=True)
    ratio = resume / restart
    print(
        f"\n### One {args.mib} MiB object{' (gzip)' if args.gzip else ''}, chunks of "
        f"{args.chunk_mib} MiB ({chunks} chunks, {records:,} records)\n"
    )
    print("| path | seconds |")
    print("| --- | --- |")
    print(f"| restart: the whole object ({commits} commits) | {restart:.1f} |")
    print(f"| first attempt, dies after {survives} of {chunks} chunks | {died:.1f} |")
    print(f"| resume: the takeover, from the committed offset | {resume:.1f} |")
    print(f"\nresume / restart: {ratio:.2f} (target <= 0.3): {'met' if ratio <= 0.3 else 'MISSED'}")
    print(json.dumps({"restart_s": restart, "resume_s": resume, "ratio": ratio}))
    return 0 if ratio <= 0.3 else 1


if __name__ == "__main__":
    sys.exit(main())
