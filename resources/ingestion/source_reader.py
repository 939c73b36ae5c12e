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
import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.ingestion.csv_records import (
    ERROR_KEY,
    LINE_KEY,
    RAW_KEY,
    CsvHeaderError,
    stage_csv,
)
from resources.ingestion.field_scan import (
    ObjectBytes,
    ObjectFields,
    count_bytes,
    first_record_fields,
    holds_only_known,
    known_counts,
    scan_fields,
)
from resources.ingestion.quarantine import BadRows, write_quarantine
from resources.ingestion.read_plan import ReadPlan, json_schema, read_plan
from resources.ingestion.runner import SourceBatchResult
from resources.ingestion.source_files import INPUT_DIGITS, inspect_source, stage_input
from resources.ingestion.table_objects import (
    dictionary_columns,
    runs_by_source_and_date,
    write_table_object,
)
from resources.schema.arrow import arrow_type
from resources.schema.columns import ColumnSpec
from resources.schema.field_types import widen
from resources.schema.modes import ADD, FAIL, RESCUE
from resources.schema.versions import SchemaOrigin, SchemaVersion
from resources.spark.session import read_splits
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

RecordSchema = Callable[[list[ColumnSpec], SchemaOrigin], SchemaVersion]
"""(columns, where first seen) -> the stream's first schema version holding them."""
ADD_ATTEMPTS = 3
CSV_KEYS = {LINE_KEY, RAW_KEY, ERROR_KEY}
"""What a staged CSV record carries beside its fields (`csv_records`)."""

# Source text per Spark job whose rows come to the driver as Arrow: what one read may hold in
# memory (as Arrow, plus Spark's copy of the task results until they are handed over).
MAX_READ_BYTES = 256 << 20


class SourceReader:
    """Reads batches of one stream's source objects, one SparkSession for all of them.

    Follows the stream's schema as it evolves: each read is checked for fields its columns do
    not hold (`field_scan`) and they are handled by the stream's `schema_evolution` mode —
    `add` records the new version through `record_schema` (the store's
    `CoordinationStore.record_schema`, bound to the stream) and reads the batch again with it;
    this reader then reads with that version from its next read on."""

    def __init__(
        self,
        spark: Any,
        config: StreamConfig,
        max_read_bytes: int = MAX_READ_BYTES,
        record_schema: RecordSchema | None = None,
    ) -> None:
        self.spark = spark
        self.config = config
        self.max_read_bytes = max_read_bytes
        self.record_schema = record_schema
        self._csv = config.format == "csv"
        self._plan: ReadPlan | None = None
        self._plan_columns: tuple[ColumnSpec, ...] = ()
        self._lock = threading.Lock()
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
        source on its own). `line_offsets` shifts a file's quarantine line numbers: a chunk of
        a large object numbers its lines as the object does.

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
        counter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-count")
        writes: list[Future[None]] = []
        try:
            for n, read in enumerate(_group_reads(sizes, self.max_read_bytes)):
                inputs = staging / f"in-{n}"
                inputs.mkdir(parents=True, exist_ok=True)
                staged_inputs: dict[int, Path] = {}
                headers: dict[int, list[str]] = {}
                for i in read:
                    key = index[i]
                    path = files[key]
                    target = inputs / _input_name(i, path, self._csv)
                    if self._csv:
                        shift = (line_offsets or {}).get(key, 0)
                        staged = self._stage_csv(path, target, shift)
                        if isinstance(staged, str):
                            results[groups[key]].failed[key] = staged
                            continue
                        headers[i] = staged
                    else:
                        stage_input(path, target)
                    staged_inputs[i] = target
                read_bytes = sum(sizes[i] for i in read)
                countable = read_bytes <= self.max_read_bytes
                batch = _Batch(
                    files,
                    index,
                    groups,
                    line_offsets or {},
                    staged_inputs,
                    results,
                    headers,
                    self._count_bytes(counter, staged_inputs) if countable else {},
                )
                with read_splits(self.spark, read_bytes, len(read)):
                    if countable:
                        config, table, found = self._read_following(inputs, batch)
                        tables: Iterator[pa.Table] = iter([table])
                    else:  # one object, too big to hold in the driver: scanned before
                        config, found = self._scan_following(batch)
                        rows = source_rows(self.spark, config, self._plan_of(config), inputs)
                        tables = _through_parquet(rows, staging / f"spill-{n}")
                excluded = self._apply_mode(config, found, batch)
                if self._writing is not None:
                    wait([self._writing])
                self._writing = writer.submit(
                    self._write, config, tables, batch, excluded, inputs, out, attempt
                )
                writes.append(self._writing)
            staged = writer.submit(_counted, results, writes)
        except BaseException:
            wait(writes)  # nothing may still write into `staging` once the caller cleans up
            raise
        finally:
            counter.shutdown(wait=True, cancel_futures=True)
            writer.shutdown(wait=False)
        return staged

    def _write(
        self,
        config: StreamConfig,
        tables: Iterator[pa.Table],
        batch: _Batch,
        excluded: set[int],
        inputs: Path,
        out: Path,
        attempt: str,
    ) -> None:
        """One object per (group, date) of each table's rows, the group's sources in their
        order; bad rows to quarantine; nothing of an `excluded` source (the mode refused it)."""
        files, index, groups, results = batch.files, batch.index, batch.groups, batch.results
        dictionary = dictionary_columns(config)
        bad: BadRows = defaultdict(lambda: ([], []))
        known_lines: dict[int, list[int]] = defaultdict(list)  # CSV: each bad row carries its line
        for table in tables:  # one at a time: a spilled object's tables don't all fit at once
            runs: dict[tuple[str, str], list[pa.Table]] = defaultdict(list)
            for src, dt, run in runs_by_source_and_date(iter([table])):
                if src in excluded:
                    continue
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
                    write_table_object(
                        rows, dt, target, config.column_names, dictionary, config.schema_version
                    )
                )
        quarantined = write_quarantine(
            self.spark,
            config,
            files,
            index,
            bad,
            inputs,
            out,
            attempt,
            known_lines,
            groups,
            batch.line_offsets,
        )
        for group, staged_file in quarantined:
            results[group].quarantine_files.append(staged_file)

    def _stage_csv(self, path: Path, target: Path, shift: int) -> list[str] | str:
        """Stage a CSV object as JSON lines, numbered as its object numbers them (`shift`: a
        chunk's): its header's names, or why it cannot be read."""
        try:
            return stage_csv(path, target, self.config, first_line=1 + shift).header
        except CsvHeaderError as exc:
            target.unlink(missing_ok=True)
            return str(exc)
        except OSError as exc:
            target.unlink(missing_ok=True)
            return f"cannot read: {exc.strerror or exc}"

    def _count_bytes(
        self, counter: ThreadPoolExecutor, staged: dict[int, Path]
    ) -> dict[int, Future[ObjectBytes]]:
        """The raw side of `field_scan`'s proof for each staged JSON object, counted on
        `counter` while Spark reads the same objects (nothing to count for CSV, whose header
        names its fields, or under rescue, whose read keeps them)."""
        if self._csv or self.config.schema_evolution == RESCUE:
            return {}
        return {i: counter.submit(count_bytes, path) for i, path in staged.items()}

    def _current(self) -> StreamConfig:
        with self._lock:
            return self.config

    def _plan_of(self, config: StreamConfig) -> ReadPlan:
        """The read plan of `config`, built once per list of columns (py4j round trips)."""
        with self._lock:
            if self._plan is None or self._plan_columns != config.columns:
                self._plan, self._plan_columns = read_plan(config), config.columns
            return self._plan

    def _read_following(
        self, inputs: Path, batch: _Batch
    ) -> tuple[StreamConfig, pa.Table, dict[int, ObjectFields]]:
        """The batch's rows as Arrow, read with the latest schema version this reader knows.
        With `add`, fields that objects' first records hold beyond it (`_guessed`) are read
        at once, as columns not yet recorded; the exact check after the read (`_found`) then
        names every field outside the recorded version, in every record, and they are recorded
        as the next version. Only objects whose rows do not stand as read are read again with
        it: holding a field the read did not have, or one whose recorded type is not the one
        read (`_read_again`) — at most a few times: a second read finds only fields another
        run gave another type, which stay out."""
        config = self._current()
        guessed = self._guessed(config, batch)
        reading = _with_columns(config, _columns_of(guessed, config))
        table = self._arrow(reading, inputs)
        found = {
            **guessed,
            **self._found(
                reading,
                batch,
                known_counts(table, _typed(reading)),
                known=set(config.column_names),
                unproven=_non_numbers(table, reading, config),
            ),
        }
        for _ in range(ADD_ATTEMPTS):
            if not found or not self._added(config, found, batch):
                break
            config = self._current()
            redo = _read_again(reading, config, found, table)
            if not redo:
                found = {}
                break
            again = self._arrow(config, [batch.staged[i] for i in redo])
            src = table.column("src")
            kept = table.filter(pc.invert(pc.is_in(src, pa.array(redo, src.type))))
            table = pa.concat_tables([_as_schema(kept, again.schema), again])
            reading = config
            found = self._found(config, batch, known_counts(again, _typed(config)), only=redo)
        return config, _with_nulls(table, config), found

    def _guessed(self, config: StreamConfig, batch: _Batch) -> dict[int, ObjectFields]:
        """`add` on JSON: src -> the fields outside `config` its object's first record holds
        (`first_record_fields`), for the objects holding any — read with the batch, so that a
        source that changed is read once, not read and then read again."""
        if self._csv or config.schema_evolution != ADD or self.record_schema is None:
            return {}
        known = set(config.column_names)
        guessed = {}
        for i, path in batch.staged.items():
            fields = first_record_fields(path, known, 1 + batch.line_offsets.get(batch.index[i], 0))
            if fields.fields:
                guessed[i] = fields
        return guessed

    def _arrow(self, config: StreamConfig, inputs: Path | list[Path]) -> pa.Table:
        return source_rows(self.spark, config, self._plan_of(config), inputs).toArrow()

    def _scan_following(self, batch: _Batch) -> tuple[StreamConfig, dict[int, ObjectFields]]:
        """`_read_following` for an object read by way of local Parquet: scanned before its
        read (there are no rows to count), the version recorded before the one read."""
        config = self._current()
        found = self._found(config, batch, {})
        if found and self._added(config, found, batch):
            config = self._current()
            found = self._found(config, batch, {})
        return config, found

    def _found(
        self,
        config: StreamConfig,
        batch: _Batch,
        expected: dict[int, int],
        only: list[int] | None = None,
        known: set[str] | None = None,
        unproven: set[int] | frozenset[int] = frozenset(),
    ) -> dict[int, ObjectFields]:
        """src -> the fields outside `known` (default: `config`'s columns) its object holds, for
        each object of the batch (of `only`, when given) holding any. `expected` is the proof's
        known side, counted with `config`'s columns; an `unproven` object is scanned anyway."""
        known = set(config.column_names) if known is None else known
        found: dict[int, ObjectFields] = {}
        if config.schema_evolution == RESCUE:
            return found  # the read itself keeps them, in `_rescued`
        for i, path in batch.staged.items():
            if only is not None and i not in only:
                continue
            if self._csv:  # the staged records' keys are exactly the header's names
                if set(batch.headers.get(i, ())) <= known:
                    continue
                known = known | CSV_KEYS
            elif (
                i not in unproven
                and i in batch.counted
                and holds_only_known(batch.counted[i].result(), expected.get(i))
            ):
                continue
            shift = 0 if self._csv else batch.line_offsets.get(batch.index[i], 0)
            fields = scan_fields(path, known, 1 + shift)
            if fields.fields:
                found[i] = fields
        return found

    def _added(self, config: StreamConfig, found: dict[int, ObjectFields], batch: _Batch) -> bool:
        """Under `add`: record the fields as the next schema version (their types widened
        over every object; first seen where the first object holding one has it) and follow
        it. False when there is nothing to do: another mode, or no store to record in."""
        if config.schema_evolution != ADD or self.record_schema is None:
            return False
        types: dict[str, str | None] = {}
        first: dict[str, tuple[int, int]] = {}
        for i, fields in sorted(found.items()):
            for name, seen in sorted(fields.fields.items(), key=lambda f: f[1].first_line):
                types[name] = widen(types.get(name), seen.type)
                first.setdefault(name, (i, seen.first_line))
        columns = [
            ColumnSpec(n, "string" if config.format == "csv" else t or "string")
            for n, t in types.items()
        ]
        src, line = min(first.values())
        key = batch.index[src]
        origin = SchemaOrigin(batch.groups[key], key, line)
        version = self.record_schema(columns, origin)
        log.info(  # news, not a fault: the run's story line says it once, by name
            "%s: schema version %d adds %s, first seen in %s",
            config.name,
            version.version,
            ", ".join(f"{c.name} {c.type}" for c in version.columns if c.name in version.added),
            origin.describe(),
        )
        with self._lock:
            if version.version > self.config.schema_version:
                self.config = self.config.following(version)
        for i in found:
            result = batch.results[batch.groups[batch.index[i]]]
            for name in found[i].fields:
                if name not in result.new_columns:
                    result.new_columns.append(name)
        return True

    def _apply_mode(
        self, config: StreamConfig, found: dict[int, ObjectFields], batch: _Batch
    ) -> set[int]:
        """Record what the read's mode does with the fields still outside its columns; the
        objects it keeps out of the table (`fail`)."""
        for result in batch.results.values():
            result.schema_version = config.schema_version
        excluded: set[int] = set()
        for i, fields in found.items():
            key = batch.index[i]
            result = batch.results[batch.groups[key]]
            if config.schema_evolution == FAIL:
                excluded.add(i)
                result.failed[key] = refused_fields(config, fields)
            else:  # ignore; add's leftovers: a name another run gave another type
                for name, seen in fields.fields.items():
                    result.unknown_fields[name] = result.unknown_fields.get(name, 0) + seen.records
        return excluded


def refused_fields(config: StreamConfig, fields: ObjectFields) -> str:
    """What `fail` says of an object: the fields, where each was first seen, the setting."""
    named = ", ".join(
        f"{name} ({seen.type}, first at line {seen.first_line})"
        for name, seen in sorted(fields.fields.items(), key=lambda f: f[1].first_line)
    )
    return (
        f"fields not in the schema: {named}; `schema_evolution: fail` keeps the object out — "
        f"set schema_evolution to add (or rescue, ignore) for stream {config.name} in "
        "streams.yaml to take it in"
    )


def _as_schema(rows: pa.Table, schema: pa.Schema) -> pa.Table:
    """`rows` with `schema`'s columns, by name: a column they lack (one a newer version added)
    as nulls of its type."""
    return pa.Table.from_arrays(
        [
            rows.column(f.name) if f.name in rows.column_names else pa.nulls(len(rows), f.type)
            for f in schema
        ],
        schema=schema,
    )


def _with_columns(config: StreamConfig, columns: list[ColumnSpec]) -> StreamConfig:
    """`config` also reading `columns` (not recorded: its version number stays)."""
    return replace(config, columns=(*config.columns, *columns)) if columns else config


def _columns_of(found: dict[int, ObjectFields], config: StreamConfig) -> list[ColumnSpec]:
    """The columns of the fields in `found`, each typed by its values in every object."""
    types: dict[str, str | None] = {}
    for fields in found.values():
        for name, seen in fields.fields.items():
            types[name] = widen(types.get(name), seen.type)
    return [ColumnSpec(n, t or "string") for n, t in types.items() if n not in config.column_names]


def _non_numbers(table: pa.Table, reading: StreamConfig, config: StreamConfig) -> set[int]:
    """Objects with NaN or an infinity in a double column read but not recorded: Spark reads
    the strings "NaN" and "Infinity" into a double column, so such a value may have been text
    — only the object's scan can say which type the field asks for."""
    recorded = set(config.column_names)
    suspects: set[int] = set()
    for column in reading.columns:
        if column.name in recorded or column.type != "double":
            continue
        values = table.column(column.name)
        odd = pc.fill_null(pc.or_(pc.is_nan(values), pc.is_inf(values)), False)
        suspects.update(table.column("src").filter(odd).to_pylist())
    return suspects


def _read_again(
    reading: StreamConfig, config: StreamConfig, found: dict[int, ObjectFields], table: pa.Table
) -> list[int]:
    """The objects whose rows, read with `reading`, are not what `config` (the version now
    recorded) reads: each one holding a field that `reading` did not read with its recorded
    type — as found, or (read, so cleared by the proof) as its rows show."""
    read_as = {c.name: c.type for c in reading.columns}
    recorded = {c.name: c.type for c in config.columns}
    retyped = {n for n, t in recorded.items() if n in read_as and read_as[n] != t}
    again = {
        i
        for i, fields in found.items()
        if any(read_as.get(name) != recorded.get(name) for name in fields.fields)
    }
    src = table.column("src")
    for name in retyped:
        again.update(src.filter(pc.is_valid(table.column(name))).to_pylist())
    return sorted(again)


def _with_nulls(table: pa.Table, config: StreamConfig) -> pa.Table:
    """`table` with every column of `config`, one it lacks (another run's, that none of these
    objects holds) as nulls."""
    for column in config.columns:
        if column.name not in table.column_names:
            table = table.append_column(
                column.name, pa.nulls(table.num_rows, arrow_type(column.type))
            )
    return table


def _typed(config: StreamConfig) -> list[tuple[str, str]]:
    return [(c.name, c.type) for c in config.columns]


def _input_name(i: int, path: Path, csv: bool) -> str:
    """A staged input's name: its batch index (rows map back by it), `.gz` kept for Spark (a
    CSV object is staged as uncompressed JSON lines)."""
    gz = ".gz" if path.name.endswith(".gz") and not csv else ""
    return f"{i:0{INPUT_DIGITS}d}.txt{gz}"


@dataclass
class _Batch:
    """One read's objects: source key by index, unit by source key, quarantine line shifts,
    staged inputs by index, the per-unit results being filled, (CSV) headers and (JSON) byte
    counts."""

    files: dict[str, Path]
    index: dict[int, str]
    groups: dict[str, str]
    line_offsets: dict[str, int]
    staged: dict[int, Path]
    results: dict[str, SourceBatchResult]
    headers: dict[int, list[str]]
    """CSV: each staged object's header names."""
    counted: dict[int, Future[ObjectBytes]]
    """JSON: each staged object's `count_bytes`, being counted beside the read."""


def source_rows(spark: Any, config: StreamConfig, plan: ReadPlan, inputs: Path | list[Path]) -> Any:
    """(src, dt, columns..., _reason, _raw) of every object under `inputs` (a directory, or a
    list of staged objects): a table row has its date (in the table's time zone) and no reason;
    a bad row has a reason, its text if known, and no date. Unsorted: `runs_by_source_and_date`
    groups them. Public so that `leasehold init` tries an inferred stream on its sample with
    exactly the runtime's reading. A CSV stream's rows also have `_line`, a bad row's line
    number in its object."""
    paths = [str(p) for p in inputs] if isinstance(inputs, list) else str(inputs)
    if plan.records is None:
        schema, options = json_schema(config)
        lines = spark.read.schema(schema).options(**options).json(paths)
    else:
        lines = spark.read.text(paths)
    lines = lines.select(*plan.lines)
    if plan.keep is not None:
        lines = lines.where(plan.keep)
    if plan.records is not None:
        lines = lines.select(*plan.records)
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
