"""Read a batch of source objects with Spark: table rows by date, bad records to quarantine.

One read covers every object of the batch (a run ingests many partitions; a Spark job per
object would cost more than the data), and the common case pays for little more than a bare
`spark.read.json` job (bench/reader.py):
- JSON lines are read by Spark's JSON reader with the declared types: bytes straight to typed
  rows. It keeps the text of a line only when it rejects the line (the corrupt-record column);
  only such a line is parsed again as text and `try_cast` per column, to name the column at
  fault (Spark 4 runs ANSI casts, which would fail the job instead). As in any Spark JSON read,
  a line holding a JSON array yields one record per element, and invalid UTF-8 is rejected.
  CSV lines are read as text and always take the text parse;
- the batch is written by ONE job — good rows by date, bad rows under a null date — and cut
  into one object per source and part file with pyarrow; every count comes from those files.
Two things a line-mode read does not know are found afterwards, for the few bad records only:
the text of a line that parsed but fails a check (no event time, no record id) — a second, text
read of just the sources that have such lines — and the line numbers of bad records, by
scanning their (local) source object in Python.

A whole object that cannot be read (missing, not gzip though named `.gz`, corrupt gzip) is
found in Python before Spark sees it, and reported as `unreadable`: the caller closes that
source partition with backoff instead of losing the batch to one bad file.

DataFrame API only (no RDDs, no SparkContext): the same code runs over Spark Connect.
"""

from __future__ import annotations

import gzip
import io
import os
import re
import shutil
import zlib
from collections import defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion import SourceBatchResult, StagedFile
from resources.streams import StreamConfig

CORRUPT = "_corrupt_record"
INPUT_DIGITS = 7
REPLACEMENTS = re.compile("\ufffd+")


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


def _open_lines(path: Path) -> IO[str]:
    """The object's lines as Spark's text reader sees them: \\n, \\r\\n and \\r all end a line,
    invalid UTF-8 becomes U+FFFD."""
    binary: IO[bytes] = gzip.open(path, "rb") if path.name.endswith(".gz") else path.open("rb")
    return io.TextIOWrapper(binary, encoding="utf-8", errors="replace", newline=None)


def _stage_input(path: Path, link: Path, skip_header: bool) -> None:
    """Give Spark a name we can map back (keys may hold any character); no copy if possible.
    A CSV header is dropped here, where "first line of the object" still means something."""
    if skip_header:
        with _open_lines(path) as lines, link.open("w", encoding="utf-8") as out:
            lines.readline()
            shutil.copyfileobj(lines, out)
        return
    try:
        os.link(path, link)
    except OSError:
        try:
            os.symlink(path.resolve(), link)
        except OSError:
            shutil.copyfile(path, link)


def _spark_type(type_name: str) -> Any:
    """The Spark type of a `streams.yaml` column type (validated there)."""
    from pyspark.sql import types as T

    return {
        "string": T.StringType(),
        "long": T.LongType(),
        "int": T.IntegerType(),
        "double": T.DoubleType(),
        "boolean": T.BooleanType(),
        "timestamp": T.TimestampType(),
        "date": T.DateType(),
    }[type_name]


def _text_reason_and_columns(config: StreamConfig, line: Any) -> tuple[Any, dict[str, Any]]:
    """Parse `line` as text, cast per column: slow, but it names what is wrong."""
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
    typed = {c.name: parsed[c.name].try_cast(_spark_type(c.type)) for c in config.columns}
    reason = F.when(malformed, F.lit(malformed_reason))
    for c in config.columns:
        reason = reason.when(
            parsed[c.name].isNotNull() & typed[c.name].isNull(),
            F.lit(f"wrong type for {c.name}: expected {c.type}"),
        )
    return reason, typed


def _source() -> Any:
    """The batch index of the object a row came from, out of the staged file's name."""
    from pyspark.sql import functions as F

    return F.substring("_metadata.file_name", 1, INPUT_DIGITS).cast("int").alias("src")


def _json_schema(config: StreamConfig) -> tuple[Any, dict[str, str]]:
    """The declared types plus the corrupt-record column, and the options that fill it."""
    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType(
        [StructField(c.name, _spark_type(c.type)) for c in config.columns]
        + [StructField(CORRUPT, StringType())]
    )
    return schema, {"mode": "PERMISSIVE", "columnNameOfCorruptRecord": CORRUPT}


def _event_time(config: StreamConfig) -> Any:
    from pyspark.sql import functions as F

    event = F.col(config.event_time)
    if config.columns[config.column_names.index(config.event_time)].type == "string":
        event = event.try_cast("timestamp")
    return event


def _check_reason(config: StreamConfig) -> Any:
    """Why a parsed record cannot go to the table, or null."""
    from pyspark.sql import functions as F

    reason = F.when(_event_time(config).isNull(), F.lit("missing event time"))
    if config.record_id:
        reason = reason.when(F.col(config.record_id).isNull(), F.lit("missing record id"))
    return reason


def _read_json_records(spark: Any, config: StreamConfig, inputs: Path) -> Any:
    """(src, raw, columns..., _rejected): `raw` is the text of a rejected line, else null;
    `_rejected` names what is wrong with it. A line the typed parse rejects but the text parse
    accepts (a quoted number, say) keeps its text-cast values."""
    from pyspark.sql import functions as F

    schema, options = _json_schema(config)
    records = (
        spark.read.schema(schema)
        .options(**options)
        .json(str(inputs))
        .select(_source(), *config.column_names, F.col(CORRUPT).alias("raw"))
    )
    text_reason, text_typed = _text_reason_and_columns(config, F.col("raw"))
    rejected = F.col("raw").isNotNull()
    return records.select(
        "src",
        "raw",
        *(
            F.when(rejected, text_typed[c]).otherwise(F.col(c)).alias(c)
            for c in config.column_names
        ),
        F.when(rejected, text_reason).alias("_rejected"),
    )


def _read_csv_lines(spark: Any, config: StreamConfig, inputs: Path) -> Any:
    """(src, raw, columns..., _rejected), every line through the text parse."""
    from pyspark.sql import functions as F

    lines = (
        spark.read.text(str(inputs))
        .select(_source(), F.col("value").alias("raw"))
        .where(F.trim("raw") != "")
    )
    text_reason, text_typed = _text_reason_and_columns(config, F.col("raw"))
    return lines.select(
        "src",
        "raw",
        *(col.alias(name) for name, col in text_typed.items()),
        text_reason.alias("_rejected"),
    )


def _lines_failing_checks(
    spark: Any, config: StreamConfig, staged: list[Path]
) -> dict[int, dict[str, deque[str]]]:
    """src -> reason -> text of each line that parses but fails a check, read again as text
    from only the objects that have such lines, and parsed as the JSON reader parses them (the
    same Jackson parser and types; a leading byte-order mark skipped; an array line's records
    each checked) so that the same lines fail."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    schema, options = _json_schema(config)
    text = F.regexp_replace("raw", "^\ufeff", "")
    records = F.when(
        F.ltrim(text).startswith("["), F.from_json(text, ArrayType(schema), options)
    ).otherwise(F.array(F.from_json(text, schema, options)))
    rows = (
        spark.read.text([str(path) for path in staged])
        .select(_source(), F.col("value").alias("raw"))
        .where(F.is_valid_utf8("raw"))
        .select("src", "raw", F.explode(records).alias("p"))
        .where(F.col("p").isNotNull() & F.col(f"p.{CORRUPT}").isNull())
        .select("src", "raw", "p.*")
        .select("src", "raw", _check_reason(config).alias("reason"))
        .where(F.col("reason").isNotNull())
        .collect()
    )
    found: dict[int, dict[str, deque[str]]] = defaultdict(lambda: defaultdict(deque))
    for row in rows:
        found[row["src"]][row["reason"]].append(row["raw"])
    return found


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
    skip_header = config.format == "csv" and config.csv_header
    for i, (key, path) in enumerate(files.items()):
        problem = unreadable_reason(path)
        if problem is not None:
            results[key].unreadable = problem
            continue
        gz = ".gz" if path.name.endswith(".gz") and not skip_header else ""
        _stage_input(path, inputs / f"{i:0{INPUT_DIGITS}d}.txt{gz}", skip_header)
        index[i] = key
    if not index:
        return results

    # One directory, not a list of paths: past 32 paths Spark lists them with a job.
    if config.format == "jsonl":
        parsed = _read_json_records(spark, config, inputs)
    else:
        parsed = _read_csv_lines(spark, config, inputs)
    reason = (
        F.when(~F.is_valid_utf8("raw"), F.lit("invalid UTF-8"))
        .when(F.col("_rejected").isNotNull(), F.col("_rejected"))
        .otherwise(_check_reason(config))
    )
    event = _event_time(config)
    dt = F.date_format(F.from_utc_timestamp(event, config.timezone), "yyyy-MM-dd")
    ok = F.col("_reason").isNull()
    table_dir = staging / "table"
    # ONE job: good rows under their date, bad rows (only they keep reason and raw text) under
    # a null date. Sorted by (dt, src), which is the order the writer needs anyway (no second
    # sort), and which puts each source's rows for a date together in a part file.
    (
        parsed.select("src", "raw", *config.column_names, reason.alias("_reason"))
        .select(
            "src",
            F.when(ok, dt).alias("dt"),
            *config.column_names,
            "_reason",
            F.when(~ok, F.make_valid_utf8("raw")).alias("_raw"),
        )
        .sortWithinPartitions("dt", "src")
        .write.partitionBy("dt")
        .parquet(str(table_dir))
    )

    out = staging / "out"
    out.mkdir(parents=True, exist_ok=True)
    for dt_dir in sorted(table_dir.glob("dt=*")):
        dt_value = dt_dir.name[3:]
        if dt_value == "__HIVE_DEFAULT_PARTITION__":
            for src, staged in _write_quarantine(
                spark, config, files, index, staging, dt_dir, attempt
            ):
                results[index[src]].quarantine_files.append(staged)
        else:
            for src, staged in _split_by_source(dt_dir, out, dt_value, attempt):
                results[index[src]].table_files.append(staged)
    for result in results.values():
        if result.unreadable is None:
            result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
            written = sum(f.row_count for f in result.table_files)
            result.rows_read = written + result.rows_quarantined
    return results


def _write_quarantine(
    spark: Any,
    config: StreamConfig,
    files: dict[str, Path],
    index: dict[int, str],
    staging: Path,
    directory: Path,
    attempt: str,
) -> Iterator[tuple[int, StagedFile]]:
    """One quarantine object per source with bad records: source key, line, reason, text."""
    bad = _collect_bad_rows(directory)
    unseen = sorted(src for src, (_, raws) in bad.items() if None in raws)
    if unseen:
        again = [next((staging / "in").glob(f"{src:0{INPUT_DIGITS}d}.*")) for src in unseen]
        found = _lines_failing_checks(spark, config, again)
        for src in unseen:
            reasons, raws = bad[src]
            for i, (reason, raw) in enumerate(zip(reasons, raws, strict=True)):
                if raw is None and found[src][reason]:
                    raws[i] = found[src][reason].popleft()
    skip_header = config.format == "csv" and config.csv_header
    for src, (reasons, raws) in bad.items():
        key = index[src]
        target = staging / "out" / f"{attempt}-{src}-quarantine.parquet"
        table = {
            "source_key": pa.array([key] * len(raws), pa.string()),
            "line": pa.array(_line_numbers(files[key], raws, skip_header), pa.int64()),
            "reason": pa.array(reasons, pa.string()),
            "raw": pa.array(raws, pa.string()),
        }
        pq.write_table(pa.table(table), target)
        yield src, StagedFile("", target, len(raws), target.stat().st_size)


def _split_by_source(
    directory: Path, out: Path, dt: str, attempt: str
) -> Iterator[tuple[int, StagedFile]]:
    """Cut Spark's part files (rows sorted by `src`) into one Parquet object per source and
    part file. A big source object read by several tasks yields several objects for a date;
    the part number keeps their names apart. Slicing is zero-copy; counts are exact."""
    for part_no, part in enumerate(sorted(directory.glob("part-*.parquet"))):
        table = pq.read_table(part)
        if table.num_rows == 0:
            continue
        src = table.column("src").to_numpy()
        starts = [0, *(np.flatnonzero(np.diff(src)) + 1).tolist(), len(src)]
        body = table.drop_columns(["src", "_reason", "_raw"])
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            source = int(src[begin])
            target = out / f"{attempt}-{source}-{dt}-{part_no}.parquet"
            pq.write_table(body.slice(begin, end - begin), target)
            yield source, StagedFile(dt, target, end - begin, target.stat().st_size)


def _collect_bad_rows(directory: Path) -> dict[int, tuple[list[str], list[str | None]]]:
    """src -> (reasons, raw lines) of every quarantined row, across all part files; the raw
    line of a JSON record that parsed but failed a check is not known yet (None)."""
    bad: dict[int, tuple[list[str], list[str | None]]] = defaultdict(lambda: ([], []))
    for part in sorted(directory.glob("part-*.parquet")):
        table = pq.read_table(part, columns=["src", "_reason", "_raw"])
        columns = (table.column(c).to_pylist() for c in table.column_names)
        for src, reason, raw in zip(*columns, strict=True):
            bad[src][0].append(reason)
            bad[src][1].append(raw)
    return bad


def _line_numbers(path: Path, raws: list[str | None], header_skipped: bool) -> list[int | None]:
    """Number the bad lines by finding them in the object (bad lines are rare; a line-mode read
    cannot number them itself). Equal lines are interchangeable, so the k-th occurrence of a
    text gets the k-th line holding it. Runs of U+FFFD are compared as one, since Java and
    Python may replace one invalid byte sequence with a different number of them."""

    def norm(text: str) -> str:
        return REPLACEMENTS.sub("\ufffd", text) if "\ufffd" in text else text

    wanted: dict[str, deque[int]] = defaultdict(deque)
    for i, raw in enumerate(raws):
        if raw is not None:
            wanted[norm(raw)].append(i)
    numbers: list[int | None] = [None] * len(raws)
    remaining = sum(len(slots) for slots in wanted.values())
    if not remaining:
        return numbers
    with _open_lines(path) as lines:
        for number, line in enumerate(lines, start=1):
            if header_skipped and number == 1:
                continue
            slots = wanted.get(norm(line.rstrip("\n")))
            if slots:
                numbers[slots.popleft()] = number
                remaining -= 1
                if not remaining:
                    break
    return numbers
