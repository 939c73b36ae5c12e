"""Garbage collection racing a reader of the previous version, with real processes, on both
backends (SQLite + a local lake; DynamoDB + S3, over HTTP): the acceptance of issue 14.

A reader process holds version v of a table partition (a live manifest of its small objects)
and reads all of v's files again and again while this process publishes v+1 (the switch to a
merged object) and v+2 (the open range rewritten with later objects), by hand through the
ledger and real manifests, and runs the collector over and over with a short safety delay.
The reader never finds a file missing while v is retained (until v+1 has been current for the
delay); once the delay has passed, v's files are deleted — and the reader, still reading,
notices, which shows its check was live all along.
"""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest

from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.publication.garbage import GarbageCollector
from resources.publication.manifest import read_spectrum
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.child_processes import child_processes, spawn_child, wait_for
from tests.support.publication_lake import Lake, stream_config

pytestmark = pytest.mark.slow

DELAY_S = 2.0
LIMIT_S = 45.0
"""The whole race, bounded: the reader stops by then whatever happens."""


def now_ms() -> int:
    return int(time.time() * 1000)


@pytest.fixture
def reader() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


def lake_objects(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> tuple[ObjectStore, str | None]:
    """The table's store and its S3 endpoint (None: local)."""
    if backend == "sqlite":
        return object_store_for(f"file://{tmp_path / 'lake' / 'events'}"), None
    server = request.getfixturevalue("aws_server")
    bucket = f"lake-{uuid.uuid4().hex[:10]}"
    boto3.client("s3", endpoint_url=server.endpoint_url, region_name="us-east-1").create_bucket(
        Bucket=bucket
    )
    url = f"s3://{bucket}/tables/events"
    return object_store_for(url, endpoint_url=server.endpoint_url), server.endpoint_url


def test_gc_never_deletes_what_a_reader_of_the_previous_version_reads(
    backend: str,
    settings_for: Callable[..., StoreSettings],
    tmp_path: Path,
    request: pytest.FixtureRequest,
    reader: list[subprocess.Popen[bytes]],
) -> None:
    started = time.monotonic()
    store = build_store(settings_for(backend))
    objects, endpoint_url = lake_objects(backend, tmp_path, request)
    lake = Lake(store, objects)
    gc_now: list[int] = []  # the moment each collection judged ages and retention at

    def clock_ms() -> int:
        gc_now.append(now_ms())
        return gc_now[-1]

    collector = GarbageCollector(
        stream_config(objects.root_url), store, objects, safety_delay_s=DELAY_S, clock_ms=clock_ms
    )

    lake.ingest(1000, 2000, 3000)
    v = lake.publish(False, 3)
    v_files = {lake.key(e.url) for e in read_spectrum(objects, v.location)}
    v_files |= {k for k in lake.keys() if k.startswith(lake.key(v.location))}
    assert len(v_files) == 5  # three small objects, two manifests

    files = {n: tmp_path / n for n in ("stop", "ready", "saw_missing", "out")}
    payload = {
        "root_url": objects.root_url,
        "endpoint_url": endpoint_url,
        "location": v.location,
        "limit_s": LIMIT_S,
        **{name: str(path) for name, path in files.items()},
    }
    proc = spawn_child(reader, "gc_reader_child", payload)
    wait_for(files["ready"], proc)

    # v+1: the switch to the merged object; from its publication v is retained DELAY_S more.
    lake.merge(0, 3, size=6000)
    lake.close()
    v1 = lake.publish(True, 3)
    v_expires_ms = v1.published_at_ms + int(DELAY_S * 1000)
    runs: list[tuple[int, bool]] = []  # (when a run started, were all of v's files there after)
    v2 = None
    while time.monotonic() - started < LIMIT_S - 10:
        report = collector.collect()
        assert report.ok, report.describe()
        present = v_files <= lake.keys()
        runs.append((gc_now[-1], present))
        if not present and lake.keys().isdisjoint(v_files):
            break
        if v2 is None and now_ms() > v1.published_at_ms + 500:
            # v+2: later objects, the open range rewritten, published again.
            lake.ingest(500, 500)
            lake.merge(0, 5, size=7000)
            v2 = lake.publish(True, 5)
        time.sleep(0.05)
    wait_for(files["saw_missing"], proc, limit_s=10)
    files["stop"].touch()
    proc.wait(30)
    assert proc.returncode == 0
    seen = json.loads(files["out"].read_text())

    # GC: v's files were all there after every run that started while v was retained, and all
    # gone once the delay had passed.
    assert v2 is not None
    early = [present for at, present in runs if at < v_expires_ms]
    assert early and all(early), runs
    assert lake.keys().isdisjoint(v_files)
    assert [p.seq for p in store.publications("events", lake.dt)][-1] == v2.seq
    assert {lake.key(e.url) for e in read_spectrum(objects, v2.location)} <= lake.keys()

    # The reader: many complete reads of v, some after v+1 was published, and no failure at all
    # before v stopped being retained.
    assert seen["rounds"] >= 10 and seen["last_ok_ms"] > v1.published_at_ms, seen["rounds"]
    assert seen["failures"], "the reader never noticed v's files were gone"
    premature = [f for f in seen["failures"] if f["at_ms"] < v_expires_ms]
    assert not premature, premature[:3]
    assert time.monotonic() - started < 60
