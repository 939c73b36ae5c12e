"""Read a batch of source objects with Spark: table rows by date, bad records to quarantine.

One read covers every object of the batch (a run ingests many partitions; a Spark job per
object would cost more than the data). Objects are read whole (`wholetext`), split into lines
with their numbers, parsed against the declared schema as text, and cast with `try_cast`, so a
malformed line becomes a quarantine row with a reason instead of failing the job (Spark 4 runs
ANSI casts, which would raise). The batch is written by ONE job — good rows by
date, bad rows under a null date — then cut into one object per source with pyarrow; every count
comes from those files, not from extra Spark jobs.

A whole object that cannot be read (missing, not gzip though named `.gz`, corrupt gzip) is
found in Python before Spark sees it, and reported as `unreadable`: the caller closes that
source partition with backoff instead of losing the batch to one bad file.

DataFrame API only (no RDDs, no SparkContext): the same code runs over Spark Connect.
"""

from __future__ import annotations

import gzip
import os
import shutil
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion import SourceBatchResult, StagedFile
from resources.streams import StreamConfig

SPARK_TYPES = {
    "string": "string",
    "long": "bigint",
    "int": "int",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}
CORRUPT = "_corrupt_record"


def unreadable_reason(path: Path) -> str | None:
    """Why a whole object can't be read, or None. Gzip is verified end to end here: a corrupt
    member would otherwise fail the Spark job for every object in the batch."""
    try:
        with path.open("rb") as f:
            head = f.read(2)
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}"
    if path.name.endswith(".gz"):
        if head != b"\x1f\x8b":
            return "named .gz but is not gzip data"
        try:
            with gzip.open(path, "rb") as f:
                while f.read(1 << 20):
                    pass
        except (OSError, EOFError, zlib.error) as exc:
            return f"corrupt gzip: {exc}"
    return None


def _stage_input(path: Path, link: Path) -> None:
    """Give Spark a name we can map back (keys may hold any character); no copy if possible."""
    try:
        os.link(path, link)
    except OSError:
        try:
            os.symlink(path.resolve(), link)
        except OSError:
            shutil.copyfile(path, link)


def _reason_and_columns(config: StreamConfig, line: Any) -> tuple[Any, dict[str, Any]]:
    from pyspark.sql import functions as F
    from pyspark.sql.types import StringType, StructField, StructType

    names = config.column_names
    if config.format == "jsonl":
        schema = StructType(
            [StructField(n, StringType()) for n in names] + [StructField(CORRUPT, StringType())]
        )
        parsed = F.from_json(
            line, schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}
        )
        malformed = parsed.isNull() | parsed[CORRUPT].isNotNull()
        malformed_reason = "invalid JSON (truncated or malformed)"
    else:
        ddl = ", ".join(f"`{n}` STRING" for n in names)
        parsed = F.from_csv(line, ddl, {"sep": config.csv_delimiter, "mode": "PERMISSIVE"})
        fields = F.size(F.split(line, f"\\{config.csv_delimiter}", -1))
        malformed = parsed.isNull() | (fields != len(names))
        malformed_reason = f"CSV line does not have {len(names)} fields"
    typed = {c.name: parsed[c.name].try_cast(SPARK_TYPES[c.type]) for c in config.columns}
    reason = F.when(line.contains("\ufffd"), F.lit("invalid UTF-8")).when(
        malformed, F.lit(malformed_reason)
    )
    for c in config.columns:
        reason = reason.when(
            parsed[c.name].isNotNull() & typed[c.name].isNull(),
            F.lit(f"wrong type for {c.name}: expected {c.type}"),
        )
    reason = reason.when(typed[config.event_time].isNull(), F.lit("missing event time"))
    if config.record_id:
        reason = reason.when(typed[config.record_id].isNull(), F.lit("missing record id"))
    return reason, typed


def read_sources(
    spark: Any,
    config: StreamConfig,
    files: dict[str, Path],
    staging: Path,
    attempt: str,
) -> dict[str, SourceBatchResult]:
    """Read `files` (source key -> local path) and stage their table and quarantine rows.

    Returns one result per source key. Staged file names carry `attempt`, so nothing written
    here can be mistaken for another attempt's output.
    """
    from pyspark.sql import functions as F

    results = {key: SourceBatchResult() for key in files}
    inputs = staging / "in"
    inputs.mkdir(parents=True, exist_ok=True)
    index: dict[int, str] = {}
    paths = []
    for i, (key, path) in enumerate(files.items()):
        problem = unreadable_reason(path)
        if problem is not None:
            results[key].unreadable = problem
            continue
        link = inputs / (f"{i:07d}.txt" + (".gz" if path.name.endswith(".gz") else ""))
        _stage_input(path, link)
        index[i] = key
        paths.append(str(link))
    if not paths:
        return results

    lines = (
        # One directory, not a list of paths: past 32 paths Spark lists them with a job.
        spark.read.text(str(inputs), wholetext=True)
        .select(
            F.regexp_extract(F.col("_metadata.file_path"), r"(\d+)\.txt(\.gz)?$", 1)
            .cast("int")
            .alias("src"),
            F.posexplode(F.split(F.col("value"), "\n")).alias("pos", "raw"),
        )
        .select(
            "src", (F.col("pos") + 1).alias("line"), F.regexp_replace("raw", "\r$", "").alias("raw")
        )
        .where(F.trim(F.col("raw")) != "")
    )
    if config.format == "csv" and config.csv_header:
        lines = lines.where(F.col("line") > 1)
    reason, typed = _reason_and_columns(config, F.col("raw"))
    event = typed[config.event_time]
    if config.columns[config.column_names.index(config.event_time)].type == "string":
        event = event.try_cast("timestamp")
    dt = F.date_format(F.from_utc_timestamp(event, config.timezone), "yyyy-MM-dd")
    ok = reason.isNull()
    bad_only = {"line": F.col("line"), "reason": reason, "raw": F.col("raw")}
    table_dir = staging / "table"
    # ONE job: good rows under their date, bad rows (and only they keep line, reason and raw)
    # under a null date, each task's rows grouped by source; pyarrow cuts them per source below.
    lines.select(
        "src",
        F.when(ok, dt).alias("dt"),
        *(col.alias(name) for name, col in typed.items()),
        *(F.when(~ok, col).alias(f"_{name}") for name, col in bad_only.items()),
    ).sortWithinPartitions("src").write.partitionBy("dt").parquet(str(table_dir))

    out = staging / "out"
    for dt_dir in sorted(table_dir.glob("dt=*")):
        dt = dt_dir.name[3:]
        bad = dt == "__HIVE_DEFAULT_PARTITION__"
        for src, staged in _split_by_source(dt_dir, out, "" if bad else dt, attempt, index, bad):
            result = results[index[src]]
            (result.quarantine_files if bad else result.table_files).append(staged)
    for result in results.values():
        if result.unreadable is None:
            result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
            written = sum(f.row_count for f in result.table_files)
            result.rows_read = written + result.rows_quarantined
    return results


def _split_by_source(
    directory: Path,
    out: Path,
    dt: str,
    attempt: str,
    index: dict[int, str],
    quarantine: bool,
) -> Iterator[tuple[int, StagedFile]]:
    """Cut Spark's part files (rows grouped by `src`) into one Parquet object per source.

    Each source object was read whole by one task, so its rows for a date sit contiguously in
    exactly one part file; slicing is zero-copy and the counts are exact without another job.
    Table objects keep the stream's columns; quarantine objects get source key, line, reason
    and the raw text.
    """
    out.mkdir(parents=True, exist_ok=True)
    for part in sorted(directory.glob("part-*.parquet")):
        table = pq.read_table(part)
        if table.num_rows == 0:
            continue
        src = table.column("src").to_numpy()
        starts = [0, *(np.flatnonzero(np.diff(src)) + 1).tolist(), len(src)]
        if quarantine:
            body = table.select(["_line", "_reason", "_raw"]).rename_columns(
                ["line", "reason", "raw"]
            )
        else:
            body = table.drop_columns(["src", "_line", "_reason", "_raw"])
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            source = int(src[begin])
            piece = body.slice(begin, end - begin)
            if quarantine:
                keys = pa.array([index[source]] * piece.num_rows, pa.string())
                piece = piece.add_column(0, "source_key", keys)
            target = out / f"{attempt}-{source}-{dt or 'quarantine'}.parquet"
            pq.write_table(piece, target)
            yield source, StagedFile(dt, target, piece.num_rows, target.stat().st_size)
