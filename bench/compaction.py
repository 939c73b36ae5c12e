"""Merging a table partition's small objects, and reading it before and after.

    .venv/bin/python bench/compaction.py [--objects 2000] [--rows 1000000] [--big-rows 36000000]

A table partition of `--objects` small Parquet objects, written as ingestion writes them
(`write_table_object`, the `events` stream of streams.yaml: a unique event id, a user id out of
997, an amount, an event time), `--rows` rows in all, event times random over one day (so no
object is sorted and none holds one hour alone). One process, one SparkSession (`local[*]`,
6 GiB driver as in bench/ingest.py; its start-up is excluded from every path alike), the
explicit-paths listing threshold raised and the stream's schema given for every path alike
(docs/architecture.md: either one left out flatters whichever path has it); a warm-up of every path
first. Paths run alternately, three times each, best of each counts:
  (a) `MergeWriter.write` of all objects (read exactly those paths, sort by event time, one
      object at the target; in pyarrow since it fits `ARROW_MAX_BYTES`: the results in
      BENCHMARKS.md from before 2026-11-26 are its Spark path) against a bare PySpark job that
      reads the same paths and writes one file, with `coalesce(1)` and with `repartition(1)`
      (the faster one is the baseline);
  (b) reads of the partition: a one-hour filter on event time with an aggregate, and a full
      count, from the merged object against the small objects, with Spark (and, for the
      record, pyarrow.dataset);
  (c) a partition of `--big-rows` rows in bigger small objects (~600 MiB), merged to the end by
      the real `MergePlanner` with targets of 64 / 128 / 512 MiB (each merge a `MergeWriter`
      run; the open range rewritten while under the target, as the merge job does it): files,
      merges, merge time, and the reads of (b) over the merged objects;
  (d) on one 128 MiB range of (c), on the Spark path: the writer's sort strategy (one task,
      `coalesce(1)`, against `repartition(1)` and `orderBy` + `coalesce(1)`, and the bare
      unsorted copy) and its row-group size (row groups, bytes, filter time).
Targets (issue 13): (a) <= 1.3x the bare job; (b) >= 5x faster from the merged objects; files
per partition <= ceil(merged bytes / target) + 1.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
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

from resources.compaction.merge_planner import MergePlanner  # noqa: E402
from resources.compaction.merge_writer import (  # noqa: E402
    DISCOVERY_THRESHOLD,
    MergeWriter,
    spark_path,
    table_schema,
)
from resources.ingestion.table_objects import write_table_object  # noqa: E402
from resources.ledger.merge import MergeRange, merged_object_name  # noqa: E402
from resources.ledger.model import RegisteredObject, TablePartition  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402
from resources.streams import StreamConfig, load_streams  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DT = "2026-01-01"
DAY = datetime(2026, 1, 1, tzinfo=timezone.utc)
HOUR = (DAY + timedelta(hours=12), DAY + timedelta(hours=13))
MIB = 1024 * 1024
TARGETS = (64 * MIB, 128 * MIB, 512 * MIB)
ROW_GROUPS = (4 * MIB, 8 * MIB, 16 * MIB, 32 * MIB, 64 * MIB, 128 * MIB)
STRATEGIES = ("coalesce", "repartition", "orderBy")
REPEAT = 3


def write_partition(directory: Path, config: StreamConfig, objects: int, rows: int) -> list[str]:
    """`objects` small objects of one table partition, `rows` rows in all, as ingestion writes
    them; event times uniformly random over the day, so objects overlap in time."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(13)
    start = np.datetime64(DAY.replace(tzinfo=None), "us").astype(np.int64)
    columns, dictionary = config.column_names, config.dictionary_columns
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
        write_table_object(table, target, columns, dictionary)
        paths.append(str(target))
    return paths


class Partition:
    """One table partition's ledger as the merge job sees it (pure, no store): its small
    objects by id and its merge chain, merged to the end by the real `MergePlanner`."""

    def __init__(self, paths: list[str]) -> None:
        self.objects = [
            RegisteredObject(
                table="events",
                dt=DT,
                object_id=i + 1,
                url="file://" + p,
                content_length=Path(p).stat().st_size,
                row_count=pq.read_metadata(p).num_rows,
                source_identifier="bench",
                source_partition_key=str(i),
                epoch=1,
                delayed=False,
            )
            for i, p in enumerate(paths)
        ]
        self.partition = TablePartition("events", DT, next_object_id=len(paths) + 1)

    def merge(self, writer: MergeWriter, out: Path, max_bytes: int) -> tuple[list[str], int]:
        """(merged files, merges run): one plan and one `MergeWriter.write` per merge job, as
        many as it takes; a rewritten range's previous object is deleted."""
        planner = MergePlanner(writer.config.merge.max_objects, max_bytes)
        chain = [MergeRange("events", DT, None, 0, None, 0, 0, 0, 0)]
        merges = 0
        while (plan := planner.plan(self.partition, chain, self.objects)) is not None:
            merges += 1
            name = merged_object_name(plan.lower, plan.upper)
            written = writer.write(plan.inputs, out / f"attempt-{merges}" / name)
            done = MergeRange(
                "events", DT, plan.lower, plan.upper, "file://" + str(written.path),
                written.content_length, written.row_count, 1, 0,
            )  # fmt: skip
            if plan.rewrite is not None:
                Path(str(chain.pop().url)[len("file://") :]).unlink()
            chain.append(done)
        return [str(r.url)[len("file://") :] for r in chain[1:]], merges


class StrategyWriter(MergeWriter):
    """The writer with another way to get one sorted task (for (d) only), always on Spark."""

    def __init__(self, spark: Any, config: StreamConfig, strategy: str) -> None:
        super().__init__(spark, config, arrow_max_bytes=0)
        self.strategy = strategy

    def _spark_write(self, inputs: list[str], out: str) -> None:
        rows = self.spark.read.schema(self.schema).parquet(*inputs)
        if self.strategy == "coalesce":  # what MergeWriter does
            rows = rows.coalesce(1).sortWithinPartitions(self.sort_by)
        elif self.strategy == "repartition":
            rows = rows.repartition(1).sortWithinPartitions(self.sort_by)
        else:  # a range-partitioned sort (and its sampling job), read back by one task
            rows = rows.orderBy(self.sort_by).coalesce(1)
        rows.write.option("parquet.block.size", str(self.row_group_bytes)).parquet(out)


def bare_job(spark: Any, schema: str, paths: list[str], out: Path, how: str) -> None:
    """What a user would write without leasehold: read the files, write one file (with the
    schema and the listing threshold the writer gets: neither is the merge's merit)."""
    rows = spark.read.schema(schema).parquet(*(spark_path(p) for p in paths))
    rows = rows.coalesce(1) if how == "coalesce" else rows.repartition(1)
    rows.write.parquet(spark_path(str(out)))


def spark_filter(spark: Any, schema: str, paths: list[str]) -> tuple[int, float]:
    from pyspark.sql import functions as F

    t = F.col("event_time")
    row = (
        spark.read.schema(schema)
        .parquet(*(spark_path(p) for p in paths))
        .where((t >= F.lit(HOUR[0])) & (t < F.lit(HOUR[1])))
        .agg(F.count("*"), F.sum("amount"))
        .collect()[0]
    )
    return int(row[0]), float(row[1] or 0)


def spark_count(spark: Any, schema: str, paths: list[str]) -> int:
    return int(spark.read.schema(schema).parquet(*(spark_path(p) for p in paths)).count())


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


def reads(spark: Any, schema: str, paths: list[str], arrow: bool = True) -> dict[str, Any]:
    """The (b) queries over `paths`, best of REPEAT, with their answers (to check they agree)."""
    fns: dict[str, Callable[[], Any]] = {
        "spark filter": lambda: spark_filter(spark, schema, paths),
        "spark count": lambda: spark_count(spark, schema, paths),
    }
    if arrow:
        fns["arrow filter"] = lambda: arrow_filter(paths)
        fns["arrow count"] = lambda: arrow_count(paths)
    answers = {name: fn() for name, fn in fns.items()}
    return {"seconds": best_of(fns), "answers": answers}


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
    parser.add_argument("--big-rows", type=int, default=36_000_000)
    parser.add_argument("--work", default=None, help="scratch directory (default: a temp dir)")
    args = parser.parse_args()
    config = load_streams(ROOT / "streams.yaml")["events"]
    schema = table_schema(config)
    base = Path(args.work or tempfile.mkdtemp(prefix="leasehold-bench-"))
    spark = build_spark_session(
        master="local[*]", app_name="bench-compaction", extra_conf={"spark.driver.memory": "6g"}
    )
    # Every path below reads explicit paths: the same setting for all (docs/architecture.md).
    spark.conf.set("spark.sql.sources.parallelPartitionDiscovery.threshold", DISCOVERY_THRESHOLD)
    writer = MergeWriter(spark, config)
    strategies = {how: StrategyWriter(spark, config, how) for how in STRATEGIES}
    verdicts: list[tuple[str, bool]] = []
    started_all = time.perf_counter()
    try:
        warm = write_partition(base / "warm", config, 50, 5000)
        writer.write(warm, base / "warm-out" / "merged.parquet")
        for how in ("coalesce", "repartition"):
            bare_job(spark, schema, warm, base / f"warm-{how}", how)
        for how, w in strategies.items():
            w.write(warm, base / f"warm-{how}.parquet")
        reads(spark, schema, warm)

        # (a) the merge against the bare job
        small = write_partition(base / "small", config, args.objects, args.rows)
        small_bytes = sum(Path(p).stat().st_size for p in small)
        runs = {"n": 0}

        def ours() -> None:
            runs["n"] += 1
            writer.write(small, base / f"merged-{runs['n']}" / "part.parquet")

        def bare(how: str) -> Callable[[], None]:
            return lambda: bare_job(
                spark, schema, small, base / f"bare-{how}-{time.monotonic_ns()}", how
            )

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
        before, after = reads(spark, schema, small), reads(spark, schema, [merged])
        assert same_answers(before["answers"], after["answers"]), (before, after)
        print(f"\n### (b) reading the partition: {args.objects} small objects vs 1 merged\n")
        print("| query | small objects, s | merged, s | faster |")
        print("| --- | --- | --- | --- |")
        for query, b in before["seconds"].items():
            a = after["seconds"][query]
            print(f"| {query} | {b:.3f} | {a:.3f} | {b / a:.1f}x |")
            if query.startswith("spark"):
                verdicts.append((f"(b) {query} {b / a:.1f}x faster merged (>= 5x)", b / a >= 5))
        for path in base.glob("bare-*"):
            shutil.rmtree(path)

        # (c) target sizes, on a bigger partition in bigger small objects
        big = write_partition(base / "big", config, args.objects, args.big_rows)
        big_bytes = sum(Path(p).stat().st_size for p in big)
        ledger = Partition(big)
        big_reads = reads(spark, schema, big, arrow=False)
        rows_c = []
        for target in TARGETS:
            out = base / "ranges" / f"{target // MIB}"
            started = time.perf_counter()
            files, merges = ledger.merge(writer, out, target)
            seconds = time.perf_counter() - started
            got = reads(spark, schema, files, arrow=False)
            assert same_answers(got["answers"], big_reads["answers"]), (got, big_reads)
            out_bytes = sum(Path(f).stat().st_size for f in files)
            groups_c = sum(row_groups(f)[0] for f in files)
            sizes_c = ", ".join(mib(Path(f).stat().st_size) for f in files)
            rows_c.append((target, files, merges, groups_c, seconds, got["seconds"], sizes_c))
            bound = math.ceil(out_bytes / target) + 1
            filt, count = got["seconds"]["spark filter"], got["seconds"]["spark count"]
            verdicts.append(
                (
                    f"(c) {target // MIB} MiB: {len(files)} files (<= ceil({mib(out_bytes)} / "
                    f"{target // MIB}) + 1 = {bound}), {merges} merges in {seconds:.1f} s; "
                    f"filter {big_reads['seconds']['spark filter'] / filt:.1f}x, count "
                    f"{big_reads['seconds']['spark count'] / count:.1f}x faster than the "
                    f"small objects",
                    len(files) <= bound,
                )
            )
            shutil.rmtree(out)
        print(f"\n### (c) target sizes: {args.objects} objects, {args.big_rows:,} rows, "
              f"{mib(big_bytes)} MiB of small objects\n")  # fmt: skip
        print("| target | files (MiB each) | merges | row groups | merge, s | spark filter, s "
              "| spark count, s |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        s = big_reads["seconds"]
        print(f"| none ({args.objects} small objects) | {args.objects} | - | {args.objects} | - "
              f"| {s['spark filter']:.3f} | {s['spark count']:.3f} |")  # fmt: skip
        for target, files, merges, g, seconds, s, sizes_c in rows_c:
            filt, count = s["spark filter"], s["spark count"]
            print(f"| {target // MIB} MiB | {len(files)} ({sizes_c}) | {merges} | {g} "
                  f"| {seconds:.1f} | {filt:.3f} | {count:.3f} |")  # fmt: skip

        # (d) one 128 MiB range: the sort strategy, then the row-group size
        planner = MergePlanner(config.merge.max_objects, 128 * MIB)
        first = planner.plan(ledger.partition, [], ledger.objects)
        assert first is not None
        inputs = first.inputs
        in_bytes = first.input_bytes
        print(f"\n### (d) one range of {mib(in_bytes)} MiB of input ({len(inputs)} objects, "
              f"{first.input_rows:,} rows)\n")  # fmt: skip
        n = {"i": 0}

        def strategy(how: str) -> Callable[[], None]:
            def run() -> None:
                n["i"] += 1
                strategies[how].write(inputs, base / "strategy" / f"{n['i']}.parquet")

            return run

        paths_d: dict[str, Callable[[], None]] = {how: strategy(how) for how in STRATEGIES}
        paths_d["bare"] = lambda: bare_job(
            spark, schema, inputs, base / "strategy" / f"bare-{time.monotonic_ns()}", "coalesce"
        )
        sorts = best_of(paths_d, repeat=2)
        shutil.rmtree(base / "strategy")
        print("| sort strategy | seconds (best of 2) | vs bare copy |")
        print("| --- | --- | --- |")
        for label, key in (
            ("coalesce(1) + sortWithinPartitions (MergeWriter)", "coalesce"),
            ("repartition(1) + sortWithinPartitions", "repartition"),
            ("orderBy + coalesce(1)", "orderBy"),
            ("bare copy, coalesce(1), unsorted", "bare"),
        ):
            print(f"| {label} | {sorts[key]:.1f} | {sorts[key] / sorts['bare']:.2f}x |")

        print("\n| parquet.block.size | row groups | object MiB | merge, s | spark filter, s | "
              "arrow filter, s | spark count, s |")  # fmt: skip
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for block in ROW_GROUPS:
            # Spark's parquet.block.size: the Spark path (a merge too big for pyarrow).
            w = MergeWriter(spark, config, row_group_bytes=block, arrow_max_bytes=0)
            target_path = base / "blocks" / f"{block}.parquet"
            started = time.perf_counter()
            w.write(inputs, target_path)
            seconds = time.perf_counter() - started
            g, size, ordered = row_groups(str(target_path))
            assert ordered, target_path
            got = reads(spark, schema, [str(target_path)])["seconds"]
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
    print(f"\n(the whole benchmark took {time.perf_counter() - started_all:.0f} s)")
    return 0 if all(ok for _, ok in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
