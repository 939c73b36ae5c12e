"""`leasehold init`'s sample: bounded heads of objects spread over the listing, local and S3."""

from __future__ import annotations

import gzip
import json
import uuid
from pathlib import Path

import boto3
import pytest

from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.stream_inference import SourceInferenceError, parse_csv
from resources.ingestion.stream_sampling import sample_source, stage_sample
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for


@pytest.fixture(params=["local", "s3"])
def objects(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return object_store_for(f"file://{tmp_path / 'root'}")
    server = request.getfixturevalue("aws_server")
    bucket = f"b-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    return object_store_for(f"s3://{bucket}/src", endpoint_url=server.endpoint_url)


def lines(n: int, start: int = 0) -> bytes:
    return "".join(
        json.dumps({"id": i, "pad": "x" * 50}) + "\n" for i in range(start, start + n)
    ).encode()


def test_heads_are_bounded_and_cut_at_a_line_end(objects: ObjectStore, tmp_path: Path) -> None:
    for i in range(10):
        data = lines(200, i * 200)
        key = f"2026/01/0{i % 3 + 1}/part {i} ü.jsonl" + (".gz" if i % 2 else "")
        objects.put_bytes(key, gzip.compress(data) if i % 2 else data)
    objects.put_bytes("2026/_SUCCESS", b"")
    sample = sample_source(objects, sample_objects=4, sample_bytes=4096)
    assert len(sample.listed) == 11 and sample.complete
    assert len(sample.sampled) == 4
    keys = [o.key for o in sample.sampled]
    assert keys == sorted(keys) and len({k.split("/")[2] for k in keys}) > 1  # spread out
    for obj in sample.sampled:
        assert 0 < len(obj.text) <= 4096 and obj.text.endswith("\n")
        assert all(json.loads(line)["pad"] for line in obj.text.splitlines())
        assert obj.format.format == "jsonl" and obj.format.problem is None
    staged = stage_sample(sample.sampled, tmp_path / "staged")
    assert sorted(p.name for p in staged.iterdir()) == [f"{i:07d}.txt" for i in range(4)]


def test_corrupt_gzip_and_empty_sources(objects: ObjectStore) -> None:
    with pytest.raises(SourceInferenceError, match="no objects under"):
        sample_source(objects, sample_objects=3)
    objects.put_bytes("a.csv", b"")
    with pytest.raises(SourceInferenceError, match="are all empty"):
        sample_source(objects, sample_objects=3)
    objects.put_bytes("b.csv.gz", b"\x1f\x8b" + b"\x00" * 30)
    (obj,) = sample_source(objects, sample_objects=3).sampled
    assert (obj.key, (obj.format.problem or "")[:12]) == ("b.csv.gz", "corrupt gzip")


def test_a_csv_head_ends_at_a_record_not_inside_a_quoted_line_break(
    objects: ObjectStore,
) -> None:
    rows = "".join(f'{i},"line one\r\nline two",2026-01-01T00:00:00Z\r\n' for i in range(100))
    data = ("id,text,at\r\n" + rows).encode()
    objects.put_bytes("a.csv", data)
    for cut in range(60, 140):  # every place the head's last line end can fall
        (obj,) = sample_source(objects, sample_objects=1, sample_bytes=cut).sampled
        sample = parse_csv({obj.key: obj.text}, CsvFormat())
        assert sample.malformed == 0 and obj.text.endswith("Z\r\n"), cut
