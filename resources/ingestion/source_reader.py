"""Read a batch of source objects with Spark: table rows by date, bad records to quarantine.

One read covers every object of the batch: a run ingests many partitions, and a Spark job per
object would cost more than the data. Per `MAX_READ_BYTES` of source text, ONE Spark job reads
the staged objects (`source_files`) with the expressions of `read_plan` (Spark's JSON reader
with the declared types, a text parse only of the lines it rejects; CSV as JSON), and its rows
come to the driver as Arrow: good rows with their date, bad rows with a reason and no date. A
writer thread cuts them into one Parquet object per (work unit, date) (`table_objects`) and
writes the bad ones to one quarantine object per unit (`quarantine`); every count comes from
those staged objects. Each read is split into a few tasks per core (`read_splits`): with
Spark's session-wide split size a 256 MiB read made 3 tasks on 2 cores, one of them alone.
The rows are grouped on the driver, not sorted by Spark (Spark hands each object's rows over
together, in order, so a stable sort of the driver's copy is nearly free), and Spark does not
write them first (pyarrow would only decode its Parquet again): both were measured slower
(BENCHMARKS.md, "Spark read of one chunk" and "Ingestion"). An object too big for the driver
goes through local Parquet, one task's output at a time.

A whole object that cannot be read (missing, not gzip though named `.gz`, corrupt gzip, a CSV
header naming no usable columns) is found in Python before Spark sees it, and reported in its
unit's `failed`: the caller commits the unit's other objects and closes the unit with backoff
for that one, instead of losing the batch to one bad file.

DataFrame API only (no RDDs, no SparkContext): the same code runs over Spark Connect.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion.csv_records import CsvHeaderError, stage_csv
from resources.ingestion.quarantine import BadRows, write_quarantine
from resources.ingestion.read_plan import ReadPlan, json_schema, read_plan
from resources.ingestion.runner import SourceBatchResult
from resources.ingestion.source_files import INPUT_DIGITS, inspect_source, stage_input
from resources.ingestion.table_objects import (
    dictionary_columns,
    runs_by_source_and_date,
    write_table_object,
)
from resources.spark.session import read_splits
from resources.streams import StreamConfig

# Source text per Spark job whose rows come to the driver as Arrow: what one read may hold in
# memory (as Arrow, plus Spark's copy of the task results until they are handed over).
MAX_READ_BYTES = 256 << 20


class SourceReader:
    """Reads batches of one stream's source objects, one SparkSession for all of them."""

    def __init__(
        self, spark: Any, config: StreamConfig, max_read_bytes: int = MAX_READ_BYTES
    ) -> None:
        self.spark = spark
        self.config = config
        self.max_read_bytes = max_read_bytes
        self._csv = config.format == "csv"
        self._dictionary = dictionary_columns(config)
        self._plan: ReadPlan | None = None
        self._writing: Future[Any] | None = None  # the latest read's writes, maybe still going

    def read(
        self,
        files: dict[str, Path],
        staging: Path,
        attempt: str,
        groups: dict[str, str] | None = None,
        line_offsets: dict[str, int] | None = None,
    ) -> dict[str, SourceBatchResult]:
        """`start`, and wait for the staged files."""
        return self.start(files, staging, attempt, groups, line_offsets).result()

    def start(
        self,
        files: dict[str, Path],
        staging: Path,
        attempt: str,
        groups: dict[str, str] | None = None,
        line_offsets: dict[str, int] | None = None,
    ) -> Future[dict[str, SourceBatchResult]]:
        """Read `files` (source key -> local path) and stage their table and quarantine rows,
        cut per group: `groups` maps each source key to its work unit's key (default: each
        source on its own). `line_offsets` shifts a file's line numbers: a chunk of a large
        object numbers its lines as the object does (a CSV chunk's records are numbered so when
        staged, a JSON chunk's quarantined lines when found).

        The Spark jobs run on this thread, one per `max_read_bytes` of (uncompressed) source
        text; writing what each returns happens on a writer thread, so the caller can start its
        next batch's Spark job meanwhile. A read's rows wait
        for the previous read's writes before they are handed over, so at most two reads' rows
        are held at once. The future holds one result per source key; staged file names carry
        `attempt`, so nothing written here can be mistaken for another attempt's output. The
        future holds one result per group.
        """
        groups = groups or {key: key for key in files}
        results = {groups[key]: SourceBatchResult() for key in files}
        index: dict[int, str] = {}
        sizes: dict[int, int] = {}
        for i, (key, path) in enumerate(files.items()):
            problem, size = inspect_source(path)
            if problem is None:
                index[i], sizes[i] = key, size
            else:
                results[groups[key]].failed[key] = problem
        out = staging / "out"
        out.mkdir(parents=True, exist_ok=True)
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-write")
        writes: list[Future[None]] = []
        try:
            for n, read in enumerate(_group_reads(sizes, self.max_read_bytes)):
                inputs = staging / f"in-{n}"
                inputs.mkdir(parents=True, exist_ok=True)
                for i in read:
                    key = index[i]
                    path = files[key]
                    if self._csv:
                        target = inputs / f"{i:0{INPUT_DIGITS}d}.txt"
                        problem = self._stage_csv(path, target, (line_offsets or {}).get(key, 0))
                        if problem is not None:
                            results[groups[key]].failed[key] = problem
                        continue
                    gz = ".gz" if path.name.endswith(".gz") else ""
                    stage_input(path, inputs / f"{i:0{INPUT_DIGITS}d}.txt{gz}")
                rows = self._rows(inputs)
                read_bytes = sum(sizes[i] for i in read)
                with read_splits(self.spark, read_bytes, len(read)):
                    if read_bytes <= self.max_read_bytes:
                        tables: Iterator[pa.Table] = iter([rows.toArrow()])
                    else:  # one object, too big to hold in the driver
                        tables = _through_parquet(rows, staging / f"spill-{n}")
                if self._writing is not None:
                    wait([self._writing])
                self._writing = writer.submit(
                    self._write,
                    tables,
                    files,
                    index,
                    groups,
                    line_offsets or {},
                    results,
                    inputs,
                    out,
                    attempt,
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
        groups: dict[str, str],
        line_offsets: dict[str, int],
        results: dict[str, SourceBatchResult],
        inputs: Path,
        out: Path,
        attempt: str,
    ) -> None:
        """One object per (group, date) of each table's rows, the group's sources in their
        order; bad rows to quarantine."""
        bad: BadRows = defaultdict(lambda: ([], []))
        known_lines: dict[int, list[int]] = defaultdict(list)  # CSV: each bad row carries its line
        for table in tables:  # one at a time: a spilled object's tables don't all fit at once
            runs: dict[tuple[str, str], list[pa.Table]] = defaultdict(list)
            for src, dt, run in runs_by_source_and_date(iter([table])):
                if dt is None:
                    bad[src][0].extend(run.column("_reason").to_pylist())
                    bad[src][1].extend(run.column("_raw").to_pylist())
                    if self._csv:
                        known_lines[src].extend(run.column("_line").to_pylist())
                else:
                    runs[(groups[index[src]], dt)].append(run)
            for (group, dt), parts in runs.items():
                staged = results[group].table_files
                n = len(staged)
                target = out / f"{attempt}-{_digest(group)}-{dt}-{n}.parquet"
                rows = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
                staged.append(
                    write_table_object(rows, dt, target, self.config.column_names, self._dictionary)
                )
        quarantined = write_quarantine(
            self.spark,
            self.config,
            files,
            index,
            bad,
            inputs,
            out,
            attempt,
            known_lines,
            groups,
            line_offsets,
        )
        for group, staged_file in quarantined:
            results[group].quarantine_files.append(staged_file)

    def _stage_csv(self, path: Path, target: Path, shift: int) -> str | None:
        """Stage a CSV object as JSON lines, numbered as its object numbers them (`shift`: a
        chunk's), or say why it cannot be read."""
        try:
            stage_csv(path, target, self.config, first_line=1 + shift)
        except CsvHeaderError as exc:
            target.unlink(missing_ok=True)
            return str(exc)
        except OSError as exc:
            target.unlink(missing_ok=True)
            return f"cannot read: {exc.strerror or exc}"
        return None

    def _rows(self, inputs: Path) -> Any:
        """`source_rows` with this reader's plan, built once."""
        if self._plan is None:
            self._plan = read_plan(self.config)
        return source_rows(self.spark, self.config, self._plan, inputs)


def source_rows(spark: Any, config: StreamConfig, plan: ReadPlan, inputs: Path) -> Any:
    """(src, dt, columns..., _reason, _raw) of every object under `inputs`: a table row has its
    date (in the table's time zone) and no reason; a bad row has a reason, its text if known,
    and no date. Unsorted: `runs_by_source_and_date` groups them. Public so that `leasehold
    init` tries an inferred stream on its sample with exactly the runtime's reading. A CSV
    stream's rows also have `_line`, a bad row's line number in its object."""
    schema, options = json_schema(config)
    lines = spark.read.schema(schema).options(**options).json(str(inputs))
    lines = lines.select(*plan.lines)
    rows = lines.select(*plan.parsed).select(*plan.checked).select(*plan.rows)
    if plan.final is not None:  # CSV
        rows = rows.withColumns(plan.final).drop(*plan.dropped)
    return rows


def _counted(
    results: dict[str, SourceBatchResult], writes: list[Future[None]]
) -> dict[str, SourceBatchResult]:
    """Once every write is done (the first failure is raised): rows read = written +
    quarantined, from the staged files themselves."""
    for write in writes:
        write.result()
    for result in results.values():
        if result.failed and not result.table_files and not result.quarantine_files:
            reasons = list(result.failed.items())
            result.unreadable = (
                reasons[0][1]
                if len(reasons) == 1
                else "; ".join(f"{key}: {why}" for key, why in reasons)
            )
        if result.unreadable is None:
            result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
            written = sum(f.row_count for f in result.table_files)
            result.rows_read = written + result.rows_quarantined
    return results


def _digest(group: str) -> str:
    """A file-name-safe stand-in for a unit's key (keys may hold any character)."""
    return hashlib.sha256(group.encode()).hexdigest()[:16]


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
