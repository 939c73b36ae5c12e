"""The merge itself: exactly the given objects in, one sorted object out, the inputs' schema."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.compaction.merge_writer import (
    ARROW_MAX_BYTES,
    MergeWriteError,
    MergeWriter,
    WrittenObject,
    spark_path,
    table_schema,
)
from resources.ingestion.table_objects import dictionary_columns, write_table_object
from resources.streams import StreamConfig, load_streams

DT = "2026-01-01"
DAY = datetime(2026, 1, 1, tzinfo=timezone.utc)


@pytest.fixture(scope="module")
def config(tmp_path_factory: pytest.TempPathFactory) -> StreamConfig:
    path = tmp_path_factory.mktemp("streams") / "streams.yaml"
    path.write_text(
        """
streams:
  events:
    source: file://src
    format: jsonl
    schema: {event_id: string, user_id: string, amount: double, event_time: timestamp}
    event_time: event_time
    record_id: event_id
    table: file://lake/events
"""
    )
    return load_streams(path)["events"]


class Objects:
    """Small objects written as ingestion writes them, event times random over the day."""

    def __init__(self, directory: Path, config: StreamConfig) -> None:
        self.directory = directory
        self.config = config
        self.rng = np.random.default_rng(13)
        self.next_id = 0

    def write(self, count: int, rows: int) -> list[str]:
        self.directory.mkdir(parents=True, exist_ok=True)
        paths = []
        for _ in range(count):
            ids = range(self.next_id, self.next_id + rows)
            self.next_id += rows
            times = self.rng.integers(0, 86_400_000_000, rows)
            table = pa.table(
                {
                    "event_id": [f"e{i:09d}" for i in ids],
                    # nulls and repeated values must survive the merge as they are
                    "user_id": [None if i % 7 == 0 else f"u{i % 13}" for i in ids],
                    "amount": [None if i % 11 == 0 else round(i * 0.37, 2) for i in ids],
                    "event_time": pa.array(
                        [DAY + timedelta(microseconds=int(t)) for t in times],
                        pa.timestamp("us", tz="UTC"),
                    ),
                }
            )
            target = self.directory / f"attempt-{self.next_id}-{DT}-0.parquet"
            write_table_object(
                table, DT, target, self.config.column_names, dictionary_columns(self.config)
            )
            paths.append(str(target))
        return paths


@pytest.fixture(params=["arrow", "spark"])
def writer(request: pytest.FixtureRequest, spark: Any) -> Callable[..., MergeWriter]:
    """MergeWriter on each of its two paths: pyarrow (what fits in memory) and Spark (forced by
    a zero Arrow budget); both keep the same contract."""
    arrow_max_bytes = ARROW_MAX_BYTES if request.param == "arrow" else 0

    def make(config: StreamConfig, **options: Any) -> MergeWriter:
        return MergeWriter(spark, config, arrow_max_bytes=arrow_max_bytes, **options)

    return make


@pytest.fixture
def objects(tmp_path: Path, config: StreamConfig) -> Objects:
    return Objects(tmp_path / "small", config)


def rows_of(paths: list[str]) -> Counter[tuple[Any, ...]]:
    rows: Counter[tuple[Any, ...]] = Counter()
    for path in paths:
        rows.update(tuple(r.values()) for r in pq.read_table(path).to_pylist())
    return rows


def parquet_columns(path: str) -> list[tuple[str, str, str, int]]:
    """Each column's name, physical and logical type and repetition, as a Parquet reader sees
    them (the root's name is the writer's own: pyarrow's `schema`, Spark's `spark_schema`)."""
    schema = pq.ParquetFile(path).schema
    return [
        (c.name, c.physical_type, str(c.logical_type), c.max_definition_level)
        for c in (schema.column(i) for i in range(len(schema)))
    ]


def assert_merged(written: WrittenObject, inputs: list[str], sort_by: str) -> None:
    table = pq.read_table(written.path)
    assert rows_of([str(written.path)]) == rows_of(inputs)
    keys = table.column(sort_by).to_pylist()
    assert keys == sorted(keys)
    first = pq.read_schema(inputs[0])
    assert pq.read_schema(written.path).remove_metadata() == first.remove_metadata()
    assert pq.read_schema(written.path).names == first.names  # the stream's column order
    assert parquet_columns(str(written.path)) == parquet_columns(inputs[0])
    assert written.row_count == table.num_rows == sum(rows_of(inputs).values())
    assert written.content_length == written.path.stat().st_size


def test_merges_exactly_its_inputs_into_one_sorted_object_with_their_schema(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    inputs = objects.write(12, 150)
    inputs.append(inputs[0])  # the same object twice: its rows twice, a multiset not a set
    orphan = objects.write(1, 50)  # beside the inputs, as a failed attempt's object would be
    target = tmp_path / "out" / "merged" / "part-0000000000000000000-0000000000000000012.parquet"
    # local paths and file:// URLs, as the ledger names objects
    given = [p if i % 2 else "file://" + p for i, p in enumerate(inputs)]

    written = writer(config).write(given, target)

    assert written.path == target
    assert list(target.parent.iterdir()) == [target]  # Spark's directory is gone
    assert_merged(written, inputs, "event_time")
    assert not set(rows_of(orphan)) & set(rows_of([str(target)]))


def test_a_merged_object_merges_again_with_new_small_objects(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """The open range rewritten: its merged object plus the objects committed since."""
    merge = writer(config)
    first = objects.write(5, 100)
    merged = merge.write(first, tmp_path / "a" / "part-0-5.parquet")
    later = objects.write(4, 100)

    rewritten = merge.write([str(merged.path), *later], tmp_path / "b" / "part-0-9.parquet")

    assert_merged(rewritten, [*first, *later], "event_time")
    assert parquet_columns(str(rewritten.path)) == parquet_columns(str(merged.path))


def test_row_groups_are_ordered_by_the_sort_column(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """Row groups whose event-time ranges follow one another: a time filter skips the rest."""
    inputs = objects.write(10, 3000)
    written = writer(config, row_group_bytes=64 * 1024).write(inputs, tmp_path / "part.parquet")
    meta = pq.read_metadata(written.path)
    assert meta.num_row_groups >= 3
    column = meta.schema.names.index("event_time")
    stats = [meta.row_group(i).column(column).statistics for i in range(meta.num_row_groups)]
    assert all(s is not None and s.has_min_max for s in stats)
    assert all(a.max <= b.min for a, b in zip(stats, stats[1:], strict=False))
    times = pq.read_table(inputs, columns=["event_time"])["event_time"].to_pylist()
    assert (stats[0].min, stats[-1].max) == (min(times), max(times))
    assert written.row_count == sum(meta.row_group(i).num_rows for i in range(meta.num_row_groups))


def test_sorts_by_the_configured_column(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    by_user = replace(config, merge=replace(config.merge, sort_by="user_id"))
    inputs = objects.write(3, 100)
    written = writer(by_user).write(inputs, tmp_path / "part.parquet")
    users = pq.read_table(written.path).column("user_id").to_pylist()
    assert users == sorted(users, key=lambda u: (u is not None, u))  # nulls first, as Spark sorts
    assert rows_of([str(written.path)]) == rows_of(inputs)


def test_a_failed_merge_leaves_nothing_behind(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    inputs = objects.write(2, 10)
    target = tmp_path / "out" / "part.parquet"
    with pytest.raises(MergeWriteError, match="(?i)3 objects failed.*(not exist|not found)"):
        writer(config).write([*inputs, str(tmp_path / "gone.parquet")], target)
    assert not target.exists()
    assert list(target.parent.iterdir()) == []


def test_inputs_must_be_local_and_the_schema_is_the_streams(config: StreamConfig) -> None:
    assert spark_path("/a/dt=2026-01-01/x y.parquet") == "file:///a/dt=2026-01-01/x y.parquet"
    assert spark_path("file:///a/b.parquet") == "file:///a/b.parquet"
    with pytest.raises(ValueError, match="local objects only"):
        spark_path("s3://bucket/a.parquet")
    assert table_schema(config) == (
        "`event_id` string, `user_id` string, `amount` double, `event_time` timestamp"
    )


def test_an_empty_merge_is_refused(spark: Any, config: StreamConfig, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least one input"):
        MergeWriter(spark, config).write([], tmp_path / "part.parquet")


def test_inputs_lacking_a_stream_column_are_merged_by_spark_with_nulls(
    spark: Any, config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """A column the stream gained after some objects were written: those objects read it as
    nulls. pyarrow would need the column's type from the stream; Spark has it (its DDL)."""
    older = objects.write(2, 50)
    pq.write_table(pq.read_table(older[0]).drop_columns(["amount"]), older[0])
    started: list[bool] = []

    def session() -> Any:
        started.append(True)
        return spark

    written = MergeWriter(session, config).write(older, tmp_path / "part.parquet")

    assert started == [True]  # Spark started for this merge only
    amounts = pq.read_table(written.path).column("amount").to_pylist()
    assert amounts.count(None) >= 50
    assert written.row_count == 100


def test_rows_over_the_arrow_budget_are_merged_by_spark_and_spark_starts_only_then(
    spark: Any, config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    started: list[bool] = []

    def session() -> Any:
        started.append(True)
        return spark

    inputs = objects.write(4, 200)
    within = MergeWriter(session, config).write(inputs, tmp_path / "a.parquet")
    assert started == []  # pyarrow merged it: no SparkSession was asked for
    one = pq.read_table(inputs[0]).nbytes
    over = MergeWriter(session, config, arrow_max_bytes=2 * one).write(
        inputs, tmp_path / "b.parquet"
    )
    assert started == [True]
    assert rows_of([str(over.path)]) == rows_of([str(within.path)]) == rows_of(inputs)
