"""The merge itself: exactly the given objects in, one sorted object out, the inputs' schema."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from resources.compaction.merge_writer import (
    ARROW_MAX_BYTES,
    MergeWriteError,
    MergeWriter,
    WrittenObject,
    after_served,
    spark_path,
    table_schema,
)
from resources.dedupe.key_index import KeyedRows, KeyIndex, resolve, row_ids
from resources.dedupe.keys import hash_ids
from resources.dedupe.served import ServedRange
from resources.ingestion.table_objects import write_table_object
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import read_version
from resources.schema.versions import SchemaVersion
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
    dedupe: {mode: none}  # the inputs repeat ids: a merge keeps every row (dedupe: below)
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
                table, target, self.config.column_names, self.config.dictionary_columns
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


def test_inputs_lacking_a_stream_column_are_merged_by_pyarrow_with_nulls(
    spark: Any, config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """A column the stream gained after some objects were written: those objects read it as
    nulls, by name, in pyarrow: an older input is no reason to start Spark."""
    older = objects.write(2, 50)
    pq.write_table(pq.read_table(older[0]).drop_columns(["amount"]), older[0])
    started: list[bool] = []

    def session() -> Any:
        started.append(True)
        return spark

    written = MergeWriter(session, config).write(older, tmp_path / "part.parquet")

    assert started == []
    amounts = pq.read_table(written.path).column("amount").to_pylist()
    assert amounts.count(None) >= 50
    assert written.row_count == 100
    assert pq.read_schema(written.path).names == config.column_names


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


# -- schema versions ----------------------------------------------------------------------------

V2_ADDED = (ColumnSpec("country", "string"), ColumnSpec("device", "string"))
"""Version 2's columns: a plain one and a nested object kept as its JSON text (as the reader
keeps a nested field: docs/schema-evolution.md)."""


def at_version(config: StreamConfig, version: int) -> StreamConfig:
    """`config` at schema version 1 (its own columns) or 2 (plus `V2_ADDED`)."""
    if version == 1:
        return config
    columns = (*config.columns, *V2_ADDED)
    added = tuple(c.name for c in V2_ADDED)
    return config.following(SchemaVersion(2, columns, added))


def write_version_2(directory: Path, config: StreamConfig, count: int, rows: int) -> list[str]:
    """Small objects of version 2: the 4 columns of version 1, then `country` and `device`
    (null in some rows), written as the reader writes them, version 2 in their metadata."""
    v2 = at_version(config, 2)
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for n in range(count):
        ids = range(n * rows, (n + 1) * rows)
        table = pa.table(
            {
                "event_id": [f"v2-{i:06d}" for i in ids],
                "user_id": [f"u{i % 5}" for i in ids],
                "amount": [None if i % 4 == 0 else i * 1.5 for i in ids],
                "event_time": pa.array(
                    [DAY + timedelta(seconds=(i * 7919) % 86_400) for i in ids],
                    pa.timestamp("us", tz="UTC"),
                ),
                "country": [None if i % 3 == 0 else ("DE", "FR")[i % 2] for i in ids],
                "device": [
                    None if i % 5 == 0 else f'{{"os": "ios", "model": {{"name": "m{i % 3}"}}}}'
                    for i in ids
                ],
            }
        )
        target = directory / f"v2-{n}-{DT}-0.parquet"
        write_table_object(table, target, v2.column_names, v2.dictionary_columns, 2)
        paths.append(str(target))
    return paths


def rows_as(paths: list[str], names: list[str]) -> Counter[tuple[Any, ...]]:
    """Each object's rows as `names`, a column the object lacks as None."""
    rows: Counter[tuple[Any, ...]] = Counter()
    for path in paths:
        for row in pq.read_table(path).to_pylist():
            rows[tuple(row.get(n) for n in names)] += 1
    return rows


def test_objects_of_two_schema_versions_merge_by_name_into_the_latest(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """Version 1 objects (4 columns) and version 2 ones (6, one a nested object's JSON text),
    a merge that follows version 2: every row exactly once, version 1's rows null in the new
    columns, the columns in version 2's order and types, and version 2 in the object's
    metadata, on both paths (Spark: its footer patched)."""
    v1_inputs = objects.write(3, 40)
    v2_inputs = write_version_2(tmp_path / "v2", config, 2, 30)
    v2 = at_version(config, 2)
    followed: list[int] = []

    def follow() -> StreamConfig:
        followed.append(2)
        return v2

    inputs = [v2_inputs[0], *v1_inputs, v2_inputs[1]]  # the first input is of the later version
    written = writer(config, follow=follow).write(inputs, tmp_path / "out" / "part.parquet")

    assert followed == [2]  # asked once, at the merge
    merged = pq.read_table(written.path)
    assert merged.column_names == v2.column_names
    assert rows_as([str(written.path)], v2.column_names) == rows_as(inputs, v2.column_names)
    v1_rows = [r for r in merged.to_pylist() if not r["event_id"].startswith("v2-")]
    assert len(v1_rows) == 120
    assert all(r["country"] is None and r["device"] is None for r in v1_rows)
    v2_rows = [r for r in merged.to_pylist() if r["event_id"].startswith("v2-")]
    assert len(v2_rows) == 60
    assert sum(r["device"] is not None for r in v2_rows) == 48
    assert {r["device"] for r in v2_rows} == {
        None,
        *(f'{{"os": "ios", "model": {{"name": "m{n}"}}}}' for n in range(3)),
    }  # the nested object's JSON text, as written
    times = merged.column("event_time").to_pylist()
    assert times == sorted(times)
    assert parquet_columns(str(written.path)) == parquet_columns(v2_inputs[0])
    assert read_version(pq.read_schema(written.path)) == 2
    assert read_version(pq.read_metadata(written.path)) == 2
    assert written.row_count == 180


def test_a_merged_object_of_version_2_merges_again_keeping_its_version(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """The open range rewritten after the stream moved to version 2: the earlier merged object
    (version 1) with version 2's small objects; then that object again with version 1's."""
    v2 = at_version(config, 2)
    first = writer(config).write(objects.write(2, 20), tmp_path / "a" / "part.parquet")
    assert read_version(pq.read_schema(first.path)) == 1
    later = write_version_2(tmp_path / "v2", config, 1, 10)
    merge = writer(config, follow=lambda: v2)

    second = merge.write([str(first.path), *later], tmp_path / "b" / "part.parquet")
    third = merge.write([str(second.path), *objects.write(1, 5)], tmp_path / "c" / "part.parquet")

    assert read_version(pq.read_schema(second.path)) == 2
    assert read_version(pq.read_schema(third.path)) == 2
    assert pq.read_table(third.path).num_rows == 55
    assert pq.read_schema(third.path).names == v2.column_names


def test_a_column_held_with_another_type_fails_the_merge_naming_it(
    spark: Any, config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """Never a version's doing (columns are never retyped): refused, not cast."""
    inputs = objects.write(2, 10)
    retyped = pq.read_table(inputs[1])
    amount = retyped.schema.get_field_index("amount")
    retyped = retyped.set_column(amount, "amount", pc.cast(retyped["amount"], pa.string()))
    pq.write_table(retyped, inputs[1])
    target = tmp_path / "out" / "part.parquet"

    with pytest.raises(MergeWriteError, match=r"(?s)amount \(string, not double\).*never casts"):
        MergeWriter(spark, config).write(inputs, target)
    assert not target.exists()


def test_merges_on_two_threads_each_write_the_version_they_followed(
    writer: Callable[..., MergeWriter], config: StreamConfig, objects: Objects, tmp_path: Path
) -> None:
    """One writer shared by the runner's merge threads: one merge followed version 1, another
    version 2 at the same moment (both followed before either read its inputs); each object
    holds its own version's columns and metadata, and the writer itself is unchanged."""
    v1_inputs = objects.write(2, 25)
    v2_inputs = write_version_2(tmp_path / "v2", config, 2, 25)
    versions = {"old": at_version(config, 1), "new": at_version(config, 2)}
    both_followed = threading.Barrier(2, timeout=60)

    def follow() -> StreamConfig:
        chosen = versions[threading.current_thread().name]
        both_followed.wait()
        return chosen

    merge = writer(config, follow=follow)
    results: dict[str, WrittenObject | BaseException] = {}

    def run(name: str, inputs: list[str]) -> None:
        try:
            results[name] = merge.write(inputs, tmp_path / name / "part.parquet")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            results[name] = exc

    threads = [
        threading.Thread(target=run, name="old", args=("old", v1_inputs)),
        threading.Thread(target=run, name="new", args=("new", [*v1_inputs, *v2_inputs])),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    old, new = results["old"], results["new"]
    assert isinstance(old, WrittenObject) and isinstance(new, WrittenObject), results

    assert pq.read_schema(old.path).names == config.column_names
    assert read_version(pq.read_schema(old.path)) == 1
    assert old.row_count == 50
    assert pq.read_schema(new.path).names == versions["new"].column_names
    assert read_version(pq.read_schema(new.path)) == 2
    assert new.row_count == 100
    names = versions["new"].column_names
    assert rows_as([str(new.path)], names) == rows_as([*v1_inputs, *v2_inputs], names)
    assert merge.config is config and merge.config.schema_version == 1


def test_after_served_keeps_the_served_rows_and_the_first_new_key_the_index_lacks(
    config: StreamConfig,
) -> None:
    # Two served rows (a, b), then rows committed since: b is indexed (lost), c twice (the first
    # kept), a row without an id (always kept), d.
    index = resolve(
        KeyIndex.empty(None),
        KeyedRows.of(hash_ids(pa.array(["a", "b"])), row_ids(1, 2), None),
        1,
        latest=False,
    ).index
    rows = pa.table({"event_id": ["a", "b", "b", "c", None, "c", "d"]})
    keep = after_served(rows, ServedRange(2, 0, index), config)
    assert keep.tolist() == [True, True, False, True, True, False, True]
    assert after_served(rows.slice(0, 2), ServedRange(2, 1, None), config) is None
    with pytest.raises(MergeWriteError, match="fewer than the 3"):
        after_served(rows.slice(0, 2), ServedRange(3, 0, None), config)
