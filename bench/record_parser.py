"""`record_parser` against a bare Spark JSON read, on the sample data `bench/ingest.py` writes.

Single-thread CPU per MB of source text: `parse_json_lines` over each object's bytes (clean
data: the pyarrow path; with a malformed line every `--malformed-every` records: the halving
and the exact path too), and `spark.read.schema(...).json(dir).count()` on `local[1]` (the
process's and the JVM's CPU). Usage: python bench/record_parser.py [--objects N] [--records N]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

from resources.ingestion.record_parser import parse_json_lines  # noqa: E402
from resources.ingestion.sample_data import write_sample_sources  # noqa: E402
from resources.schema.columns import ColumnSpec  # noqa: E402
from resources.streams import StreamConfig  # noqa: E402

SCHEMA = "event_id string, user_id string, amount double, event_time timestamp"
CONFIG = StreamConfig(
    name="events",
    source="file:///src",
    format="jsonl",
    columns=tuple(ColumnSpec(*c.split()) for c in SCHEMA.split(", ")),
    event_time="event_time",
    table="file:///lake/events",
    quarantine="file:///lake/events_quarantine",
    record_id="event_id",
)
REPEAT = 3


def parser_cpu(paths: list[Path]) -> tuple[float, int, int]:
    """(best CPU seconds of `REPEAT` passes, rows, bad records) of parsing every object."""
    blobs = [p.read_bytes() for p in paths]
    best = float("inf")
    rows = bad = 0
    for _ in range(REPEAT):
        started = time.process_time()
        rows = bad = 0
        for data in blobs:
            parsed = parse_json_lines(data, CONFIG)
            rows += parsed.rows.num_rows
            bad += parsed.bad.num_rows
        best = min(best, time.process_time() - started)
    return best, rows, bad


def spark_cpu(source: Path) -> tuple[float, float]:
    """Best CPU seconds of a bare typed Spark JSON read on `local[1]`: (counted, every column
    aggregated — a count may leave values unconverted)."""
    from pyspark.sql import functions as F

    from resources.spark.session import build_spark_session

    spark = build_spark_session(master="local[1]", app_name="bench-record-parser")
    jvm = Path(f"/proc/{spark.sparkContext._gateway.proc.pid}/stat")
    tick = os.sysconf("SC_CLK_TCK")

    def used() -> float:
        fields = jvm.read_text().rsplit(")", 1)[1].split()
        own = os.times()
        return (int(fields[11]) + int(fields[12])) / tick + own.user + own.system

    read = spark.read.schema(SCHEMA).option("recursiveFileLookup", "true")
    every = [F.sum(F.length("event_id")), F.sum(F.length("user_id")), F.sum("amount"),
             F.max("event_time")]  # fmt: skip

    def count() -> Any:
        return read.json(str(source)).count()

    def aggregate() -> Any:
        return read.json(str(source)).agg(*every).collect()

    jobs = [count, aggregate]
    best = []
    for job in jobs:
        job()  # warm up
        fastest = float("inf")
        for _ in range(REPEAT):
            started = used()
            job()
            fastest = min(fastest, used() - started)
        best.append(fastest)
    spark.stop()
    return best[0], best[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--objects", type=int, default=20)
    parser.add_argument("--records", type=int, default=20_000)
    parser.add_argument("--malformed-every", type=int, default=1000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        clean, dirty = Path(tmp) / "clean", Path(tmp) / "dirty"
        paths = write_sample_sources(clean, objects=args.objects, records_per_object=args.records)
        dirty_paths = write_sample_sources(
            dirty,
            objects=args.objects,
            records_per_object=args.records,
            malformed_every=args.malformed_every,
        )
        mb = sum(p.stat().st_size for p in paths) / 1e6
        cpu, rows, _ = parser_cpu(paths)
        print(f"source: {mb:.1f} MB, {rows:,} records")
        print(f"record_parser, clean:     {cpu:6.2f} s CPU  {mb / cpu:7.1f} MB/s")
        cpu_dirty, _, bad = parser_cpu(dirty_paths)
        print(
            f"record_parser, 1 bad/{args.malformed_every}: {cpu_dirty:6.2f} s CPU"
            f"  {mb / cpu_dirty:7.1f} MB/s ({bad:,} quarantined)"
        )
        spark, spark_all = spark_cpu(clean)
        print(f"bare Spark read, count:   {spark:6.2f} s CPU  {mb / spark:7.1f} MB/s")
        print(f"bare Spark read, agg all: {spark_all:6.2f} s CPU  {mb / spark_all:7.1f} MB/s")
        print(f"parser / Spark count: clean {cpu / spark:.2f}x, dirty {cpu_dirty / spark:.2f}x")
        print(
            f"parser / Spark agg:   clean {cpu / spark_all:.2f}x,"
            f" dirty {cpu_dirty / spark_all:.2f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
