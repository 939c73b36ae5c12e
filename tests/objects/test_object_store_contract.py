"""Every object store backend passes the same suite: `[local]` and `[s3]` (over HTTP)."""

from __future__ import annotations

import io
import os
import time
import uuid
from pathlib import Path

import boto3
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.objects.base import ObjectStore, ObjectStoreError
from resources.objects.factory import object_store_for
from resources.objects.s3 import S3ObjectStore

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


def test_a_buffer_holds_what_the_bytes_hold_after_the_key_is_replaced(
    objects: ObjectStore,
) -> None:
    """`get_buffer` (a map of a local file) reads what `get_bytes` reads, the empty object
    too, and keeps that content though the key is replaced and removed after it."""
    objects.put_bytes("k/index", b"12345678" * 1000)
    objects.put_bytes("k/empty", b"")
    held = objects.get_buffer("k/index")
    assert bytes(objects.get_buffer("k/empty")) == b"" == objects.get_bytes("k/empty")
    objects.put_bytes("k/index", memoryview(b"other"))
    objects.delete("k/index")
    assert bytes(held) == b"12345678" * 1000


TRICKY = [
    "a.txt", "a/b.txt", "a/b/c.json", "a/b/c/d", "a/b-x", "a/b0", "a!", "a/ü", "a/z/.hidden",
    "b", "c/a.tmp", "c/d", "ab", "a/b/c.tmp",
]  # fmt: skip


def test_listing_after_a_cursor_is_key_order_from_anywhere(objects: ObjectStore) -> None:
    """Nested folders whose names sort around their files' (`a/b` holds `a/b/c`, beside
    `a/b.txt`, `a/b-x`, `a/b0`): a listing from any cursor, in any page size, is the keys after
    it in key order — what discovery's cursor depends on. Hidden and in-flight (`.tmp`) files
    of the local store are no objects."""
    for key in TRICKY:
        objects.put_bytes(key, b"x")
    listed = [o.key for o in objects.list_after(None, 1000)]
    if listed != sorted(TRICKY):  # the local store leaves out what is not an object
        assert listed == sorted(k for k in TRICKY if not k.endswith(".tmp") and "/." not in k)
    for cursor in [None, *listed, "a/b/", "a/b/c/", "a/a", "a/bz", "zzz"]:
        after = [k for k in listed if cursor is None or k > cursor]
        assert [o.key for o in objects.list_after(cursor, 1000)] == after, cursor
        assert [o.key for o in objects.list_after(cursor, 2)] == after[:2], cursor


def test_move_file_publishes_and_urls_map_back(objects: ObjectStore, tmp_path: Path) -> None:
    local = tmp_path / "part.parquet"
    pq.write_table(pa.table({"id": ["a", "b"]}), local)
    url = objects.move_file(local, "dt=2026-01-01/att-1.parquet")
    assert not local.exists()
    assert objects.key_of(url) == "dt=2026-01-01/att-1.parquet"
    assert objects.read_column([url], "id").to_pylist() == ["a", "b"]
    table = pq.read_table(io.BytesIO(objects.get_bytes("dt=2026-01-01/att-1.parquet")))
    assert table.num_rows == 2


def test_read_column_reads_by_name_across_schema_versions(
    objects: ObjectStore, tmp_path: Path
) -> None:
    """Objects of several schema versions: one lacking the column gives a null per row, typed
    as the others hold it; a column no object holds is all nulls; a dictionary-encoded one
    reads as its values."""
    older, newer, encoded = tmp_path / "v1.parquet", tmp_path / "v2.parquet", tmp_path / "d"
    pq.write_table(pa.table({"n": [1, 2, 3]}), older)
    pq.write_table(pa.table({"n": [4], "id": ["a"]}), newer)
    pq.write_table(pa.table({"id": pa.array(["b", "b"]).dictionary_encode()}), encoded)
    urls = [
        objects.move_file(older, "dt=2026-01-01/v1.parquet"),
        objects.move_file(newer, "dt=2026-01-01/v2.parquet"),
        objects.move_file(encoded, "dt=2026-01-01/d.parquet"),
    ]
    ids = objects.read_column(urls, "id")
    assert ids.type == pa.string()
    assert ids.to_pylist() == [None, None, None, "a", "b", "b"]
    assert objects.read_column(urls[:1], "id").to_pylist() == [None, None, None]
    assert objects.read_column([], "id").to_pylist() == []


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


def test_list_prefix_walks_a_prefix_in_key_order_across_pages(objects: ObjectStore) -> None:
    if isinstance(objects, S3ObjectStore):
        objects.list_page_size = 2  # several list requests, continued by token
    keys = [
        "_manifests/dt=2026-01-01/live-1/manifest.json",
        "_manifests/dt=2026-01-01/live-1/symlink/manifest",
        "dt=2026-01-01/a.parquet",
        "dt=2026-01-01/b.parquet",
        "dt=2026-01-02/c.parquet",
        "dt=2026-01-1x/d.parquet",
        "merged/dt=2026-01-01/1-abc/part.parquet",
        "merged/dt=2026-01-01/2-def/part.parquet",
    ]
    for key in reversed(keys):
        objects.put_bytes(key, key.encode())
    assert [o.key for o in objects.list_prefix("")] == sorted(keys)
    assert [o.key for o in objects.list_prefix("dt=2026-01-01/")] == keys[2:4]
    assert [o.key for o in objects.list_prefix("dt=2026-01-0")] == keys[2:5]
    assert [o.key for o in objects.list_prefix("dt=2026-01-")] == keys[2:6]
    assert [o.key for o in objects.list_prefix("merged/dt=2026-01-01/2")] == keys[7:]
    assert [o.key for o in objects.list_prefix("_manifests/dt=2026-01-01/live-1/")] == keys[:2]
    assert list(objects.list_prefix("nothing/")) == []
    assert list(objects.list_prefix("dt=2026-01-01/a")) == list(objects.list_after(keys[1], 1))
    assert {o.key: o.size for o in objects.list_prefix("")} == {k: len(k.encode()) for k in keys}


def test_list_prefix_of_an_empty_store_is_empty(objects: ObjectStore) -> None:
    assert list(objects.list_prefix("")) == []


def test_modified_ms_is_when_the_object_was_written(objects: ObjectStore, tmp_path: Path) -> None:
    before = int(time.time() * 1000)
    objects.put_bytes("dt=2026-01-01/put.bin", b"x")
    # A local file written long ago and published now is an object of now: its age decides
    # when garbage collection may take it for an orphan.
    local = tmp_path / "old.bin"
    local.write_bytes(b"y")
    os.utime(local, (before / 1000 - 86400, before / 1000 - 86400))
    objects.move_file(local, "dt=2026-01-01/moved.bin")
    after = int(time.time() * 1000)
    listed = {o.key: o.modified_ms for o in objects.list_prefix("dt=2026-01-01/")}
    assert listed.keys() == {"dt=2026-01-01/put.bin", "dt=2026-01-01/moved.bin"}
    for modified in listed.values():
        # S3's LastModified has whole seconds.
        assert before - 1000 <= modified <= after + 1000
    assert {o.key: o.modified_ms for o in objects.list_after(None, 10)} == listed


def test_head_bytes_reads_only_the_start(objects: ObjectStore) -> None:
    """`leasehold init` samples an object's head, never all of a large one."""
    objects.put_bytes("dir é/a b.jsonl.gz", b"0123456789")
    assert objects.head_bytes("dir é/a b.jsonl.gz", 4) == b"0123"
    assert objects.head_bytes("dir é/a b.jsonl.gz", 100) == b"0123456789"


def test_read_range_reads_that_range_only(objects: ObjectStore) -> None:
    """A Spark task reads its byte range of a large source object: inside, across the end,
    from the end, and empty."""
    objects.put_bytes("dir é/a b.jsonl", b"0123456789")
    assert objects.read_range("dir é/a b.jsonl", 2, 5) == b"234"
    assert objects.read_range("dir é/a b.jsonl", 7, 100) == b"789"
    assert objects.read_range("dir é/a b.jsonl", 10, 20) == b""
    assert objects.read_range("dir é/a b.jsonl", 4, 4) == b""


@pytest.fixture(params=["local", "s3"])
def archive(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    """A second store to copy into: a local directory, or another bucket on the same server."""
    if request.param == "local":
        return object_store_for(f"file://{tmp_path / 'archive'}")
    server = request.getfixturevalue("aws_server")
    bucket = f"a-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    return object_store_for(f"s3://{bucket}/kept", endpoint_url=server.endpoint_url)


def test_copy_to_copies_under_the_other_key_and_leaves_the_source(
    objects: ObjectStore, archive: ObjectStore
) -> None:
    """Within a backend and across them (S3 to S3 server-side; local to S3 and back through a
    local file): the bytes arrive whole, a copy replaces what was there, and an absent
    source writes nothing."""
    objects.put_bytes(KEYS[0], b"first")
    assert objects.copy_to(KEYS[0], archive, KEYS[0]) == 5
    assert archive.get_bytes(KEYS[0]) == b"first"
    assert objects.get_bytes(KEYS[0]) == b"first"
    objects.put_bytes(KEYS[0], b"second!")
    assert objects.copy_to(KEYS[0], archive, KEYS[0]) == 7  # again: harmless, replaces
    assert archive.get_bytes(KEYS[0]) == b"second!"
    assert objects.copy_to("no/such.json", archive, "no/such.json") is None
    assert archive.size("no/such.json") is None
    assert [o.key for o in archive.list_after(None, 10)] == [KEYS[0]]


def test_delete_many_removes_each_and_is_idempotent(objects: ObjectStore) -> None:
    for key in KEYS:
        objects.put_bytes(key, b"x")
    objects.delete_many([KEYS[0], KEYS[2], "absent.json"])
    assert [o.key for o in objects.list_after(None, 10)] == [KEYS[1], KEYS[3]]
    objects.delete_many([KEYS[0], KEYS[1], KEYS[3]])
    objects.delete_many([])
    assert objects.list_after(None, 10) == []


def test_delete_many_crosses_batches(objects: ObjectStore, monkeypatch: pytest.MonkeyPatch) -> None:
    import resources.objects.s3 as s3

    monkeypatch.setattr(s3, "DELETE_BATCH", 2)
    keys = [f"k/{i:02d}" for i in range(5)]
    for key in keys:
        objects.put_bytes(key, b"x")
    objects.delete_many(keys[:4])
    assert [o.key for o in objects.list_after(None, 10)] == keys[4:]
