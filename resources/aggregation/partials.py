"""What a batch of rows contributes to a rollup, per aggregate key: its partial results.

Two engines compute the same thing. `SparkPartials` reads every batch of a run in one Spark job
(a union of the batches' files, grouped by batch and key), so many batches are aggregated in
parallel across the cluster; `ArrowPartials` aggregates on the calling machine with pyarrow,
for the check's recomputation and for processes that must not start a JVM (the chaos tests'
writers); `SizedPartials` picks one by the input's size. The rollup's key is its `group_by`
values as JSON text (`encode_key`): one string that both stores can use as a record key,
whatever the columns' types.

A table partition's objects span schema versions (docs/schema-evolution.md): an object written
before a column was added lacks it. Both engines read the rollup's columns by name with the
types of the stream's latest version (`schema`, given to each engine): a column an object
lacks is null there, which the aggregates take as no value — a count still counts the row, a
sum or min or max skips it (a sum of none is 0, a min or max of none is None), a group_by key
holds null. A column an object holds with another type is refused (`RetypedColumnError`),
never cast.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Protocol

import pyarrow as pa

from resources.rollup.aggregates import Aggregate, Function, Value
from resources.rollup.spec import RollupSpec
from resources.schema.arrow import arrow_schema, read_by_name
from resources.schema.columns import ColumnSpec

BatchFiles = Mapping[int, Sequence[str]]
"""txid -> the local paths of the batch's small objects."""
Partials = dict[str, Value]


def encode_key(values: Iterable[Any]) -> str:
    """The group_by values as one record key; dates and timestamps as ISO text."""
    return json.dumps(list(values), separators=(",", ":"), default=str, ensure_ascii=False)


def decode_key(key: str) -> list[Any]:
    values: list[Any] = json.loads(key)
    return values


class PartialsEngine(Protocol):
    """What computes a rollup's partial results per batch of objects: `SparkPartials`,
    `ArrowPartials`, `SizedPartials`."""

    def compute(self, spec: RollupSpec, batches: BatchFiles) -> dict[int, Partials]:
        """Each batch's partial results, by txid."""
        ...


EngineFor = Callable[[int], PartialsEngine]
"""The engine for a run's batches of this many input bytes."""


def columns(spec: RollupSpec) -> list[str]:
    """The table columns a rollup reads."""
    wanted = list(spec.group_by) + [a.column for a in spec.aggregates if a.column]
    return list(dict.fromkeys(wanted))


def column_specs(spec: RollupSpec, schema: Sequence[ColumnSpec]) -> list[ColumnSpec]:
    """The table columns a rollup reads (`columns`), each with its type in `schema` (the
    stream's columns at its latest version). Raises `ValueError` naming a column `schema`
    does not hold."""
    types = {c.name: c for c in schema}
    missing = [c for c in columns(spec) if c not in types]
    if missing:
        raise ValueError(f"rollup {spec.name!r} reads {missing}, not columns of the schema")
    return [types[c] for c in columns(spec)]


def _normalized(function: Function, value: Any) -> Any:
    """A sum over no non-null value is 0 (the identity), as a count is."""
    if function in (Function.COUNT, Function.SUM) and value is None:
        return 0
    return value


class ArrowPartials:
    """Computes partials on this machine with pyarrow: for batches small enough that a Spark job
    would cost more than the work."""

    def __init__(self, schema: Sequence[ColumnSpec]) -> None:
        """`schema`: the stream's columns at its latest version (what the rollup's columns
        are read as, by name)."""
        self.schema = tuple(schema)

    def compute(self, spec: RollupSpec, batches: BatchFiles) -> dict[int, Partials]:
        """Each batch's partials, its files read by name (`read_files`). Raises
        `RetypedColumnError`, `OSError`/`pa.ArrowInvalid` as `read_files` does."""
        wanted = column_specs(spec, self.schema)
        return {
            txid: self.of_table(spec, read_files(paths, wanted)) for txid, paths in batches.items()
        }

    @staticmethod
    def of_table(spec: RollupSpec, table: pa.Table) -> Partials:
        """`table`'s rows aggregated per key: the reference any engine's partials must equal."""
        if table.num_rows == 0:
            return {}
        pairs = list(dict.fromkeys(_arrow_aggregate(a) for a in spec.aggregates))
        grouped = table.group_by(list(spec.group_by)).aggregate(
            [([] if c is None else c, f) for c, f in pairs]
        )
        results = [
            grouped.column(_arrow_output(_arrow_aggregate(a))).to_pylist() for a in spec.aggregates
        ]
        keys = [grouped.column(c).to_pylist() for c in spec.group_by]
        partials: Partials = {}
        for row in range(grouped.num_rows):
            key = encode_key(k[row] for k in keys)
            partials[key] = tuple(
                _normalized(a.function, r[row])
                for a, r in zip(spec.aggregates, results, strict=True)
            )
        return partials


def _arrow_aggregate(a: Aggregate) -> tuple[str | None, str]:
    """pyarrow's (column, function) for `a`: counts count rows (no column), not values."""
    return (None, "count_all") if a.function is Function.COUNT else (a.column, a.function.value)


def _arrow_output(pair: tuple[str | None, str]) -> str:
    column, function = pair
    return function if column is None else f"{column}_{function}"


def read_files(paths: Sequence[str], columns: Sequence[ColumnSpec]) -> pa.Table:
    """The rows of the Parquet objects at `paths` (local), each read by name as `columns`
    (`read_by_name`: a column an object lacks is null); no path, no row. Raises
    `RetypedColumnError` for an object holding one of `columns` with another type,
    `OSError`/`pa.ArrowInvalid` for one that cannot be read."""
    tables = [read_by_name(p, columns) for p in paths]
    if not tables:
        return arrow_schema(columns).empty_table()
    return pa.concat_tables(tables)


ARROW_MAX_BYTES = 256 * 1024 * 1024
"""Input up to which a run's batches are aggregated with pyarrow on the calling machine: below
it, starting Spark (seconds, and a second session's memory beside ingestion's) costs more than
the aggregation; above it, one Spark job spreads the batches over the cluster."""


class SizedPartials:
    """pyarrow for a run's batches up to `arrow_max_bytes` of input, Spark above (the Spark
    session is asked for only then); both read `schema`'s columns by name."""

    def __init__(
        self,
        spark: Callable[[], Any],
        schema: Sequence[ColumnSpec],
        arrow_max_bytes: int = ARROW_MAX_BYTES,
    ) -> None:
        self.spark = spark
        self.schema = tuple(schema)
        self.arrow_max_bytes = arrow_max_bytes

    def for_bytes(self, input_bytes: int) -> PartialsEngine:
        if input_bytes <= self.arrow_max_bytes:
            return ArrowPartials(self.schema)
        return SparkPartials(self.spark(), self.schema)


class SparkPartials:
    """One Spark job for all batches of a call: each batch's files read with its txid as a
    column, the reads unioned, grouped by (txid, key). The files are read with the rollup's
    columns as the reader's schema, so by name: a column a file lacks is null (and no job
    reads footers to infer a schema)."""

    def __init__(self, spark: Any, schema: Sequence[ColumnSpec]) -> None:
        """`schema`: the stream's columns at its latest version."""
        self.spark = spark
        self.schema = tuple(schema)

    def compute(self, spec: RollupSpec, batches: BatchFiles) -> dict[int, Partials]:
        from functools import reduce

        from pyspark.sql import functions as F  # noqa: N812 - Spark's own convention

        wanted = column_specs(spec, self.schema)
        ddl = ", ".join(f"`{c.name}` {c.type}" for c in wanted)
        reads = [
            self.spark.read.schema(ddl).parquet(*paths).withColumn("_txid", F.lit(txid))
            for txid, paths in batches.items()
            if paths
        ]
        out: dict[int, Partials] = {txid: {} for txid in batches}
        if not reads:
            return out
        functions: dict[Function, Callable[[Any], Any]] = {
            Function.COUNT: lambda c: F.count(F.lit(1)),
            Function.SUM: F.sum,
            Function.MIN: F.min,
            Function.MAX: F.max,
        }
        exprs = [
            functions[a.function](a.column).alias(f"_a{i}") for i, a in enumerate(spec.aggregates)
        ]
        rows = (
            reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), reads)
            .groupBy("_txid", *spec.group_by)
            .agg(*exprs)
            .collect()
        )
        for row in rows:
            key = encode_key(row[c] for c in spec.group_by)
            out[row["_txid"]][key] = tuple(
                _normalized(a.function, row[f"_a{i}"]) for i, a in enumerate(spec.aggregates)
            )
        return out
