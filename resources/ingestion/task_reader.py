"""Reading a chunk's work units in Spark tasks, the driver's half: plan, run, follow the schema,
and turn the tasks' metadata into each unit's `SourceBatchResult`.

The driver never touches a row. It cuts the units into parts (`split_plan`), ships them with the
stream's configuration in one Spark job (`spark.range(tasks).mapInArrow(split_task.map_tasks)`),
and gets back one metadata row per object written, object refused and field seen
(`split_task.RESULT_SCHEMA`). The table and quarantine objects are already at their final
URLs; the runner commits them. DataFrame API only: the same job runs on `local[*]`, a cluster
master and Spark Connect (the task code is shipped by `resources.spark.code_shipping`).

`schema_evolution: add`: a part holding fields outside the schema writes nothing and comes back
as `retry` with the fields; the driver records them as the stream's next schema version (types
widened over every object; first seen where the first object holding one has it) and reads
those parts again with it — at most `ADD_ATTEMPTS` times, the last try counting what is left
(a name another run gave another type) as `ignore` does.
"""

from __future__ import annotations

import logging
import os
import threading
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import partial
from typing import Any

from resources.ingestion.batch_results import ChunkRead, SourceBatchResult, StagedFile
from resources.ingestion.line_census import CENSUS_DDL, CensusJob, exact_ranges, map_census
from resources.ingestion.split_plan import (
    nominal_cuts,
    pack_tasks,
    range_parts,
    sequential_part,
    unit_parts,
)
from resources.ingestion.split_task import (
    CHUNK,
    FAILED,
    FIELDS,
    QUARANTINE,
    RESULT_DDL,
    RETRY,
    TABLE,
    Part,
    SplitJob,
    StoreAddress,
    fields_of,
    map_tasks,
)
from resources.ingestion.work_units import UnitObject
from resources.ledger.provenance import sources_of
from resources.schema.columns import ColumnSpec
from resources.schema.field_types import widen
from resources.schema.modes import ADD
from resources.schema.versions import SchemaOrigin, SchemaVersion
from resources.spark.progress import SparkWatch, watch_for
from resources.spark.session import SparkSettings
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

RecordSchema = Callable[[list[ColumnSpec], SchemaOrigin], SchemaVersion]
"""(columns, where first seen) -> the stream's first schema version holding them."""
ADD_ATTEMPTS = 3
Row = dict[str, Any]


@dataclass
class PartRead:
    """A part's metadata rows, the schema version it was written with, the columns its fields
    added to the schema (`add`)."""

    rows: list[Row]
    schema_version: int
    new_columns: list[str] = field(default_factory=list)


class TaskReader:
    """Reads one stream's units in Spark tasks, one session for all of them; follows the
    stream's schema as it evolves (the store's `record_schema`, bound to the stream). Each
    Spark job runs under `watch` (default: the session's, with `LEASEHOLD_SPARK_STALL_SECONDS`):
    one that makes no progress is cancelled and raises `SparkStalledError`."""

    def __init__(
        self,
        spark: Any,
        config: StreamConfig,
        stores: StoreAddress,
        record_schema: RecordSchema | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        cores: int | None = None,
        watch: SparkWatch | None = None,
    ) -> None:
        self.spark = spark
        if watch is None:
            settings = SparkSettings.from_env()
            watch = watch_for(spark, settings.stall_seconds, settings.remote)
        self.watch = watch
        self.config = config
        self.stores = stores
        self.record_schema = record_schema
        self.clock = clock
        self.cores = cores or os.cpu_count() or 1
        self._lock = threading.Lock()

    def read(
        self, reading: dict[str, list[UnitObject]], attempt: str
    ) -> dict[str, SourceBatchResult]:
        """Every object of every unit in `reading` (unit key -> its objects to read, in order):
        one result per unit, its objects written under names holding `attempt`."""
        parts = [p for unit, objects in reading.items() for p in unit_parts(unit, objects)]
        sizes = {o.key: o.size for objects in reading.values() for o in objects}
        read = self._run(parts, sizes, attempt)
        results = {unit: SourceBatchResult() for unit in reading}
        for part in parts:
            fill(results[part.unit], read[(part.unit, part.index)])
        for result in results.values():
            counted(result)
        return results

    def read_large(
        self, unit: str, obj: UnitObject, reached: dict[str, int], commit_bytes: int, attempt: str
    ) -> list[ChunkRead]:
        """A large object from where its commits reached (`offset`, `line`) to its end, in
        chunks of about `commit_bytes`, in order: byte ranges read in parallel (uncompressed
        JSON lines) or one task reading in sequence (gzip, CSV). The last chunk read is
        `last` unless something failed, which its result then says."""
        offset, line = int(reached.get("offset", 0)), int(reached.get("line", 1))
        if obj.key.endswith(".gz") or self.config.format == "csv" or obj.size < 0:
            return self._read_in_sequence(unit, obj, offset, line, commit_bytes, attempt)
        cuts = nominal_cuts(offset, obj.size, commit_bytes)
        census = self._census(CensusJob(self.stores, obj.key, tuple(cuts)), len(cuts) - 1)
        ranges = exact_ranges(census, obj.size, line)
        parts = range_parts(unit, obj.key, [(start, end, first) for start, end, first, _ in ranges])
        read = self._run(parts, {obj.key: commit_bytes}, attempt)
        chunks = []
        for part, (_, end, _, next_line) in zip(parts, ranges, strict=True):
            result = SourceBatchResult()
            fill(result, read[(unit, part.index)])
            counted(result)
            chunks.append(ChunkRead(result, end, next_line, end >= obj.size))
        return chunks

    def _read_in_sequence(
        self, unit: str, obj: UnitObject, offset: int, line: int, commit_bytes: int, attempt: str
    ) -> list[ChunkRead]:
        part = sequential_part(unit, obj.key, offset, line, commit_bytes)
        read = self._run([part], {obj.key: max(obj.size, 0)}, attempt)[(unit, 0)]
        by_chunk: dict[int, list[Row]] = defaultdict(list)
        for row in read.rows:
            by_chunk[row["chunk"] or 0].append(row)
        chunks = []
        for n in sorted(k for k in by_chunk if k > 0):
            marks = [r for r in by_chunk[n] if r["kind"] == CHUNK]
            result = SourceBatchResult()
            fill(result, read, by_chunk[n])
            counted(result)
            if not marks:  # written, then refused or failed before its end was reported
                break
            chunks.append(ChunkRead(result, marks[0]["offset"], marks[0]["line"], marks[0]["last"]))
        failed = {r["key"]: r["reason"] for r in read.rows if r["kind"] == FAILED}
        if failed or not chunks or not chunks[-1].last:
            why = "; ".join(failed.values()) or "the read stopped before the object's end"
            chunks.append(ChunkRead(SourceBatchResult(unreadable=why), offset, line, False))
        return chunks

    # -- the Spark jobs --------------------------------------------------------------------

    def _run(self, parts: list[Part], sizes: dict[str, int], attempt: str) -> dict[Any, PartRead]:
        """Every part as read, by (unit, index), following `add` (module docstring)."""
        done: dict[tuple[str, int], PartRead] = {}
        added: dict[tuple[str, int], list[str]] = defaultdict(list)
        todo = parts
        quarantine_dt = self.clock().strftime("%Y-%m-%d")
        for attempt_n in range(ADD_ATTEMPTS + 1):
            config = self._current()
            follow = (
                config.schema_evolution == ADD
                and self.record_schema is not None
                and attempt_n < ADD_ATTEMPTS
            )
            tasks = tuple(pack_tasks(todo, sizes, self.cores))
            job = SplitJob(config, self.stores, attempt, quarantine_dt, tasks, follow)
            by_part: dict[tuple[str, int], list[Row]] = defaultdict(list)
            for row in self._tasks(job):
                by_part[(row["unit"], row["part"])].append(row)
            retry = []
            for p in todo:
                rows = by_part[(p.unit, p.index)]
                if any(r["kind"] == RETRY for r in rows):
                    retry.append(p)
                else:
                    done[(p.unit, p.index)] = PartRead(rows, config.schema_version)
            if not retry:
                break
            names = self._record([r for p in retry for r in by_part[(p.unit, p.index)]])
            for p in retry:
                added[(p.unit, p.index)] += names
            todo = retry
        for key, names in added.items():
            done[key].new_columns = names
        return done

    def _tasks(self, job: SplitJob) -> list[Row]:
        if not job.tasks:
            return []
        n = len(job.tasks)
        frame = self.spark.range(0, n, 1, n).mapInArrow(partial(map_tasks, job), RESULT_DDL)
        tasks = f"{n} task" + ("s" if n > 1 else "")
        with self.watch.job(f"reading {self.config.name}'s sources in {tasks}"):
            return list(frame.toArrow().to_pylist())

    def _census(self, job: CensusJob, n: int) -> list[Row]:
        frame = self.spark.range(0, n, 1, n).mapInArrow(partial(map_census, job), CENSUS_DDL)
        with self.watch.job(f"finding the line ends of {job.key!r}"):
            return list(frame.toArrow().to_pylist())

    # -- schema evolution ------------------------------------------------------------------

    def _current(self) -> StreamConfig:
        with self._lock:
            return self.config

    def _record(self, rows: list[Row]) -> list[str]:
        """Record the fields of `rows` as the next schema version and follow it; the names
        recorded (what the units' results list as new columns)."""
        assert self.record_schema is not None
        config = self._current()
        types: dict[str, str | None] = {}
        first: dict[str, tuple[str, str, int]] = {}
        for row in rows:
            if row["kind"] != FIELDS:
                continue
            for name, seen in fields_of(row["fields"]).fields.items():
                types[name] = widen(types.get(name), seen.type)
                where = (row["unit"], row["key"], seen.first_line)
                first[name] = min(first.get(name, where), where)
        columns = [
            ColumnSpec(n, "string" if config.format == "csv" else t or "string")
            for n, t in types.items()
        ]
        unit, key, line = min(first.values())
        version = self.record_schema(columns, SchemaOrigin(unit, key, line))
        log.info(  # news, not a fault: the run's story line says it once, by name
            "%s: schema version %d adds %s, first seen in %s",
            config.name,
            version.version,
            ", ".join(f"{c.name} {c.type}" for c in version.columns if c.name in version.added),
            SchemaOrigin(unit, key, line).describe(),
        )
        with self._lock:
            if version.version > self.config.schema_version:
                self.config = self.config.following(version)
        return list(types)


def fill(result: SourceBatchResult, read: PartRead, rows: list[Row] | None = None) -> None:
    """Add one part's metadata rows (`rows`: only those, of a chunk) to its unit's result."""
    schema_version = read.schema_version
    result.schema_version = max(result.schema_version, schema_version)
    for name in read.new_columns:
        if name not in result.new_columns:
            result.new_columns.append(name)
    for row in read.rows if rows is None else rows:
        kind = row["kind"]
        if kind == TABLE:
            result.table_files.append(
                StagedFile(
                    row["dt"],
                    row["url"],
                    row["rows"],
                    row["bytes"],
                    schema_version,
                    sources_of(row.get("sources")),
                )  # fmt: skip
            )
        elif kind == QUARANTINE:
            result.quarantine_files.append(
                StagedFile(row["dt"], row["url"], row["rows"], row["bytes"])
            )
        elif kind == FAILED:
            result.failed[row["key"]] = row["reason"]
        elif kind == FIELDS:
            for name, seen in fields_of(row["fields"]).fields.items():
                result.unknown_fields[name] = result.unknown_fields.get(name, 0) + seen.records


def counted(result: SourceBatchResult) -> None:
    """Rows read = written + quarantined, from what the tasks wrote; a unit of which nothing
    could be read is `unreadable`, with why."""
    if result.failed and not result.table_files and not result.quarantine_files:
        reasons = list(result.failed.items())
        result.unreadable = (
            reasons[0][1]
            if len(reasons) == 1
            else "; ".join(f"{key}: {why}" for key, why in reasons)
        )
        return
    result.rows_quarantined = sum(f.row_count for f in result.quarantine_files)
    result.rows_read = sum(f.row_count for f in result.table_files) + result.rows_quarantined
