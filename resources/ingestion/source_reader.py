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
- the batch is read by ONE job (per MAX_READ_BYTES of text) whose rows come to the driver as
  Arrow — good rows with their date, bad rows with a reason and no date — grouped by (source,
  date) on the driver (Spark hands each object's rows over together, in order; a sort in
  Spark cost its job more than a stable sort of the driver's copy costs) and cut into one
  Parquet object per (source, date) with pyarrow; every count comes from those groups. Spark
  does not write the rows first: re-reading its Parquet cost more than the cut
  (bench/reader.py). An object too big for that alone goes through local Parquet, one task's
  output at a time.
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
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path
from typing import IO, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.ingestion.runner import SourceBatchResult, StagedFile
from resources.streams import StreamConfig

CORRUPT = "_corrupt_record"
INPUT_DIGITS = 7
REPLACEMENTS = re.compile("\ufffd+")
EPOCH = date(1970, 1, 1)
# Source text per Spark job whose rows come to the driver as Arrow: what one read may hold in
# memory (as Arrow, plus Spark's copy of the task results until they are handed over).
MAX_READ_BYTES = 256 << 20


def inspect_source(path: Path) -> tuple[str | None, int]:
    """(why the whole object can't be read or None, bytes of text it holds). Gzip is verified
    end to end here — a corrupt member would otherwise fail the Spark job for every object in
    the batch — and its size counted on the way."""
    try:
        with path.open("rb") as f:
            head = f.read(2)
        size = path.stat().st_size
    except OSError as exc:
        return f"cannot open: {exc.strerror or exc}", 0
    if path.name.endswith(".gz"):
        if head != b"\x1f\x8b":
            return "named .gz but is not gzip data", 0
        size = 0
        try:
            with gzip.open(path, "rb") as f:
                while block := f.read(1 << 20):
                    size += len(block)
        except (OSError, EOFError, zlib.error) as exc:
            return f"corrupt gzip: {exc}", 0
    return None, size


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


@dataclass(frozen=True)
class _ReadPlan:
    """A read's Spark expressions, select by select. Built once per reader: building them takes
    about 900 py4j round trips, and a run reads many chunks with the same ones."""

    lines: list[Any]  # from the file reader's rows: (src, raw) or (src, columns..., raw)
    keep: Any  # which of those are records at all, or None
    parsed: list[Any]  # (src, raw, columns..., _rejected)
    checked: list[Any]  # (src, raw, columns..., _reason)
    rows: list[Any]  # (src, dt, columns..., _reason, _raw)


def _read_plan(config: StreamConfig) -> _ReadPlan:
    """JSON lines: Spark's JSON reader parses with the declared types; `raw` is the text of a
    line it rejects, else null, and only such a line goes through the text parse, which names
    what is wrong (a line the typed parse rejects but the text parse accepts, a quoted number
    say, keeps its text-cast values). CSV: every line goes through the text parse."""
    from pyspark.sql import functions as F

    text_reason, text_typed = _text_reason_and_columns(config, F.col("raw"))
    if config.format == "jsonl":
        lines = [_source(), *config.column_names, F.col(CORRUPT).alias("raw")]
        keep = None
        rejected = F.col("raw").isNotNull()
        parsed = [
            "src",
            "raw",
            *(
                F.when(rejected, text_typed[c]).otherwise(F.col(c)).alias(c)
                for c in config.column_names
            ),
            F.when(rejected, text_reason).alias("_rejected"),
        ]
    else:
        lines = [_source(), F.col("value").alias("raw")]
        keep = F.trim("raw") != ""
        parsed = [
            "src",
            "raw",
            *(col.alias(name) for name, col in text_typed.items()),
            text_reason.alias("_rejected"),
        ]
    reason = (
        F.when(~F.is_valid_utf8("raw"), F.lit("invalid UTF-8"))
        .when(F.col("_rejected").isNotNull(), F.col("_rejected"))
        .otherwise(_check_reason(config))
    )
    dt = F.to_date(F.from_utc_timestamp(_event_time(config), config.timezone))
    ok = F.col("_reason").isNull()
    return _ReadPlan(
        lines=lines,
        keep=keep,
        parsed=parsed,
        checked=["src", "raw", *config.column_names, reason.alias("_reason")],
        rows=[
            "src",
            F.when(ok, dt).alias("dt"),
            *config.column_names,
            "_reason",
            F.when(~ok, F.make_valid_utf8("raw")).alias("_raw"),
        ],
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


def dictionary_columns(config: StreamConfig) -> list[str]:
    """The columns a table object dictionary-encodes. Dictionary pages pay off for repeated
    strings; a record id never repeats, and numbers and times rarely do in an event stream:
    hashing them cost a small object's write ~40% more CPU and made it bigger
    (bench/parquet_writes.py)."""
    return [c.name for c in config.columns if c.type == "string" and c.name != config.record_id]


class SourceReader:
    """Reads batches of one stream's source objects, one SparkSession for all of them."""

    def __init__(
        self, spark: Any, config: StreamConfig, max_read_bytes: int = MAX_READ_BYTES
    ) -> None:
        self.spark = spark
        self.config = config
        self.max_read_bytes = max_read_bytes
        self._skip_header = config.format == "csv" and config.csv_header
        self._dictionary = dictionary_columns(config)
        self._plan: _ReadPlan | None = None
        self._writing: Future[Any] | None = None  # the latest read's writes, maybe still going

    def read(
        self, files: dict[str, Path], staging: Path, attempt: str
    ) -> dict[str, SourceBatchResult]:
        """`start`, and wait for the staged files."""
        return self.start(files, staging, attempt).result()

    def start(
        self, files: dict[str, Path], staging: Path, attempt: str
    ) -> Future[dict[str, SourceBatchResult]]:
        """Read `files` (source key -> local path) and stage their table and quarantine rows.

        The Spark jobs run on this thread, one per `max_read_bytes` of (uncompressed) source
        text; writing what each returns happens on a writer thread, so the caller can start its
        next batch's Spark job meanwhile (bench/ingest.py: ~10% of a run). A read's rows wait
        for the previous read's writes before they are handed over, so at most two reads' rows
        are held at once. The future holds one result per source key; staged file names carry
        `attempt`, so nothing written here can be mistaken for another attempt's output.
        """
        results = {key: SourceBatchResult() for key in files}
        index: dict[int, str] = {}
        sizes: dict[int, int] = {}
        for i, (key, path) in enumerate(files.items()):
            problem, size = inspect_source(path)
            if problem is None:
                index[i], sizes[i] = key, size
            else:
                results[key].unreadable = problem
        out = staging / "out"
        out.mkdir(parents=True, exist_ok=True)
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-write")
        writes: list[Future[None]] = []
        try:
            for n, read in enumerate(_group_reads(sizes, self.max_read_bytes)):
                inputs = staging / f"in-{n}"
                inputs.mkdir(parents=True, exist_ok=True)
                for i in read:
                    path = files[index[i]]
                    gz = ".gz" if path.name.endswith(".gz") and not self._skip_header else ""
                    target = inputs / f"{i:0{INPUT_DIGITS}d}.txt{gz}"
                    _stage_input(path, target, self._skip_header)
                rows = self._rows(inputs)
                if sum(sizes[i] for i in read) <= self.max_read_bytes:
                    tables: Iterator[pa.Table] = iter([rows.toArrow()])
                else:  # one object, too big to hold in the driver
                    tables = _through_parquet(rows, staging / f"spill-{n}")
                if self._writing is not None:
                    wait([self._writing])
                self._writing = writer.submit(
                    self._write, tables, files, index, results, inputs, out, attempt
                )
                writes.append(self._writing)
            staged = writer.submit(_counted, results, writes)
        except BaseException:
            wait(writes)  # nothing may still write into `staging` once the caller cleans up
            raise
        finally:
            writer.shutdown(wait=False)
        return staged

    def _write(
        self,
        tables: Iterator[pa.Table],
        files: dict[str, Path],
        index: dict[int, str],
        results: dict[str, SourceBatchResult],
        inputs: Path,
        out: Path,
        attempt: str,
    ) -> None:
        """One object per run of a source's rows for a date; bad rows to quarantine."""
        bad: dict[int, tuple[list[str], list[str | None]]] = defaultdict(lambda: ([], []))
        for src, dt, run in _runs_by_source_and_date(tables):
            if dt is None:
                bad[src][0].extend(run.column("_reason").to_pylist())
                bad[src][1].extend(run.column("_raw").to_pylist())
                continue
            staged = results[index[src]].table_files
            target = out / f"{attempt}-{src}-{dt}-{len(staged)}.parquet"
            columns = run.select(self.config.column_names)
            pq.write_table(columns, target, use_dictionary=self._dictionary or False)
            staged.append(StagedFile(dt, target, run.num_rows, target.stat().st_size))
        for src, staged_file in self._quarantine(files, index, bad, inputs, out, attempt):
            results[index[src]].quarantine_files.append(staged_file)

    def _quarantine(
        self,
        files: dict[str, Path],
        index: dict[int, str],
        bad: dict[int, tuple[list[str], list[str | None]]],
        inputs: Path,
        out: Path,
        attempt: str,
    ) -> Iterator[tuple[int, StagedFile]]:
        """One quarantine object per source with bad records: source key, line, reason, text.
        `bad` is src -> (reasons, raw lines); the raw line of a JSON record that parsed but
        failed a check is not known yet (None) and is looked up here."""
        unseen = sorted(src for src, (_, raws) in bad.items() if None in raws)
        if unseen:
            again = [next(inputs.glob(f"{src:0{INPUT_DIGITS}d}.*")) for src in unseen]
            found = _lines_failing_checks(self.spark, self.config, again)
            for src in unseen:
                reasons, raws = bad[src]
                for i, (reason, raw) in enumerate(zip(reasons, raws, strict=True)):
                    if raw is None and found[src][reason]:
                        raws[i] = found[src][reason].popleft()
        for src, (reasons, raws) in bad.items():
            key = index[src]
            target = out / f"{attempt}-{src}-quarantine.parquet"
            lines = _line_numbers(files[key], raws, self._skip_header)
            table = {
                "source_key": pa.array([key] * len(raws), pa.string()),
                "line": pa.array(lines, pa.int64()),
                "reason": pa.array(reasons, pa.string()),
                "raw": pa.array(raws, pa.string()),
            }
            pq.write_table(pa.table(table), target)
            yield src, StagedFile("", target, len(raws), target.stat().st_size)

    def _rows(self, inputs: Path) -> Any:
        """(src, dt, columns..., _reason, _raw) of every object under `inputs`: a table row has
        its date (in the table's time zone) and no reason; a bad row has a reason, its text if
        known, and no date. Unsorted: `_runs_by_source_and_date` groups them."""
        if self._plan is None:
            self._plan = _read_plan(self.config)
        plan = self._plan
        if self.config.format == "jsonl":
            schema, options = _json_schema(self.config)
            lines = self.spark.read.schema(schema).options(**options).json(str(inputs))
        else:
            lines = self.spark.read.text(str(inputs))
        lines = lines.select(*plan.lines)
        if plan.keep is not None:
            lines = lines.where(plan.keep)
        return lines.select(*plan.parsed).select(*plan.checked).select(*plan.rows)


def _counted(
    results: dict[str, SourceBatchResult], writes: list[Future[None]]
) -> dict[str, SourceBatchResult]:
    """Once every write is done (the first failure is raised): rows read = written +
    quarantined, from the staged files themselves."""
    for write in writes:
        write.result()
    for result in results.values():
        if result.unreadable is None:
            result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
            written = sum(f.row_count for f in result.table_files)
            result.rows_read = written + result.rows_quarantined
    return results


def _group_reads(sizes: dict[int, int], max_read_bytes: int) -> Iterator[list[int]]:
    """Consecutive objects, as many per read as fit in `max_read_bytes` (at least one)."""
    read: list[int] = []
    read_bytes = 0
    for i, size in sizes.items():
        if read and read_bytes + size > max_read_bytes:
            yield read
            read, read_bytes = [], 0
        read.append(i)
        read_bytes += size
    if read:
        yield read


def _through_parquet(rows: Any, directory: Path) -> Iterator[pa.Table]:
    """The rows by way of local Parquet (written now, by this thread's Spark job), then one
    Spark task's output at a time: memory stays bounded by what one task writes, however big an
    object is. Cast to the types `toArrow` gives (Spark writes timestamps as INT96, which
    pyarrow reads as naive nanoseconds), so objects are alike whichever way they came."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(rows.schema, timezone="UTC")
    rows.write.parquet(str(directory))
    parts = sorted(directory.glob("part-*.parquet"))
    return (pq.read_table(part).cast(schema) for part in parts)


def _runs_by_source_and_date(
    tables: Iterator[pa.Table],
) -> Iterator[tuple[int, str | None, pa.Table]]:
    """(src, date or None for bad rows, rows) for each (src, dt) of each table, its rows in
    their order in the object. A table's rows are put in (src, dt) order first: a stable sort,
    nearly free where Spark already handed a source's rows over together (timsort finds runs),
    then one zero-copy slice per group. Tables are grouped on their own, so an object too big
    for one table may give several objects for a date."""
    for table in tables:
        if table.num_rows == 0:
            continue
        src = table.column("src").to_numpy().astype(np.int64)
        dated = pc.is_valid(table.column("dt")).to_numpy(zero_copy_only=False)
        days = pc.fill_null(table.column("dt").cast(pa.int32()), 0).to_numpy()
        # src < 10**INPUT_DIGITS < 2**24; bad rows (no date) first within a source
        key = (src << 33) | (dated.astype(np.int64) << 32) | (days.astype(np.int64) + 2**31)
        if (key[1:] < key[:-1]).any():
            order = np.argsort(key, kind="stable")
            key, table = key[order], table.take(pa.array(order))
        starts = [0, *(np.flatnonzero(key[1:] != key[:-1]) + 1).tolist(), len(key)]
        src, dated, days = key >> 33, (key >> 32) & 1, (key & 0xFFFFFFFF) - 2**31
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            dt = (EPOCH + timedelta(days=int(days[begin]))).isoformat() if dated[begin] else None
            yield int(src[begin]), dt, table.slice(begin, end - begin)


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
