"""An object's schema version in its Parquet metadata, and objects of several versions read by
column name against one list of columns."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.schema.arrow import (
    RetypedColumnError,
    arrow_schema,
    conform,
    read_by_name,
    retyped,
)
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import (
    SCHEMA_VERSION_KEY,
    SchemaVersionMetadataError,
    read_version,
    version_metadata,
)

V1 = (ColumnSpec("id", "string"), ColumnSpec("n", "long"), ColumnSpec("ts", "timestamp"))
V2 = (*V1, ColumnSpec("country", "string"), ColumnSpec("ok", "boolean"))
TS = datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_the_version_round_trips_through_a_parquet_footer(tmp_path: Path) -> None:
    assert SCHEMA_VERSION_KEY == b"leasehold.schema_version"
    assert version_metadata(3) == {b"leasehold.schema_version": b"3"}
    table = pa.table({"id": ["a"]})
    path = tmp_path / "v3.parquet"
    pq.write_table(table.replace_schema_metadata(version_metadata(3)), path)
    assert read_version(pq.read_metadata(path)) == 3  # the footer
    assert read_version(pq.read_schema(path)) == 3  # the Arrow schema
    assert read_version(pq.read_metadata(path).metadata) == 3  # the key-value map itself
    assert read_version({"leasehold.schema_version": "12"}) == 12  # text keys


def test_an_object_without_the_key_is_version_1(tmp_path: Path) -> None:
    path = tmp_path / "old.parquet"
    pq.write_table(pa.table({"id": ["a"]}), path)
    assert read_version(pq.read_metadata(path)) == 1
    assert read_version(pa.schema([("id", pa.string())])) == 1  # no metadata at all
    assert read_version(None) == 1
    assert read_version({}) == 1


@pytest.mark.parametrize("bad", [b"", b"two", b"0", b"-1", b"1.5", "²".encode()])
def test_a_malformed_version_is_refused(bad: bytes) -> None:
    with pytest.raises(SchemaVersionMetadataError, match="leasehold.schema_version"):
        read_version({SCHEMA_VERSION_KEY: bad})


@pytest.mark.parametrize("bad", [0, -3, True, 1.0])
def test_only_versions_from_1_are_written(bad: object) -> None:
    with pytest.raises(ValueError, match="from 1"):
        version_metadata(bad)  # type: ignore[arg-type]


def test_arrow_schema_carries_the_version() -> None:
    schema = arrow_schema(V2, version=2)
    assert schema.names == ["id", "n", "ts", "country", "ok"]
    assert schema.field("ts").type == pa.timestamp("us", tz="UTC")
    assert read_version(schema) == 2
    assert arrow_schema(V1).metadata is None


def test_conform_reads_by_name_with_missing_columns_null() -> None:
    # an older object's columns, in another order than the schema's
    old = pa.table(
        {
            "ts": pa.array([TS, TS], pa.timestamp("us", tz="UTC")),
            "id": pa.array(["a", "b"], pa.large_string()),
            "n": [1, None],
            "dropped": [True, False],  # not a column of the schema: left out
        }
    )
    got = conform(old, V2)
    assert got.schema == arrow_schema(V2)
    assert got.to_pylist() == [
        {"id": "a", "n": 1, "ts": TS, "country": None, "ok": None},
        {"id": "b", "n": None, "ts": TS, "country": None, "ok": None},
    ]


def test_conform_never_casts_a_retyped_column() -> None:
    table = pa.table({"id": ["a"], "n": [1.5]})
    assert retyped(table.schema, V1) == ["n"]
    with pytest.raises(RetypedColumnError, match=r"n \(double, not int64\)"):
        conform(table, V1)


def test_read_by_name_reads_only_the_columns_an_object_holds(tmp_path: Path) -> None:
    path = tmp_path / "v1.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "n": [1, 2, 3]}), path)
    assert read_by_name(path, V2[3:]).to_pylist() == [{"country": None, "ok": None}] * 3
    got = read_by_name(str(path), (ColumnSpec("n", "long"), ColumnSpec("country", "string")))
    assert got.to_pylist() == [
        {"n": 1, "country": None},
        {"n": 2, "country": None},
        {"n": 3, "country": None},
    ]
