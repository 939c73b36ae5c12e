"""The two partial-aggregate engines agree, on the shapes rollups meet: several batches in one
Spark job, null keys and values, a rollup with no group_by, an empty batch, and objects of two
schema versions (a column an older object lacks read by name as nulls: no value)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.aggregation.partials import (
    ArrowPartials,
    SizedPartials,
    SparkPartials,
    column_specs,
    decode_key,
    read_files,
)
from resources.rollup.spec import parse_rollups
from resources.schema.arrow import RetypedColumnError
from resources.schema.columns import ColumnSpec

SCHEMA = {"user_id": "string", "country": "string", "amount": "long", "price": "double"}
COLUMNS = [ColumnSpec(n, t) for n, t in SCHEMA.items()]


def rollup(group_by: list[str]) -> Any:
    declared = {
        "group_by": group_by,
        "aggregates": {
            "n": "count",
            "total": "sum(amount)",
            "lowest": "min(price)",
            "highest": "max(amount)",
        },
    }
    return parse_rollups({"r": declared}, SCHEMA)[0]


def write(path: Path, rows: list[tuple[Any, ...]]) -> str:
    columns = list(zip(*rows, strict=True)) if rows else [[], [], [], []]
    table = pa.table(
        {
            "user_id": pa.array(columns[0], pa.string()),
            "country": pa.array(columns[1], pa.string()),
            "amount": pa.array(columns[2], pa.int64()),
            "price": pa.array(columns[3], pa.float64()),
        }
    )
    pq.write_table(table, path)
    return str(path)


def test_spark_and_arrow_compute_the_same_partials(spark: Any, tmp_path: Path) -> None:
    batches = {
        3: [
            write(tmp_path / "a.parquet", [("u1", "fr", 5, 1.5), ("u2", None, None, 2.0)]),
            write(tmp_path / "b.parquet", [("u1", "fr", 7, None), (None, "de", 1, 0.5)]),
        ],
        5: [write(tmp_path / "c.parquet", [("u1", "de", 2, 9.0)])],
        6: [write(tmp_path / "d.parquet", [])],
    }
    for group_by in (["user_id"], ["user_id", "country"], []):
        spec = rollup(group_by)
        arrow = ArrowPartials(COLUMNS).compute(spec, batches)
        assert SparkPartials(spark, COLUMNS).compute(spec, batches) == arrow
        sized = SizedPartials(lambda: spark, COLUMNS, arrow_max_bytes=0).for_bytes(1)
        assert isinstance(sized, SparkPartials)
        assert sized.compute(spec, batches) == arrow
    by_user = ArrowPartials(COLUMNS).compute(rollup(["user_id"]), batches)
    assert by_user[3]['["u1"]'] == (2, 12, 1.5, 7)
    assert by_user[3]['["u2"]'] == (1, 0, 2.0, None)  # a sum of no value is 0, a max None
    assert decode_key(next(iter(by_user[5]))) == ["u1"]
    assert by_user[6] == {}


def write_version_1(path: Path, rows: list[tuple[Any, ...]]) -> str:
    """An object written before `country` and `price` were added: `user_id` and `amount`."""
    users, amounts = (list(c) for c in zip(*rows, strict=True))
    pq.write_table(
        pa.table({"user_id": pa.array(users, pa.string()), "amount": pa.array(amounts)}), path
    )
    return str(path)


def test_objects_lacking_the_rollups_columns_read_them_as_no_value(
    spark: Any, tmp_path: Path
) -> None:
    """A rollup on columns added later (`country`, `price`), over objects of both versions: an
    older object's rows count, their key holds null, and they add nothing to a sum, a min or a
    max; both engines agree, and a batch of older objects only is no error."""
    batches = {
        2: [
            write_version_1(tmp_path / "old-a.parquet", [("u1", 5), ("u2", 3)]),
            write(tmp_path / "new-a.parquet", [("u1", "fr", 7, 2.5), ("u2", None, 1, 0.5)]),
        ],
        4: [write_version_1(tmp_path / "old-b.parquet", [("u1", 9)])],
    }
    by_country = rollup(["country"])
    arrow = ArrowPartials(COLUMNS).compute(by_country, batches)
    assert arrow[2] == {'["fr"]': (1, 7, 2.5, 7), "[null]": (3, 9, 0.5, 5)}
    assert arrow[4] == {"[null]": (1, 9, None, 9)}  # no price at all: min of no value
    assert SparkPartials(spark, COLUMNS).compute(by_country, batches) == arrow
    by_user = rollup(["user_id"])
    assert ArrowPartials(COLUMNS).compute(by_user, batches) == SparkPartials(
        spark, COLUMNS
    ).compute(by_user, batches)
    assert ArrowPartials(COLUMNS).compute(by_user, batches)[4] == {'["u1"]': (1, 9, None, 9)}


def test_a_column_held_with_another_type_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "odd.parquet"
    pq.write_table(pa.table({"user_id": ["u1"], "amount": ["5"]}), path)
    with pytest.raises(RetypedColumnError, match="amount"):
        ArrowPartials(COLUMNS).compute(rollup(["user_id"]), {1: [str(path)]})


def test_read_files_reads_by_name_and_knows_its_types_without_files() -> None:
    wanted = column_specs(rollup(["country"]), COLUMNS)
    assert [c.name for c in wanted] == ["country", "amount", "price"]
    empty = read_files([], wanted)
    assert empty.num_rows == 0
    assert [str(f.type) for f in empty.schema] == ["string", "int64", "double"]
    with pytest.raises(ValueError, match="not columns of the schema"):
        column_specs(rollup(["country"]), COLUMNS[:2])
