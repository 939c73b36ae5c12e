"""The data path in Spark tasks: each task fetches its objects from the source store, parses
them and writes the table and quarantine objects straight to their final stores; the driver
gets metadata only. On a local directory and on S3 (the loopback server), with real Spark."""

from __future__ import annotations

import gzip
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import boto3
import pyarrow.parquet as pq
import pytest

from resources.ingestion.split_plan import pack_tasks, unit_parts
from resources.ingestion.split_task import StoreAddress
from resources.ingestion.task_reader import TaskReader
from resources.ingestion.work_units import UnitObject
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.schema.columns import ColumnSpec
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import followed_config
from resources.streams import StreamConfig
from tests.support.aws_server import LocalAwsServer

STREAM = "events"
COLUMNS = (
    ColumnSpec("event_id", "string"),
    ColumnSpec("amount", "double"),
    ColumnSpec("event_time", "timestamp"),
)


def record(i: int, day: int = 1, **more: Any) -> str:
    return json.dumps(
        {"event_id": f"e{i}", "amount": i, "event_time": f"2026-01-0{day}T10:00:00Z", **more}
    )


@pytest.fixture(params=["local", "s3"])
def lake(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """Source, table and quarantine URLs and the stores behind them, local or on S3."""
    if request.param == "local":
        urls = {role: f"file://{tmp_path / role}" for role in ("source", "table", "quarantine")}
        endpoint = None
    else:
        server: LocalAwsServer = request.getfixturevalue("aws_server")
        endpoint = server.endpoint_url
        bucket = f"lake-{uuid.uuid4().hex[:8]}"
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        s3.create_bucket(Bucket=bucket)
        urls = {role: f"s3://{bucket}/{role}" for role in ("source", "table", "quarantine")}
    stores = StoreAddress(urls["source"], urls["table"], urls["quarantine"], endpoint, None)
    return {
        "stores": stores,
        **{r: object_store_for(u, endpoint_url=endpoint) for r, u in urls.items()},
    }


def config_of(stores: StoreAddress, mode: str = "ignore") -> StreamConfig:
    return StreamConfig(
        name=STREAM,
        source=stores.source,
        format="jsonl",
        columns=COLUMNS,
        event_time="event_time",
        table=stores.table,
        quarantine=stores.quarantine,
        record_id="event_id",
        schema_evolution=mode,
    )


def put(source: ObjectStore, key: str, lines: list[str], gz: bool = False) -> UnitObject:
    data = ("\n".join(lines) + "\n").encode()
    source.put_bytes(key, gzip.compress(data) if gz else data)
    return UnitObject(key, len(data))


def rows_of(store: ObjectStore, urls: list[str]) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = []
    for url in urls:
        key = store.key_of(url)
        found += pq.read_table(store.local_copy(key, Path("/tmp") / uuid.uuid4().hex)).to_pylist()
    return found


def test_tasks_write_each_units_objects_straight_to_their_stores(
    spark: Any, lake: dict[str, Any]
) -> None:
    source = lake["source"]
    unit_a = [
        put(source, "a/1.jsonl", [record(1), record(2, day=2)]),
        put(source, "a/2.jsonl.gz", [record(3), "{truncated"], gz=True),
        put(source, "a/3.jsonl.gz", []),
    ]
    source.put_bytes("a/3.jsonl.gz", b"not gzip at all")
    unit_b = [put(source, "b/1.jsonl", [record(4, day=3)]), UnitObject("b/missing.jsonl", 10)]
    reader = TaskReader(spark, config_of(lake["stores"]), lake["stores"])

    results = reader.read({"a/1.jsonl": unit_a, "b/1.jsonl": unit_b}, "attempt1")

    a, b = results["a/1.jsonl"], results["b/1.jsonl"]
    assert a.failed == {"a/3.jsonl.gz": "named .gz but is not gzip data"}
    assert set(b.failed) == {"b/missing.jsonl"} and "cannot fetch" in b.failed["b/missing.jsonl"]
    assert (a.rows_read, a.rows_quarantined, b.rows_read) == (4, 1, 1)
    table_root = lake["stores"].table
    assert all(f.url.startswith(table_root) and "attempt1" in f.url for f in a.table_files)
    assert sorted(f.dt for f in a.table_files) == ["2026-01-01", "2026-01-02"]
    ids = Counter(r["event_id"] for r in rows_of(lake["table"], [f.url for f in a.table_files]))
    assert ids == Counter(["e1", "e2", "e3"])
    # Each table object says which source objects its rows came from, in row order.
    by_dt = {f.dt: f for f in a.table_files}
    assert by_dt["2026-01-01"].sources == (("a/1.jsonl", 1), ("a/2.jsonl.gz", 1))
    assert by_dt["2026-01-02"].sources == (("a/1.jsonl", 1),)
    day1 = rows_of(lake["table"], [by_dt["2026-01-01"].url])
    assert [r["event_id"] for r in day1] == ["e1", "e3"]
    assert [f.sources for f in b.table_files] == [(("b/1.jsonl", 1),)]
    (bad,) = rows_of(lake["quarantine"], [f.url for f in a.quarantine_files])
    assert (bad["source_key"], bad["line"], bad["raw"]) == ("a/2.jsonl.gz", 2, "{truncated")


def test_fields_outside_the_schema_follow_the_streams_mode(
    spark: Any, lake: dict[str, Any], store: CoordinationStore
) -> None:
    """`ignore` counts them, `fail` keeps their object out, `add` records the next schema
    version and writes the objects with it."""
    source = lake["source"]
    unit = [
        put(source, "u/1.jsonl", [record(1)]),
        put(source, "u/2.jsonl", [record(2), record(3, country="NO")]),
    ]
    stores = lake["stores"]

    ignored = TaskReader(spark, config_of(stores, "ignore"), stores).read({"u": unit}, "i")["u"]
    assert ignored.unknown_fields == {"country": 1} and ignored.rows_read == 3

    failed = TaskReader(spark, config_of(stores, "fail"), stores).read({"u": unit}, "f")["u"]
    assert list(failed.failed) == ["u/2.jsonl"] and "country" in failed.failed["u/2.jsonl"]
    assert failed.rows_read == 1

    reader = TaskReader(
        spark,
        followed_config(store, config_of(stores, "add")),  # version 1 recorded, as a run does
        stores,
        record_schema=lambda columns, origin: store.record_schema(STREAM, columns, origin),
    )
    added = reader.read({"u": unit}, "a")["u"]
    assert added.new_columns == ["country"] and added.schema_version == 2
    rows = rows_of(lake["table"], [f.url for f in added.table_files])
    assert sorted((r["event_id"], r["country"]) for r in rows) == [
        ("e1", None),
        ("e2", None),
        ("e3", "NO"),
    ]
    assert {f.schema_version for f in added.table_files} == {2}


def test_a_unit_is_cut_the_same_way_whatever_shares_its_chunk() -> None:
    """A retry commits the same objects per date in the same order (`unit_commit` skips what
    an interrupted attempt committed by counting them): a unit's parts depend on it alone."""
    objects = [UnitObject(f"k{i}", 10 << 20) for i in range(7)]
    alone = unit_parts("u", objects)
    assert [len(p.pieces) for p in alone] == [3, 3, 1]
    others = [UnitObject(f"o{i}", 5 << 20) for i in range(3)]
    parts = unit_parts("o", others) + unit_parts("u", objects)
    assert [p for p in parts if p.unit == "u"] == alone
    sizes = {o.key: o.size for o in objects + others}
    for cores in (1, 2, 8):
        tasks = pack_tasks(parts, sizes, cores)
        assert [p for task in tasks for p in task] == parts
