"""What one Spark task does with its share of a chunk (executor side: no Spark, no driver).

A chunk's work units are cut into parts (`split_plan`): a part is consecutive objects of one
unit, or one byte range of a large object, or one large object read in sequence. A task takes a
few parts. For each it fetches the objects from where they are — the stream's object store,
S3 by ranged GETs or a local path — parses them (`record_parser`), applies the stream's
schema-evolution mode to the fields outside its schema, and writes **straight to the final
object stores**: one Parquet table object per (part, date) and one quarantine object per part,
under names unique to this task attempt. It returns only metadata rows (`RESULT_SCHEMA`): what
it wrote (URL, date, rows, bytes), what it could not read and why, the fields it saw outside
the schema. No row goes back to the driver, and nothing here reads the driver's disk.

A task attempt that dies leaves objects nobody names: the driver commits only what the attempt
Spark reports as successful returned, and garbage collection takes the rest after its safety
delay.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import shutil
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.errors import LeaseholdError
from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.field_scan import ObjectFields
from resources.ingestion.record_parser import ParsedRecords, parse_csv, parse_json_lines
from resources.ingestion.source_files import ChunkReader
from resources.ingestion.table_objects import write_table_object
from resources.ledger.provenance import sources_json
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.schema.modes import ADD, FAIL
from resources.spark.executor_host import scratch_root
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

TABLE, QUARANTINE, FAILED, FIELDS, RETRY, CHUNK = (
    "table",
    "quarantine",
    "failed",
    "fields",
    "retry",
    "chunk",
)
RESULT_SCHEMA = pa.schema(
    [
        ("part", pa.int64()),
        ("unit", pa.string()),
        ("kind", pa.string()),
        ("key", pa.string()),
        ("chunk", pa.int64()),
        ("url", pa.string()),
        ("dt", pa.string()),
        ("rows", pa.int64()),
        ("bytes", pa.int64()),
        ("reason", pa.string()),
        ("fields", pa.string()),
        ("offset", pa.int64()),
        ("line", pa.int64()),
        ("last", pa.bool_()),
        ("sources", pa.string()),
    ]
)
"""One row per thing a task did: `table`/`quarantine` (an object it wrote: url, dt, rows,
bytes; a table object's source objects as `sources`), `failed` (an object it could not read, or
one `schema_evolution: fail` refused: key, reason), `fields` (an object's fields outside the
schema, as JSON: key, fields), `retry` (a part holding fields `add` records first: nothing
written), `chunk` (a large object read in sequence: where the chunk ends — offset, line — and
whether it is the last)."""
SPARK_TYPES = {pa.int64(): "bigint", pa.bool_(): "boolean", pa.string(): "string"}
RESULT_DDL = ", ".join(f"{f.name} {SPARK_TYPES[f.type]}" for f in RESULT_SCHEMA)


@dataclass(frozen=True)
class Piece:
    """One source object of a part, or the byte range `start`..`end` of one (`end` None: to its
    end). `first_line` numbers its first line as the object does. `commit_bytes`: a large
    object read in sequence (gzip, CSV) and cut into chunks of about that much text, each
    written and reported on its own so the driver commits them in order."""

    key: str
    start: int = 0
    end: int | None = None
    first_line: int = 1
    commit_bytes: int | None = None


@dataclass(frozen=True)
class Part:
    """A unit's objects written together: the output of a part is one table object per date
    (per chunk, for a large object read in sequence)."""

    unit: str
    index: int
    pieces: tuple[Piece, ...]


@dataclass(frozen=True)
class StoreAddress:
    """Where a task finds the source and writes the table and the quarantine: URLs, and the S3
    endpoint and region (credentials are the executor's own: its role or environment)."""

    source: str
    table: str
    quarantine: str
    endpoint_url: str | None = None
    region: str | None = None

    @classmethod
    def of(cls, config: StreamConfig, endpoint_url: str | None, region: str | None) -> StoreAddress:
        """A stream's stores, reached with the lake's S3 endpoint and region."""
        return cls(config.source, config.table, config.quarantine, endpoint_url, region)

    def open(self, url: str) -> ObjectStore:
        return _store(url, self.endpoint_url, self.region)


@dataclass(frozen=True)
class SplitJob:
    """Everything a task needs, shipped with it: the stream as read (its schema version), the
    stores, the attempt (in every name written), the quarantine's date, the parts by task, and
    whether fields outside the schema are handed back for `add` (`follow_new_fields`) or, on a
    last try, counted as `ignore` counts them."""

    config: StreamConfig
    stores: StoreAddress
    attempt: str
    quarantine_dt: str
    tasks: tuple[tuple[Part, ...], ...]
    follow_new_fields: bool = True


_STORES: dict[tuple[str, str | None, str | None], ObjectStore] = {}


def _store(url: str, endpoint_url: str | None, region: str | None) -> ObjectStore:
    """One store per URL per Python worker: Spark reuses its workers, and an S3 client's set-up
    costs more than a small object's GET."""
    key = (url, endpoint_url, region)
    if key not in _STORES:
        _STORES[key] = object_store_for(url, endpoint_url=endpoint_url, region=region)
    return _STORES[key]


def map_tasks(job: SplitJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow`'s function: the input is the task numbers (`spark.range`'s `id`)."""
    for batch in batches:
        for n in batch.column("id").to_pylist():
            rows = run_task(job, int(n))
            yield pa.RecordBatch.from_pylist(rows, schema=RESULT_SCHEMA)


def run_task(job: SplitJob, n: int) -> list[dict[str, Any]]:
    """Every part of task `n`, in order: the metadata rows of what was done."""
    token = uuid.uuid4().hex[:8]  # this attempt's: a retried task never overwrites a name
    scratch = Path(tempfile.mkdtemp(prefix="leasehold-task-", dir=scratch_root()))
    try:
        rows: list[dict[str, Any]] = []
        for part in job.tasks[n]:
            rows += _PartRun(job, part, token, scratch).run()
        return rows
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


class _PartRun:
    """One part: read its pieces, apply the schema mode, write its objects."""

    def __init__(self, job: SplitJob, part: Part, token: str, scratch: Path) -> None:
        self.job, self.part, self.token, self.scratch = job, part, token, scratch
        self.config = job.config
        self.rows: list[dict[str, Any]] = []
        self.chunk = 0  # of a large object read in sequence: the chunk being read, from 1

    def _row(self, kind: str, **values: Any) -> None:
        part = self.part
        self.rows.append(
            {"part": part.index, "unit": part.unit, "kind": kind, "chunk": self.chunk, **values}
        )

    def run(self) -> list[dict[str, Any]]:
        parsed: list[tuple[str, ParsedRecords]] = []
        for piece in self.part.pieces:
            if piece.commit_bytes is not None:
                self._in_sequence(piece)
                continue
            got = self._parsed(piece, self._fetch)
            if got is not None:
                parsed.append((piece.key, got))
        kept = self._apply_mode(parsed)
        if kept is not None:
            self._write(kept)
        return self.rows

    # -- reading ---------------------------------------------------------------------------

    def _fetch(self, piece: Piece) -> bytes:
        """The piece's text: its range, or the whole object (gzip decompressed)."""
        source = self.job.stores.open(self.job.stores.source)
        if piece.end is not None or piece.start:
            end = piece.end if piece.end is not None else (1 << 62)
            return source.read_range(piece.key, piece.start, end)
        data = source.get_bytes(piece.key)
        if piece.key.endswith(".gz"):
            if data[:2] != b"\x1f\x8b":
                raise _Unreadable("named .gz but is not gzip data")
            try:
                return gzip.decompress(data)
            except (OSError, EOFError, zlib.error) as exc:
                raise _Unreadable(f"corrupt gzip: {exc}") from exc
        return data

    def _parsed(self, piece: Piece, fetch: Any) -> ParsedRecords | None:
        """The piece parsed, or None (reported `failed`) when it cannot be read at all."""
        try:
            data = fetch(piece)
        except _Unreadable as exc:
            self._row(FAILED, key=piece.key, reason=str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - any failure to fetch: the unit retries it
            log.warning("cannot fetch %r: %s", piece.key, exc)
            self._row(FAILED, key=piece.key, reason=f"cannot fetch: {exc}")
            return None
        try:
            return self._parse(data, piece.first_line)
        except LeaseholdError as exc:  # a whole object that cannot be read (a CSV header)
            self._row(FAILED, key=piece.key, reason=str(exc))
            return None

    def _parse(self, data: bytes, first_line: int) -> ParsedRecords:
        if self.config.format == "csv":
            return parse_csv(data, self.config, first_line)
        return parse_json_lines(data, self.config, first_line)

    def _in_sequence(self, piece: Piece) -> None:
        """A large object read in sequence (gzip cannot seek; a CSV record may span lines):
        copied to the executor's disk, then cut at line (record) ends into chunks of
        `commit_bytes`, each written and reported as chunk 1, 2, ... with where it ends."""
        assert piece.commit_bytes is not None
        source = self.job.stores.open(self.job.stores.source)
        csv = CsvFormat.of(self.config) if self.config.format == "csv" else None
        try:
            local = source.local_copy(piece.key, self.scratch / "sources")
            chunks = ChunkReader(local, piece.start, piece.first_line, csv)
        except Exception as exc:  # noqa: BLE001 - any failure to read it: the unit retries it
            log.warning("cannot read %r at offset %d: %s", piece.key, piece.start, exc)
            self._row(FAILED, key=piece.key, reason=f"cannot read at offset {piece.start}: {exc}")
            return
        try:
            self._chunks(piece, chunks)
        finally:
            chunks.close()

    def _chunks(self, piece: Piece, chunks: ChunkReader) -> None:
        assert piece.commit_bytes is not None
        n = 0
        while True:
            n += 1
            self.chunk = n
            target = self.scratch / f"chunk-{n}.txt"
            try:
                cut = chunks.next(piece.commit_bytes, target)
            except (OSError, EOFError, zlib.error) as exc:
                reason = f"{piece.key}: cannot read at offset {chunks.offset}: {exc}"
                self._row(FAILED, key=piece.key, reason=reason)
                return
            shift = cut.first_line - 1 - cut.header_lines
            got = self._parsed(Piece(piece.key, first_line=1 + shift), partial(_read, target))
            target.unlink(missing_ok=True)
            if got is None:
                return
            kept = self._apply_mode([(piece.key, got)])
            if kept is None:
                return  # `add`: the driver records the fields and reads this again
            if not kept:
                return  # `fail` refused the object
            self._write(kept)
            self._row(CHUNK, key=piece.key, offset=cut.offset, line=cut.line, last=cut.last)
            if cut.last:
                return

    # -- the schema mode -------------------------------------------------------------------

    def _apply_mode(
        self, parsed: list[tuple[str, ParsedRecords]]
    ) -> list[tuple[str, ParsedRecords]] | None:
        """What the stream's mode does with the fields outside its schema: report them
        (`fields`); `fail` keeps their object out (`failed`); `add` writes nothing of the part
        and hands it back (`retry`, None) for the driver to record them first."""
        mode = self.config.schema_evolution
        holding = [(key, p) for key, p in parsed if p.fields.fields]
        if mode == FAIL:
            for key, p in holding:
                self._row(FAILED, key=key, reason=refused_fields(self.config, p.fields))
            return [(key, p) for key, p in parsed if not p.fields.fields]
        for key, p in holding:
            self._row(FIELDS, key=key, fields=fields_json(p.fields))
        if mode == ADD and holding and self.job.follow_new_fields:
            self._row(RETRY)
            return None
        return parsed

    # -- writing ---------------------------------------------------------------------------

    def _write(self, parsed: list[tuple[str, ParsedRecords]]) -> None:
        """One table object per date of the pieces' rows (in their order), one quarantine
        object of their bad records."""
        holding = [(key, p.rows) for key, p in parsed if p.rows.num_rows]
        if holding:
            tables = [rows for _, rows in holding]
            pieces = np.repeat(np.arange(len(holding)), [t.num_rows for t in tables])
            self._write_table(
                pa.concat_tables(tables) if len(tables) > 1 else tables[0],
                [key for key, _ in holding],
                pieces,
            )
        bad = [
            p.bad.add_column(0, "source_key", pa.array([key] * p.bad.num_rows, pa.string()))
            for key, p in parsed
            if p.bad.num_rows
        ]
        if bad:
            self._write_quarantine(pa.concat_tables(bad))

    def _name(self, suffix: str) -> str:
        part, job = self.part, self.job
        return f"{job.attempt}-{digest(part.unit)}-{part.index}-{self.chunk}-{self.token}{suffix}"

    def _write_table(self, rows: pa.Table, keys: list[str], pieces: np.ndarray) -> None:
        """One object per date, each date's rows in their order (a stable sort), with the
        source objects they came from (`pieces`: per row, its object among `keys`)."""
        config = self.config
        order = pc.sort_indices(rows, sort_keys=[("dt", "ascending")])
        rows, pieces = rows.take(order), pieces[order.to_numpy()]
        days = rows.column("dt").combine_chunks()
        n = rows.num_rows
        changes = pc.indices_nonzero(pc.not_equal(days.slice(1), days.slice(0, n - 1)))
        starts = [0, *(i + 1 for i in changes.to_pylist()), n]
        table = self.job.stores.open(self.job.stores.table)
        dictionary = config.dictionary_columns
        for begin, end in zip(starts[:-1], starts[1:], strict=True):
            dt = days[begin].as_py().isoformat()
            local = self.scratch / f"table-{dt}.parquet"
            size = write_table_object(
                rows.slice(begin, end - begin),
                local,
                config.column_names,
                dictionary,
                config.schema_version,
            )
            url = table.move_file(local, f"dt={dt}/{self._name('.parquet')}")
            at, counts = np.unique(pieces[begin:end], return_counts=True)  # rows keep piece order
            sources = tuple((keys[i], int(c)) for i, c in zip(at.tolist(), counts, strict=True))
            self._row(
                TABLE, url=url, dt=dt, rows=end - begin, bytes=size, sources=sources_json(sources)
            )

    def _write_quarantine(self, bad: pa.Table) -> None:
        bad = bad.select(["source_key", "line", "reason", "raw"])
        local = self.scratch / "quarantine.parquet"
        pq.write_table(bad, local)
        size = local.stat().st_size
        store = self.job.stores.open(self.job.stores.quarantine)
        dt = self.job.quarantine_dt
        url = store.move_file(local, f"dt={dt}/{self._name('-quarantine.parquet')}")
        self._row(QUARANTINE, url=url, dt=dt, rows=bad.num_rows, bytes=size)


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


def digest(unit: str) -> str:
    """A file-name-safe stand-in for a unit's key (keys may hold any character)."""
    return hashlib.sha256(unit.encode()).hexdigest()[:16]


def _read(path: Path, _: Piece) -> bytes:
    return path.read_bytes()


class _Unreadable(Exception):
    """A whole object that cannot be read, and why (the unit retries it)."""


def fields_json(fields: ObjectFields) -> str:
    """An object's fields outside the schema, as a result row carries them."""
    return json.dumps(
        {name: [seen.type, seen.first_line, seen.records] for name, seen in fields.fields.items()}
    )


def fields_of(text: str) -> ObjectFields:
    """`fields_json` read back."""
    from resources.ingestion.field_scan import FieldSeen

    return ObjectFields(
        {
            name: FieldSeen(records=records, type=typ, first_line=first)
            for name, (typ, first, records) in json.loads(text).items()
        }
    )
