"""What leasehold's Spark read of one chunk costs, against the bare job, step by step.

    .venv/bin/python bench/reader.py [--objects 250] [--records 5000] [--repeat 3]

bench/ingest.py measures whole runs; this takes one chunk (what a run reads with one Spark job)
and, in the same session on the same files, times:
  bare         `spark.read.json` with the schema, date column, date-partitioned Parquet;
  text parse   `spark.read.text` + `from_json` instead (how leasehold read until 2026-11-23);
  json+source  the bare job plus the corrupt-record column and the source of each row, sorted
               by (date, source) and written by Spark as Parquet (leasehold's read until
               2026-11-23 afternoon, less its checks; pyarrow then read those files back);
  leasehold    `SourceReader.read`: the same rows with the checks and reasons of bad records,
               to the driver as Arrow instead, cut into one object per (source, date) with
               pyarrow.
"""

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ingest import SCHEMA, bare_job, measured, process_cpu  # noqa: E402

from resources.ingestion.read_plan import CORRUPT  # noqa: E402
from resources.ingestion.sample_data import write_sample_sources  # noqa: E402
from resources.ingestion.source_files import INPUT_DIGITS  # noqa: E402
from resources.ingestion.source_reader import SourceReader  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402
from resources.streams import load_streams  # noqa: E402

STREAMS = """
streams:
  bench:
    source: file://{source}
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://{base}/lake
"""


def variants(spark: Any, base: Path, files: dict[str, Path]) -> dict[str, Callable[[Path], Any]]:
    from pyspark.sql import functions as F

    inputs = base / "inputs"  # named as SourceReader names them, so the source column is alike
    inputs.mkdir()
    for i, path in enumerate(files.values()):
        os.link(path, inputs / f"{i:0{INPUT_DIGITS}d}.txt")
    (base / "streams.yaml").write_text(STREAMS.format(source=base / "sources", base=base))
    config = load_streams(base / "streams.yaml")["bench"]
    reader = SourceReader(spark, config)  # as a run has one, for all its chunks
    source = F.substring("_metadata.file_name", 1, INPUT_DIGITS).cast("int").alias("src")
    dt = F.date_format("event_time", "yyyy-MM-dd").alias("dt")
    columns = [column.split()[0] for column in SCHEMA.split(", ")]

    def text_parse(out: Path) -> None:
        lines = spark.read.text(str(inputs)).select(source, F.col("value").alias("raw"))
        parsed = lines.select("src", F.from_json("raw", SCHEMA).alias("p")).select("src", "p.*")
        parsed.select(*columns, dt).write.partitionBy("dt").parquet(str(out))

    def json_with_source(out: Path) -> None:
        rows = (
            spark.read.schema(f"{SCHEMA}, {CORRUPT} string")
            .option("columnNameOfCorruptRecord", CORRUPT)
            .json(str(inputs))
            .select(source, *columns, CORRUPT)
        )
        ok = F.col(CORRUPT).isNull() & F.col("event_time").isNotNull()
        rows.select(
            "src",
            F.when(ok, dt).alias("dt"),
            *columns,
            F.when(~ok, F.col(CORRUPT)).alias("_raw"),
        ).sortWithinPartitions("dt", "src").write.partitionBy("dt").parquet(str(out))

    return {
        "bare": lambda out: bare_job(spark, inputs, out),
        "text parse": text_parse,
        "json+source": json_with_source,
        "leasehold": lambda out: reader.read(files, out, "bench"),
    }


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--objects", type=int, default=250)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = build_spark_session(
        master="local[*]", app_name="bench-reader", extra_conf={"spark.driver.memory": "6g"}
    )
    cpu = process_cpu(spark)
    base = Path(tempfile.mkdtemp(prefix="leasehold-bench-reader-"))
    paths = write_sample_sources(
        base / "sources", objects=args.objects, records_per_object=args.records
    )
    runs = variants(spark, base, {path.name: path for path in paths})
    outputs = iter(range(1_000_000))
    for run in runs.values():  # warm-up: JIT, codegen caches
        run(base / f"out-{next(outputs)}")
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    core_seconds: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(args.repeat):
        for name, run in runs.items():
            wall, used, _ = measured(cpu, run, base / f"out-{next(outputs)}")
            seconds[name].append(wall)
            core_seconds[name].append(used)
    bare = min(seconds["bare"])
    print(f"\n{args.objects} objects x {args.records} records, best of {args.repeat}\n")
    print("| read | seconds | vs bare | CPU, core-seconds |")
    print("| --- | --- | --- | --- |")
    for name in runs:
        best = min(seconds[name])
        print(f"| {name} | {best:.2f} | {best / bare:.2f}x | {min(core_seconds[name]):.1f} |")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
