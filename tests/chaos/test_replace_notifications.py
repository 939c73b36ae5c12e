"""`on_change: replace` with discovery by S3 event notifications, on both store backends: keys
uploaded again on the loopback S3 — one with the same size, one with another, one twice — and
their events sent; `leasehold run` SIGKILLed while it ingests the replacements, then run until
it converges. The Iceberg table, read with pyiceberg and polars, holds each object's last
content exactly once and nothing of the earlier ones, and every change is recorded replaced.
"""

from __future__ import annotations

import json
import random
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.coordination.items import PartitionStatus
from resources.coordination.source_changes import REPLACED
from resources.ingestion.work_units import VERSION_MARK
from tests.support.aws_server import AWS_TEST_ENV
from tests.support.cli_project import CliProject, cli_project, kill_group
from tests.support.s3_notifications import NotifiedBucket, s3_message

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

STREAM = "events"
LEASE_TIMEOUT_S = 5.0
KILLS = 3


def body(obj: int, rev: int, rows: int) -> bytes:
    lines = [
        {"order_id": f"o{obj}-{i:02d}", "rev": rev, "event_time": f"2026-11-0{1 + i % 2}T10:00:00Z"}
        for i in range(rows)
    ]
    return "".join(json.dumps(r) + "\n" for r in lines).encode()


@pytest.fixture(params=["sqlite", "dynamodb"])
def project(request: pytest.FixtureRequest, aws_server: Any, tmp_path: Path) -> CliProject:
    endpoint = aws_server.endpoint_url
    project = cli_project(
        tmp_path / "project", request.param, objects=0, records_per_object=0, malformed_every=0,
        chunk_size=4, lease_timeout_s=LEASE_TIMEOUT_S, dynamodb_endpoint_url=endpoint,
    )  # fmt: skip
    bucket = NotifiedBucket(endpoint)
    project.bucket = bucket  # type: ignore[attr-defined]
    project.streams_path.write_text(
        f"""
streams:
  {STREAM}:
    source: s3://{bucket.bucket}/events
    format: jsonl
    schema: {{order_id: string, rev: long, event_time: timestamp}}
    event_time: event_time
    record_id: order_id
    dedupe: {{mode: first}}
    on_change: replace
    table: file://{project.root / "lake"}
    discovery: {{mode: notifications, queue: '{bucket.queue_url}', backstop_interval: P1D}}
"""
    )
    project.env.update(
        AWS_TEST_ENV,
        LEASEHOLD_S3_ENDPOINT_URL=endpoint,
        LEASEHOLD_NOTIFICATION_WAIT_SECONDS="0",
        LEASEHOLD_NOTIFICATION_VISIBILITY_SECONDS="3",
    )
    return project


def published(project: CliProject) -> Counter[tuple[str, int]]:
    """(order_id, rev) at the current snapshot, by pyiceberg and by polars (they must agree)."""
    settings = CatalogSettings(
        iceberg_catalog_path=str(project.root / "data" / "iceberg" / "catalog.db")
    )
    target = target_for(settings, ICEBERG)
    assert isinstance(target, IcebergTarget)
    snapshot = target.load(STREAM).metadata.current_snapshot_id
    read = target.read(STREAM, None, snapshot, columns=["order_id", "rev"])
    rows = Counter(zip(read.column(0).to_pylist(), read.column(1).to_pylist(), strict=True))
    frame = pl.scan_iceberg(target.load(STREAM), snapshot_id=snapshot).collect()
    assert Counter(zip(frame["order_id"], frame["rev"], strict=True)) == rows
    return rows


def test_reuploads_replace_their_rows_once_through_kills(project: CliProject) -> None:
    bucket: NotifiedBucket = project.bucket  # type: ignore[attr-defined]
    current = {obj: body(obj, 0, 20) for obj in range(4)}
    bucket.send(*(s3_message(bucket.put(f"o{o}.jsonl", b)) for o, b in current.items()))
    code, output = project.run("run")
    assert code == 0, output[-3000:]

    # o0 again with the same size, o1 with fewer records, o2 twice (the last one counts).
    current |= {0: body(0, 1, 20), 1: body(1, 1, 12), 2: body(2, 2, 25)}
    assert len(current[0]) == len(body(0, 0, 20))
    events = [bucket.put("o2.jsonl", body(2, 1, 30))]
    events += [bucket.put(f"o{o}.jsonl", current[o]) for o in (0, 1, 2)]
    bucket.send(*(s3_message(e) for e in events))
    rng, store, landed = random.Random(45), project.store(), 0
    try:
        sid = store.source_identifier(STREAM)
        for _ in range(KILLS * 3):
            if landed == KILLS:
                break
            proc = project.start("run")
            while proc.poll() is None and not any(
                VERSION_MARK in i.partition_key and i.epoch for i in store.iter_items(sid)
            ):
                time.sleep(0.1)
            try:
                proc.wait(rng.uniform(0.0, 3.0))
            except subprocess.TimeoutExpired:
                kill_group(proc)
                landed += 1
        time.sleep(LEASE_TIMEOUT_S + 0.5)
        for _ in range(4):
            code, output = project.run("run")
            items = list(store.iter_items(sid))
            changes = store.source_changes(sid)
            if code == 0 and all(i.status is PartitionStatus.COMPLETED for i in items):
                break
            time.sleep(3)  # redelivered events after their visibility
        assert code == 0, output[-3000:]
    finally:
        store.close_store()
    assert landed, "no kill landed while the replacements were ingested"
    assert not [i.partition_key for i in items if i.dead_letter_reason]
    assert {c.key for c in changes} == {"o0.jsonl", "o1.jsonl", "o2.jsonl"}
    assert {c.state for c in changes} == {REPLACED}
    want = Counter(
        (json.loads(line)["order_id"], json.loads(line)["rev"])
        for b in current.values()
        for line in b.decode().splitlines()
    )
    assert published(project) == want
    code, output = project.run("check")
    assert code == 0, output
