"""Merging a table partition's small objects on Spark, and reading it before and after.

    .venv/bin/python bench/compaction.py [--objects 2000] [--rows 1000000] [--big-rows 25000000]

A table partition of `--objects` small Parquet objects, written as ingestion writes them
(`write_table_object`, the `events` stream of streams.yaml: a unique event id, a user id out of
997, an amount, an event time), `--rows` rows in all, event times random over one day (so no
object is sorted and none holds one hour alone). One process, one SparkSession (`local[*]`,
6 GiB driver as in bench/ingest.py; its start-up is excluded from every path alike), the
explicit-paths listing threshold raised for every path alike (ARCHITECTURE §8); a warm-up job
of every path first. Paths run alternately, three times each, best of each counts:
  (a) `MergeWriter.write` of all objects (read exactly those paths, sort by event time, one
      object at the target) against a bare PySpark job that reads the same paths and writes
      one file, with `coalesce(1)` and with `repartition(1)` (the faster one is the baseline);
  (b) reads of the partition: a one-hour filter on event time with an aggregate, and a full
      count, from the merged object against the small objects, with Spark and pyarrow.dataset;
  (c) a partition of `--big-rows` rows in bigger small objects, merged into ranges of 64 / 128 /
      512 MiB of input (`plan_ranges`: greedy by input bytes, the stand-in for MergePlanner):
      files, merge time, and the reads of (b) over the merged objects; and the row-group size
      of the writer, on one range of the 128 MiB target (row groups, bytes, filter time).
Targets (issue 13): (a) <= 1.3x the bare job; (b) >= 5x faster from the merged objects; files
per partition <= ceil(bytes / target) + 1.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.compute as pc  # noqa: E402
import pyarrow.dataset as ds  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

from resources.compaction.merge_writer import (  # noqa: E402
    DISCOVERY_THRESHOLD,
    MergeWriter,
    spark_path,
)
from resources.ingestion.table_objects import dictionary_columns, write_table_object  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402
from resources.streams import StreamConfig, load_streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DT = "2026-01-01"
DAY = datetime(2026, 1, 1, tzinfo=timezone.utc)
HOUR = (DAY + timedelta(hours=12), DAY + timedelta(hours=13))
MIB = 1024 * 1024
TARGETS = (64 * MIB, 128 * MIB, 512 * MIB)
ROW_GROUPS = (4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 128 * MIB)
REPEAT = 3


def write_partition(directory: Path, config: StreamConfig, objects: int, rows: int) -> list[str]:
    """`objects` small objects of one table partition, `rows` rows in all, as ingestion writes
    them; event times uniformly random over the day, so objects overlap in time."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(13)
    start = np.datetime64(DAY.replace(tzinfo=None), "us").astype(np.int64)
    columns, dictionary = config.column_names, dictionary_columns(config)
    per, extra = divmod(rows, objects)
    paths, first = [], 0
    for i in range(objects):
        n = per + (i < extra)
        table = pa.table(
            {
                "event_id": [f"e{k:012d}" for k in range(first, first + n)],
                "user_id": [f"u{k}" for k in rng.integers(0, 997, n)],
                "amount": np.round(rng.random(n) * 1000, 2),
                "event_time": pa.array(
                    start + rng.integers(0, 86_400_000_000, n), pa.timestamp("us", tz="UTC")
                ),
            }
        )
        first += n
        target = directory / f"attempt-{i}-{DT}-0.parquet"
        write_table_object(table, DT, target, columns, dictionary)
        paths.append(str(target))
    return paths


def plan_ranges(sizes: Sequence[int], target_bytes: int, max_objects: int) -> list[range]:
    """Consecutive objects per merged object, greedy: fill each range up to `target_bytes` of
    input (at least one object) and `max_objects`. The bench's stand-in for MergePlanner, which
    plans one range per merge (rewriting the open one while it is under the target)."""
    ranges, begin, filled = [], 0, 0
    for i, size in enumerate(sizes):
        if i > begin and (filled + size > target_bytes or i - begin >= max_objects):
            ranges.append(range(begin, i))
            begin, filled = i, 0
        filled += size
    if begin < len(sizes):
        ranges.append(range(begin, len(sizes)))
    return ranges


def bare_job(spark: Any, paths: list[str], out: Path, how: str) -> None:
    """What a user would write without leasehold: read the files, write one file."""
    rows = spark.read.parquet(*(spark_path(p) for p in paths))
    rows = rows.coalesce(1) if how == "coalesce" else rows.repartition(1)
    rows.write.parquet(spark_path(str(out)))


def spark_filter(spark: Any, paths: list[str]) -> tuple[int, float]:
    from pyspark.sql import functions as F

    t = F.col("event_time")
    row = (
        spark.read.parquet(*(spark_path(p) for p in paths))
        .where((t >= F.lit(HOUR[0])) & (t < F.lit(HOUR[1])))
        .agg(F.count("*"), F.sum("amount"))
        .collect()[0]
    )
    return int(row[0]), float(row[1] or 0)


def spark_count(spark: Any, paths: list[str]) -> int:
    return int(spark.read.parquet(*(spark_path(p) for p in paths)).count())


def arrow_filter(paths: list[str]) -> tuple[int, float]:
    t = ds.field("event_time")
    lo, hi = (pa.scalar(h, pa.timestamp("us", tz="UTC")) for h in HOUR)
    table = ds.dataset(paths, format="parquet").to_table(
        columns=["amount"], filter=(t >= lo) & (t < hi)
    )
    return table.num_rows, float(pc.sum(table["amount"]).as_py() or 0)


def arrow_count(paths: list[str]) -> int:
    return int(ds.dataset(paths, format="parquet").count_rows())


def best_of(paths: dict[str, Callable[[], Any]], repeat: int = REPEAT) -> dict[str, float]:
    """Best wall time of each, run alternately: on this VM one run of a job can take 30%
    longer than the next, whichever job it is."""
    best = dict.fromkeys(paths, math.inf)
    for _ in range(repeat):
        for name, fn in paths.items():
            started = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - started)
    return best


def reads(spark: Any, paths: list[str], arrow: bool = True) -> dict[str, Any]:
    """The (b) queries over `paths`, best of REPEAT, with their answers (to check they agree)."""
    fns: dict[str, Callable[[], Any]] = {
        "spark filter": lambda: spark_filter(spark, paths),
        "spark count": lambda: spark_count(spark, paths),
    }
    if arrow:
        fns["arrow filter"] = lambda: arrow_filter(paths)
        fns["arrow count"] = lambda: arrow_count(paths)
    answers = {name: fn() for name, fn in fns.items()}
    return {"seconds": best_of(fns), "answers": answers}


def merge_all(writer: MergeWriter, paths: list[str], out: Path, target_bytes: int) -> list[str]:
    sizes = [Path(p).stat().st_size for p in paths]
    merged = []
    for n, r in enumerate(plan_ranges(sizes, target_bytes, writer.config.merge.max_objects)):
        merged.append(str(writer.write(paths[r.start : r.stop], out / f"part-{n}.parquet").path))
    return merged


def row_groups(path: str) -> tuple[int, int, bool]:
    """(row groups, bytes, whether the groups' event-time ranges are ordered and disjoint)."""
    meta = pq.read_metadata(path)
    col = meta.schema.names.index("event_time")
    stats = [meta.row_group(i).column(col).statistics for i in range(meta.num_row_groups)]
    ordered = all(a.max <= b.min for a, b in zip(stats, stats[1:], strict=False))
    return meta.num_row_groups, Path(path).stat().st_size, ordered


def same_answers(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Counts equal, sums equal up to the order doubles were added in."""

    def close(x: Any, y: Any) -> bool:
        if isinstance(x, tuple):
            return x[0] == y[0] and math.isclose(x[1], y[1], rel_tol=1e-9)
        return bool(x == y)

    return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)


def mib(n: float) -> str:
    return f"{n / MIB:.1f}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--big-rows", type=int, default=25_000_000)
    parser.add_argument("--work", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    config = load_streams(ROOT / "streams.yaml")["events"]
    base = Path(args.work or tempfile.mkdtemp(prefix="leasehold-bench-"))
    spark = build_spark_session(
        master="local[*]", app_name="bench-compaction", extra_conf={"spark.driver.memory": "6g"}
    )
    # Every path below reads explicit paths: the same setting for all (ARCHITECTURE §8).
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", DISCOVERY_THRESHOLD)
    writer = MergeWriter(spark, config)
    verdicts: list[tuple[str, bool]] = []
    try:
        warm = write_partition(base / "warm", config, 50, 5000)
        writer.write(warm, base / "warm-out" / "merged.parquet")
        for how in ("coalesce", "repartition"):
            bare_job(spark, warm, base / f"warm-{how}", how)
        reads(spark, warm)

        # (a) the merge against the bare job
        small = write_partition(base / "small", config, args.objects, args.rows)
        small_bytes = sum(Path(p).stat().st_size for p in small)
        runs = {"n": 0}

        def ours() -> None:
            runs["n"] += 1
            writer.write(small, base / f"merged-{runs['n']}" / "part.parquet")

        def bare(how: str) -> Callable[[], None]:
            return lambda: bare_job(spark, small, base / f"bare-{how}-{time.monotonic_ns()}", how)

        merge = best_of(
            {"ours": ours, "coalesce": bare("coalesce"), "repartition": bare("repartition")}
        )
        merged = str(base / "merged-1" / "part.parquet")
        groups, merged_bytes, ordered = row_groups(merged)
        baseline = min(merge["coalesce"], merge["repartition"])
        print(f"\n### (a) merging {args.objects} small objects ({args.rows:,} rows)\n")
        print(f"{mib(small_bytes)} MiB in, {mib(merged_bytes)} MiB out, {groups} row groups, "
              f"event-time ranges of row groups ordered: {ordered}\n")  # fmt: skip
        print("| path | seconds | vs bare |")
        print("| --- | --- | --- |")
        for label, key in (
            ("bare PySpark, coalesce(1)", "coalesce"),
            ("bare PySpark, repartition(1)", "repartition"),
            ("MergeWriter.write (sorted, one object at the target)", "ours"),
        ):
            print(f"| {label} | {merge[key]:.2f} | {merge[key] / baseline:.2f}x |")
        ratio = merge["ours"] / baseline
        verdicts.append((f"(a) merge {ratio:.2f}x the bare job (<= 1.3x)", ratio <= 1.3))

        # (b) reading the partition before and after
        before, after = reads(spark, small), reads(spark, [merged])
        assert same_answers(before["answers"], after["answers"]), (before["answers"], after["answers"])
        print(f"\n### (b) reading the partition: {args.objects} small objects vs 1 merged\n")
        print("| query | small objects, s | merged, s | faster |")
        print("| --- | --- | --- | --- |")
        for query, b in before["seconds"].items():
            a = after["seconds"][query]
            print(f"| {query} | {b:.3f} | {a:.3f} | {b / a:.1f}x |")
            if query.startswith("spark"):
                verdicts.append((f"(b) {query} {b / a:.1f}x faster merged (>= 5x)", b / a >= 5))

        # (c) target sizes, on a bigger partition in bigger small objects
        big = write_partition(base / "big", config, args.objects, args.big_rows)
        big_bytes = sum(Path(p).stat().st_size for p in big)
        print(f"\n### (c) target sizes: {args.objects} objects, {args.big_rows:,} rows, "
              f"{mib(big_bytes)} MiB\n")  # fmt: skip
        big_reads = reads(spark, big, arrow=False)
        rows_c: list[tuple[str, int, int, float, dict[str, float]]] = []
        for target in TARGETS:
            shutil.rmtree(base / "ranges", ignore_errors=True)
            started = time.perf_counter()
            files = merge_all(writer, big, base / "ranges" / f"{target // MIB}", target)
            seconds = time.perf_counter() - started
            got = reads(spark, files, arrow=False)
            assert same_answers(got["answers"], big_reads["answers"]), (got["answers"], big_reads["answers"])
            groups_c = sum(row_groups(f)[0] for f in files)
            rows_c.append((f"{target // MIB} MiB", len(files), groups_c, seconds, got["seconds"]))
            bound = math.ceil(big_bytes / target) + 1
            verdicts.append(
                (
                    f"(c) {target // MIB} MiB: {len(files)} files (<= {bound}), merge "
                    f"{seconds:.1f} s, filter {got['seconds']['spark filter']:.3f} s, count "
                    f"{got['seconds']['spark count']:.3f} s",
                    len(files) <= bound,
                )
            )
        print("| target | files | row groups | merge, s | spark filter, s | spark count, s |")
        print("| --- | --- | --- | --- | --- | --- |")
        s = big_reads["seconds"]
        print(f"| none ({args.objects} small objects) | {args.objects} | {args.objects} | - | "
              f"{s['spark filter']:.3f} | {s['spark count']:.3f} |")  # fmt: skip
        for label, n, g, seconds, s in rows_c:
            print(f"| {label} | {n} | {g} | {seconds:.1f} | {s['spark filter']:.3f} | "
                  f"{s['spark count']:.3f} |")  # fmt: skip

        # the writer's row-group size, on the first range of the 128 MiB target
        sizes = [Path(p).stat().st_size for p in big]
        first = plan_ranges(sizes, 128 * MIB, config.merge.max_objects)[0]
        inputs = big[first.start : first.stop]
        print(f"\n### row-group size: one range of 128 MiB of input ({len(inputs)} objects)\n")
        print("| parquet.block.size | row groups | object MiB | merge, s | spark filter, s | "
              "arrow filter, s | spark count, s |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for block in ROW_GROUPS:
            w = MergeWriter(spark, config, row_group_bytes=block)
            target_path = base / "blocks" / f"{block}.parquet"
            started = time.perf_counter()
            w.write(inputs, target_path)
            seconds = time.perf_counter() - started
            g, size, ordered = row_groups(str(target_path))
            got = reads(spark, [str(target_path)])["seconds"]
            print(f"| {mib(block)} MiB | {g} | {mib(size)} | {seconds:.1f} | "
                  f"{got['spark filter']:.3f} | {got['arrow filter']:.3f} | "
                  f"{got['spark count']:.3f} |")  # fmt: skip
    finally:
        spark.stop()
        if args.work is None:
            shutil.rmtree(base, ignore_errors=True)
    print("\n## Verdicts\n")
    for line, ok in verdicts:
        print(f"- {line}: {'met' if ok else 'MISSED'}")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
