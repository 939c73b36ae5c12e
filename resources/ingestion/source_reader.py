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

import logging
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from resources.ingestion.batch_results import SourceBatchResult
from resources.ingestion.csv_records import (
    ERROR_KEY,
    LINE_KEY,
    RAW_KEY,
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
from resources.ingestion.read_plan import ReadPlan, read_plan
from resources.ingestion.read_staging import inspected, stage_read
from resources.ingestion.schema_following import (
    as_schema,
    columns_of,
    mistyped,
    non_numbers,
    read_again,
    refused_fields,
    with_columns,
    with_nulls,
)
from resources.ingestion.spark_rows import (
    counted,
    digest,
    group_reads,
    source_rows,
    through_parquet,
    typed,
)
from resources.ingestion.table_objects import (
    dictionary_columns,
    runs_by_source_and_date,
    write_table_object,
)
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
        cut per group (`groups`: source key -> its work unit's key; default, each on its own;
        `line_offsets`: a chunk of a large object numbers its lines as the object does). Spark
        jobs run on this thread, one per `max_read_bytes` of source text; their rows are
        written on a writer thread once the previous read's are (at most two reads' rows held
        at once), so the caller can start its next batch meanwhile. The future holds one result
        per group; staged names carry `attempt`, never mistaken for another attempt's output."""
        groups = groups or {key: key for key in files}
        results, index, sizes = inspected(files, groups)
        out = staging / "out"
        out.mkdir(parents=True, exist_ok=True)
        writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-write")
        counter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-count")
        writes: list[Future[None]] = []
        try:
            for n, read in enumerate(group_reads(sizes, self.max_read_bytes)):
                inputs = staging / f"in-{n}"
                staged_inputs, headers = stage_read(
                    read, inputs, files, index, groups, line_offsets or {}, results, self.config
                )
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
                    config, tables, found = self._rows(
                        batch, inputs, countable, staging / f"spill-{n}"
                    )
                excluded = self._apply_mode(config, found, batch)
                if self._writing is not None:
                    wait([self._writing])
                self._writing = writer.submit(
                    self._write, config, tables, batch, excluded, inputs, out, attempt
                )
                writes.append(self._writing)
            staged = writer.submit(counted, results, writes)
        except BaseException:
            wait(writes)  # nothing may still write into `staging` once the caller cleans up
            raise
        finally:
            counter.shutdown(wait=True, cancel_futures=True)
            writer.shutdown(wait=False)
        return staged

    def _rows(
        self, batch: _Batch, inputs: Path, countable: bool, spill: Path
    ) -> tuple[StreamConfig, Iterator[pa.Table], dict[int, ObjectFields]]:
        """(the version read with, the read's rows, the fields found outside it): as Arrow
        in one table, or — one object too big to hold in the driver, scanned before its
        read — by way of local Parquet under `spill`."""
        if countable:
            config, table, found = self._read_following(inputs, batch)
            return config, iter([table]), found
        config, found = self._scan_following(batch)
        rows = source_rows(self.spark, config, self._plan_of(config), inputs)
        return config, through_parquet(rows, spill), found

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
                target = out / f"{attempt}-{digest(group)}-{dt}-{n}.parquet"
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
        read (`read_again`) — at most a few times: a second read finds only fields another
        run gave another type, which stay out."""
        config = self._current()
        guessed = self._guessed(config, batch)
        reading = with_columns(config, columns_of(guessed, config))
        table = self._arrow(reading, inputs)
        found = {
            **guessed,
            **self._found(
                reading,
                batch,
                known_counts(table, typed(reading)),
                known=set(config.column_names),
                unproven=non_numbers(table, reading, config) | mistyped(table, reading, config),
            ),
        }
        for _ in range(ADD_ATTEMPTS):
            if not found or not self._added(config, found, batch):
                break
            config = self._current()
            redo = read_again(reading, config, found, table)
            if not redo:
                found = {}
                break
            again = self._arrow(config, [batch.staged[i] for i in redo])
            src = table.column("src")
            kept = table.filter(pc.invert(pc.is_in(src, pa.array(redo, src.type))))
            table = pa.concat_tables([as_schema(kept, again.schema), again])
            reading = config
            found = self._found(config, batch, known_counts(again, typed(config)), only=redo)
        return config, with_nulls(table, config), found

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
