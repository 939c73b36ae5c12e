"""The two partial-aggregate engines agree, on the shapes rollups meet: several batches in one
Spark job, null keys and values, a rollup with no group_by, an empty batch."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.aggregation.partials import ArrowPartials, SizedPartials, SparkPartials, decode_key
from resources.rollup.spec import parse_rollups

SCHEMA = {"user_id": "string", "country": "string", "amount": "long", "price": "double"}


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
        arrow = ArrowPartials().compute(spec, batches)
        assert SparkPartials(spark).compute(spec, batches) == arrow
        assert (
            SizedPartials(lambda: spark, arrow_max_bytes=0).for_bytes(1).compute(spec, batches)
            == arrow
        )
    by_user = ArrowPartials().compute(rollup(["user_id"]), batches)
    assert by_user[3]['["u1"]'] == (2, 12, 1.5, 7)
    assert by_user[3]['["u2"]'] == (1, 0, 2.0, None)  # a sum of no value is 0, a max None
    assert decode_key(next(iter(by_user[5]))) == ["u1"]
    assert by_user[6] == {}
