"""Every object store backend passes the same suite: `[local]` and `[s3]` (over HTTP)."""

from __future__ import annotations

import io
import uuid
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.objects.base import ObjectStore, ObjectStoreError, object_store_for

pytestmark = pytest.mark.contract

KEYS = ["2026/01/01/a b.json", "2026/01/01/c,d|e.json", "2026/01/02/[x]...y.json", "z/ü.json"]


@pytest.fixture(params=["local", "s3"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return object_store_for(f"file://{tmp_path / 'root'}")
    server = request.getfixturevalue("aws_server")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    return object_store_for(f"s3://{bucket}/prefix/x", endpoint_url=server.endpoint_url)


def test_put_get_list_in_key_order_after_a_cursor(objects: ObjectStore) -> None:
    for key in reversed(KEYS):
        objects.put_bytes(key, key.encode())
    assert [o.key for o in objects.list_after(None, 100)] == sorted(KEYS)
    assert [o.key for o in objects.list_after(KEYS[1], 100)] == sorted(KEYS)[2:]
    assert [o.key for o in objects.list_after(None, 2)] == sorted(KEYS)[:2]
    assert objects.list_after(sorted(KEYS)[-1], 10) == []
    assert objects.get_bytes(KEYS[2]) == KEYS[2].encode()
    assert {o.size for o in objects.list_after(None, 100)} == {len(k.encode()) for k in KEYS}


def test_move_file_publishes_and_urls_map_back(objects: ObjectStore, tmp_path: Path) -> None:
    local = tmp_path / "part.parquet"
    pq.write_table(pa.table({"id": ["a", "b"]}), local)
    url = objects.move_file(local, "dt=2026-01-01/att-1.parquet")
    assert not local.exists()
    assert objects.key_of(url) == "dt=2026-01-01/att-1.parquet"
    assert objects.read_column([url], "id") == ["a", "b"]
    table = pq.read_table(io.BytesIO(objects.get_bytes("dt=2026-01-01/att-1.parquet")))
    assert table.num_rows == 2


def test_local_copy_and_delete(objects: ObjectStore, tmp_path: Path) -> None:
    objects.put_bytes("k.json", b"{}")
    assert objects.local_copy("k.json", tmp_path / "scratch").read_bytes() == b"{}"
    objects.delete("k.json")
    objects.delete("k.json")  # idempotent
    assert objects.list_after(None, 10) == []
    with pytest.raises(ObjectStoreError):
        objects.local_copy("k.json", tmp_path / "scratch")


def test_urls_outside_the_root_are_refused(objects: ObjectStore) -> None:
    with pytest.raises(ObjectStoreError):
        objects.key_of("s3://elsewhere/x")


def test_size_is_the_length_or_none_when_absent(objects: ObjectStore) -> None:
    assert objects.size("dt=2026-01-01/none.parquet") is None
    objects.put_bytes("dt=2026-01-01/x.bin", b"12345")
    assert objects.size("dt=2026-01-01/x.bin") == 5
    objects.put_bytes("empty", b"")
    assert objects.size("empty") == 0
    objects.delete("dt=2026-01-01/x.bin")
    assert objects.size("dt=2026-01-01/x.bin") is None


@pytest.mark.parametrize("footer", ["small", "bigger than the first ranged read"])
def test_parquet_metadata_reads_the_footer(
    objects: ObjectStore, tmp_path: Path, footer: str
) -> None:
    # Many columns make a footer of more than 64 KiB: S3 then needs a second ranged read.
    width = 3 if footer == "small" else 600
    table = pa.table({f"column_{i:04d}": list(range(1000)) for i in range(width)})
    local = tmp_path / "m.parquet"
    pq.write_table(table, local, row_group_size=300)
    objects.move_file(local, "merged/part.parquet")
    meta = objects.parquet_metadata("merged/part.parquet")
    assert (meta.num_rows, meta.num_columns, meta.num_row_groups) == (1000, width, 4)


def test_parquet_metadata_refuses_what_is_not_parquet(objects: ObjectStore) -> None:
    objects.put_bytes("not.parquet", b"{}" * 20)
    with pytest.raises(ObjectStoreError, match="not a Parquet object"):
        objects.parquet_metadata("not.parquet")
    with pytest.raises(ObjectStoreError):
        objects.parquet_metadata("absent.parquet")
