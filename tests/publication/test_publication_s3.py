"""A table on S3 (the loopback server, over HTTP): the publisher writes its manifests beside
the objects, the reader resolves the partition through the catalog, lists the `symlink/`
directory in the bucket and reads the objects with `s3://` URLs, and the checks judge it with
HEADs and footer reads. Live publications only: the merge path is the local one's."""

from __future__ import annotations

import random
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import boto3

from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.objects.factory import object_store_for
from resources.publication import checks
from resources.publication.outcome import PUBLISHED
from resources.publication.publisher import Publisher
from resources.publication.reader import partition_files, read_partition
from resources.stores.base import CoordinationStore
from tests.support.merge_child import TABLE, Lake, commit_source, event_ids, write_small

DT = "2027-01-15"


def test_publish_read_and_check_a_table_on_s3(
    aws_server: Any, store: CoordinationStore, tmp_path: Path
) -> None:
    bucket = f"lake-{uuid.uuid4().hex[:8]}"
    endpoint = aws_server.endpoint_url
    boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1").create_bucket(Bucket=bucket)
    lake = Lake(settings={}, root=str(tmp_path), max_objects=1000, max_bytes=1 << 30)
    config = replace(lake.config(), table=f"s3://{bucket}/events")
    objects = object_store_for(config.table, endpoint_url=endpoint, region="us-east-1")
    catalog = HiveManifestsTarget(LocalCatalog(tmp_path / "catalog.json"))
    rng = random.Random(5)
    expected: Counter[str] = Counter()
    for n in range(3):
        key, rows = f"src/{n:04d}", rng.randint(2, 5)
        small = write_small(lake, key, DT, rows, rng)
        url = objects.move_file(Path(small.url[len("file://") :]), f"dt={DT}/{n}.parquet")
        commit_source(store, key, [replace(small, url=url)], merge_after_s=600.0)
        expected.update(event_ids(key, DT, rows))

    publisher = Publisher(config, store, objects, catalog)
    outcome = publisher.publish_one(DT)
    assert outcome.outcome == PUBLISHED and outcome.publication is not None
    assert outcome.publication.location.startswith(f"s3://{bucket}/events/_manifests/dt={DT}/")
    files = partition_files(catalog, TABLE, DT, s3_endpoint_url=endpoint, region="us-east-1")
    assert files == [o.url for o in store.ledger_objects(TABLE, DT)]
    rows = read_partition(catalog, TABLE, DT, s3_endpoint_url=endpoint, region="us-east-1")
    assert Counter(rows.column("event_id").to_pylist()) == expected
    outcomes = checks.run_all(config, store, objects, catalog)
    assert [o.summary for o in outcomes if not o.passed] == []

    objects.delete(objects.key_of(files[0]))  # an entry gone: the checks see it over HTTP too
    outcomes = checks.run_all(config, store, objects, catalog, full=True)  # no row moved
    failed = {o.name for o in outcomes if not o.passed}
    assert failed == {"manifest_entries_exist", "published_rows"}
