"""`MergeWriter`: the merge itself — exact ledger paths in, one sorted Parquet object out.

A merge is one sort of at most `merge.max_bytes` of Parquet, inputs that ingestion wrote on this
machine. When their rows fit `arrow_max_bytes` in memory, pyarrow reads, sorts and writes them
in this process: 2.5x faster than the Spark job below (3 dates of 700 objects, 1.19 M rows each,
merged on 2 threads: 2.7-3.0 s against 7.3 s warm, BENCHMARKS.md "Merges in pyarrow"), and no
SparkSession is started for it. Otherwise (rows that would not fit) Spark does it, spilling to
disk as it sorts. Under a dedupe policy (`config.dedupe`) every merge is pyarrow's, whatever its
size: keeping one row per key of the range needs the rows in commit order (the rewritten merged
object, then the small objects by id), which Spark's read of many files does not keep; such a
merge holds its range as Arrow (about 4x `merge.max_bytes`). Its object records the rows it left
out in its metadata (`leasehold.dedupe.dropped`, with those of the object it rewrites). Under
`first`, the small objects of a range that the current publication covers are merged from what
it serves for them (a `ServedRange`): their rows are each key's first record already; only the
range's objects committed since have their ids grouped and looked up in its key index
(`after_served`, `MergeRunner`).

Schema versions (docs/schema-evolution.md). Each `write` asks `follow` for the stream's latest
version once its inputs are decided (the runner decided them from the ledger before calling),
so no input holds a column the merge would not write. The version is the call's own: it is
passed down, never stored on the writer, which the runner's merge threads share. Both paths
read every input by column name against that version's columns — a column an older input lacks
is null, never a reason to start Spark:
* pyarrow: `resources.schema.arrow.read_by_name` per input. An input holding one of the
  columns with another type (which no version ever does: columns are never retyped, so it was
  not written by leasehold, or its version history was lost) fails the merge with a
  `MergeWriteError` naming the input and the column: Spark would either refuse it too or cast
  it silently, and a merge must not change a value.
* Spark: the version's columns as the reader's schema (below), which reads by name.
The merged object carries `leasehold.schema_version` = the version merged to, on both paths.
pyarrow writes it as the table's key-value metadata. Spark cannot write key-value metadata of
its own (no write option or Hadoop setting reaches its footer), so its part file's footer is
patched before the file is renamed onto the target (`parquet_footer.set_key_value`): the footer
alone is decoded and rewritten, the data pages are not read — about a millisecond, where
rewriting the object with pyarrow to add the key would cost a second pass over all of it
(BENCHMARKS.md, "Merges across schema versions"). Leaving it absent was not an option: an object
without the key reads as version 1 (`parquet_meta.read_version`), and the ledger does not record
the version of a merged object.

The Spark path uses the DataFrame API only (no RDD, no SparkContext), so the same code runs over
Spark Connect. Facts it relies on (docs/architecture.md, BENCHMARKS.md "Compaction"):
* Spark given many explicit paths first runs a distributed listing job, one task per path,
  unless `spark.sql.sources.parallelPartitionDiscovery.threshold` is above the path count: the
  writer raises it, so 2,000 inputs are stat'ed on the driver instead. Paths are handed over
  one by one, never a directory: a prefix also holds orphans of failed attempts.
* The schema is the version's, given to the reader: no footer-reading job to infer it, columns
  in the stream's order, and a column an older object lacks is read as nulls.
* Spark writes timestamps as INT96 by default; the small objects (pyarrow) hold
  `timestamp[us, UTC]` (INT64 TIMESTAMP_MICROS, adjusted to UTC). The writer makes Spark write
  TIMESTAMP_MICROS, so a merged object has the small objects' schema: a reader sees one schema,
  the next merge can rewrite it together with new small objects, and row groups carry min/max
  statistics for the time column (Spark writes none for INT96).
* One task reads, sorts and writes (`coalesce(1)` then `sortWithinPartitions`): no shuffle.
  `repartition(1)` or `orderBy` read in parallel but shuffle every row first, which on 2 cores
  cost more than the whole sort (BENCHMARKS.md, "Compaction": sort strategy).
* Rows are cut into row groups of `row_group_bytes`, so a 128 MiB object has several row
  groups whose min/max statistics let a time filter skip most of it.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from resources.compaction.parquet_footer import FooterPatchError, set_key_value
from resources.dedupe.key_index import one_per_key, winners_of
from resources.dedupe.keys import hash_ids
from resources.dedupe.served import DROPPED_KEY, ServedRange, dropped_rows
from resources.errors import LeaseholdError
from resources.key_settings import LATEST
from resources.schema.arrow import RetypedColumnError, read_by_name
from resources.schema.parquet_meta import version_metadata
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

ROW_GROUP_BYTES = 16 * 1024 * 1024
"""Spark's `parquet.block.size`: the buffered (encoded, not yet compressed) size at which a row
group is cut. 16 MiB gave a 132 MiB merged object 9 row groups of ~15 MiB on disk, each ~2.7
hours of a day: a one-hour filter reads one or two of them, 8x less than with one or two
groups, at no measurable cost to the merge (BENCHMARKS.md, "Compaction": row-group size)."""

ARROW_MAX_BYTES = 256 * 1024 * 1024
"""Rows (as Arrow, in memory) up to which a merge is done in pyarrow; its sort holds a second
copy, so one merge needs up to twice this. Event rows like the bench's are 1.4x their Parquet
size as Arrow (31.9 MiB -> 44.6 MiB, 1.19 M rows), so a merge of the default `merge.max_bytes`
(128 MiB of Parquet) fits unless its data compresses twice as well; such a merge goes to Spark."""

DISCOVERY_THRESHOLD = 1_000_000
"""Above any merge's input count (`merge.max_objects`): input paths are never listed by a job."""

SESSION_CONF = {
    "spark.sql.sources.parallelPartitionDiscovery.threshold": str(DISCOVERY_THRESHOLD),
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
}
"""Session settings the merge needs. Both are runtime SQL settings, so `spark.conf.set` works
over Spark Connect too. The timestamp type is read from the session when a write starts (a
write option cannot override it); TIMESTAMP_MICROS is what every object of the lake holds, so
it is right for anything else the session writes too."""


class MergeWriteError(LeaseholdError):
    """The merge did not leave exactly one object at its target: nothing may be committed."""


@dataclass(frozen=True)
class WrittenObject:
    """The one local Parquet file a merge wrote: its size, rows and schema version."""

    path: Path
    """The one local Parquet file written."""
    content_length: int
    row_count: int
    """From the file's footer: what was written, not what was meant to be."""
    schema_version: int = 1
    """The version whose columns it holds (the latest when the merge began)."""
    dropped_now: int = 0
    """Rows of the inputs this merge left out: records that lost to another of their key under
    the stream's dedupe policy (0 without one)."""


class MergeWriter:
    """Writes one merge: reads the inputs, sorts them and writes one Parquet object (pyarrow when it
    fits in memory, else Spark)."""

    def __init__(
        self,
        spark: Any,
        config: StreamConfig,
        *,
        row_group_bytes: int = ROW_GROUP_BYTES,
        arrow_max_bytes: int = ARROW_MAX_BYTES,
        follow: Callable[[], StreamConfig] | None = None,
    ) -> None:
        """`spark`: a SparkSession, or a callable that starts one, called only when a merge
        needs Spark (most do not). `config`: the stream, at the schema version merged to when
        there is no `follow`. `follow`: the stream's config at its latest schema version
        (`resources.stores.stream_schema.followed_config`), asked at each merge: the merge's
        inputs are decided by then, so none holds a column the merge would not write. Nothing
        on the writer changes after this: merges on several threads may share it."""
        self.follow = follow
        self._spark = spark
        self._session_lock = threading.Lock()
        self.config = config
        self.row_group_bytes = row_group_bytes
        self.arrow_max_bytes = arrow_max_bytes
        self.sort_by = config.merge.sort_by or config.event_time
        if not callable(spark):
            self._configure(spark)

    @property
    def spark(self) -> Any:
        """The session, started and configured on first use (merges run on several threads)."""
        with self._session_lock:
            if callable(self._spark):
                session = self._spark()
                self._configure(session)
                self._spark = session
            return self._spark

    @staticmethod
    def _configure(session: Any) -> None:
        for key, value in SESSION_CONF.items():
            session.conf.set(key, value)

    def merged_config(self) -> StreamConfig:
        """The stream at the schema version a merge starting now writes: `follow()`'s, or the
        writer's own config without one. Raises what `follow` raises (the store unreadable)."""
        return self.config if self.follow is None else self.follow()

    def write(
        self,
        inputs: Sequence[str],
        target: Path,
        served: ServedRange | None = None,
        *,
        retracted: np.ndarray | None = None,
    ) -> WrittenObject:
        """Read exactly `inputs` (local paths or file:// URLs of Parquet objects, as the ledger
        names them: never list a directory), each by column name against the columns of the
        stream's latest schema version (`merged_config`; a column an input lacks is null),
        sort rows by `config.merge.sort_by`, write exactly one Parquet object at `target` (a
        local path; its parent may not exist yet) carrying that version in its
        `leasehold.schema_version` metadata. Under a dedupe policy one row per key of the
        inputs is kept; given `served` (under `first`), the inputs' leading rows are what a
        publication serves (each key's first record already) and are kept whole, and of the
        rows after them those whose key its index holds, or that repeat a key among them, are
        left out (`after_served`). `retracted`: positions among the inputs' rows that a
        replacement retracted (`merge_runner.retracted_positions`), left out before the policy
        picks a row per key. Raises `ValueError` for no inputs or a remote one,
        `MergeWriteError` when an input is missing, unreadable or holds a column with another
        type than the version's; nothing is left at `target` then."""
        if not inputs:
            raise ValueError("a merge needs at least one input object")
        config = self.merged_config()
        target = Path(target).absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
        paths = [local_path(p) for p in inputs]
        rows = self._arrow_rows(paths, config)
        dropped_now = 0
        if rows is not None:
            meta = version_metadata(config.schema_version)
            if config.dedupe.active:
                held = rows.num_rows
                if retracted is not None and len(retracted):
                    rows = rows.filter(pa.array(_without(held, retracted)))
                keep = (
                    self._one_per_key(rows, config)
                    if served is None
                    else after_served(rows, served, config)
                )
                kept = rows if keep is None else rows.filter(pa.array(keep))
                dropped_now = held - kept.num_rows + (served.left_out if served else 0)
                total = dropped_now + sum(dropped_rows(pq.read_metadata(p)) for p in paths)
                rows, meta = kept, {**meta, DROPPED_KEY: str(total).encode()}
            self._arrow_write(rows, target, meta)
        else:
            self._spark_merge(inputs, target, config)
        return WrittenObject(
            path=target,
            content_length=target.stat().st_size,
            row_count=pq.read_metadata(target).num_rows,
            schema_version=config.schema_version,
            dropped_now=dropped_now,
        )

    @staticmethod
    def _one_per_key(rows: pa.Table, config: StreamConfig) -> Any:
        """Which of `rows` (the inputs' rows in commit order: the rewritten merged object, then
        the small objects by id) the dedupe policy keeps: one per key of the range."""
        order_by = config.dedupe.order_by
        order = rows.column(order_by).combine_chunks() if order_by else None
        ids = rows.column(config.record_id or "").combine_chunks()
        return one_per_key(hash_ids(ids), order, config.dedupe.mode == LATEST)

    def _arrow_rows(self, paths: list[str], config: StreamConfig) -> pa.Table | None:
        """Every input's rows as `config`'s columns, read by name (`read_by_name`: a column an
        input lacks is null), or None when Spark must merge: the rows outgrow
        `arrow_max_bytes`. Reading stops there, so a merge handed to Spark costs little here.
        Raises `MergeWriteError` for an input missing, unreadable, or holding one of the
        columns with another type (never cast: see the module's docstring)."""
        columns = list(config.columns)
        tables: list[pa.Table] = []
        held = 0
        for path in paths:
            try:
                table = read_by_name(path, columns)
            except FileNotFoundError as exc:  # the ledger names it, so a merge must not skip it
                raise MergeWriteError(
                    f"the merge of {len(paths)} objects failed: {path} not found"
                ) from exc
            except RetypedColumnError as exc:
                raise MergeWriteError(
                    f"the merge of {len(paths)} objects failed: {path}: {exc} (schema version "
                    f"{config.schema_version}; a merge never casts a value)"
                ) from exc
            except (OSError, pa.ArrowInvalid) as exc:
                raise MergeWriteError(
                    f"the merge of {len(paths)} objects failed: {path}: {exc}"
                ) from exc
            held += table.nbytes
            if held > self.arrow_max_bytes and not config.dedupe.active:
                log.info(
                    "merge of %d objects: over %d bytes as Arrow; Spark merges", len(paths), held
                )
                return None
            tables.append(table)
        return pa.concat_tables(tables)

    def _arrow_write(self, rows: pa.Table, target: Path, meta: dict[bytes, bytes]) -> None:
        """Sorted as Spark sorts (ascending, nulls first), cut into row groups of about
        `row_group_bytes` as Arrow, `meta` (its schema version, rows dropped) in its
        metadata, written next to the target and renamed onto it."""
        order = pc.sort_indices(rows, [(self.sort_by, "ascending", "at_start")])
        rows = rows.take(order).replace_schema_metadata(meta)
        per_row = max(1, rows.nbytes // max(1, rows.num_rows))
        partial = target.parent / f".{target.name}.{uuid.uuid4().hex}.arrow"
        try:
            pq.write_table(rows, partial, row_group_size=max(1, self.row_group_bytes // per_row))
            os.replace(partial, target)
        finally:
            partial.unlink(missing_ok=True)

    def _spark_merge(self, inputs: Sequence[str], target: Path, config: StreamConfig) -> None:
        # Spark writes a directory: next to the target, so the part file is moved by a rename,
        # its footer given the schema version first (nothing reads it before the rename).
        out = target.parent / f".{target.name}.{uuid.uuid4().hex}.spark"
        try:
            self._spark_write(
                [spark_path(p) for p in inputs], spark_path(str(out)), table_schema(config)
            )
            parts = sorted(out.glob("part-*.parquet"))
            if len(parts) != 1:
                raise MergeWriteError(
                    f"Spark wrote {len(parts)} part files for {target.name}, expected one"
                )
            ((key, value),) = version_metadata(config.schema_version).items()
            try:
                set_key_value(parts[0], key, value)
            except FooterPatchError as exc:
                raise MergeWriteError(f"the Spark merge's {target.name}: {exc}") from exc
            os.replace(parts[0], target)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    def _spark_write(self, inputs: list[str], out: str, schema: str) -> None:
        from pyspark.errors import PySparkException

        try:
            (
                self.spark.read.schema(schema)
                .parquet(*inputs)
                .coalesce(1)
                .sortWithinPartitions(self.sort_by)
                .write.option("parquet.block.size", str(self.row_group_bytes))
                .parquet(out)
            )
        except PySparkException as exc:
            # A missing or unreadable input, a schema an object does not match: this merge
            # fails, its partition's job is retried later; the run goes on.
            first = next((line for line in str(exc).splitlines() if line.strip()), repr(exc))
            raise MergeWriteError(
                f"the Spark merge of {len(inputs)} objects failed: {first.strip()}"
            ) from exc


def after_served(rows: pa.Table, served: ServedRange, config: StreamConfig) -> Any:
    """Which of `rows` (a merge's inputs, commit order) to keep under `first` when the leading
    `served.served_rows` are what a publication serves: those, and of the rows after them the
    first of each key that the publication's index does not hold (a row without an id always).
    None: every row. Raises `MergeWriteError` when the inputs hold fewer rows than served."""
    if rows.num_rows < served.served_rows:
        raise MergeWriteError(
            f"the merge's inputs hold {rows.num_rows} rows, fewer than the {served.served_rows} "
            "its publication serves of them"
        )
    later = rows.slice(served.served_rows)
    if not later.num_rows:
        return None
    if served.index is None:
        raise MergeWriteError("a merge of objects committed since the publication needs its index")
    ids = later.column(config.record_id or "").combine_chunks()
    keys = hash_ids(ids, served.index.hash_name)
    keep = np.ones(rows.num_rows, bool)
    first = one_per_key(keys, None, latest=False)
    keep[served.served_rows :] = first & (winners_of(served.index, keys) < 0)
    return keep


def _without(rows: int, positions: np.ndarray) -> np.ndarray:
    keep = np.ones(rows, bool)
    keep[positions] = False
    return keep


def table_schema(config: StreamConfig) -> str:
    """The stream's columns as a Spark DDL schema (the `streams.yaml` type names are Spark's)."""
    return ", ".join(f"`{c.name}` {c.type}" for c in config.columns)


def local_path(path: str) -> str:
    """A ledger's local path or `file://` URL as a path pyarrow opens (`spark_path` inverted)."""
    if path.startswith("file://"):
        return path[len("file://") :]
    if "://" in path:
        raise ValueError(f"{path!r}: the merge reads local objects only (copy them first)")
    return path


def spark_path(path: str) -> str:
    """A `file://` URL Spark's Hadoop file system takes literally: an absolute path behind the
    scheme, not percent-encoded (Hadoop's `Path` quotes it itself), so a relative path or a
    cluster's default file system never changes which file is read."""
    if path.startswith("file://"):
        return path
    if "://" in path:
        raise ValueError(f"{path!r}: the merge reads local objects only (copy them first)")
    return "file://" + str(Path(path).absolute())
