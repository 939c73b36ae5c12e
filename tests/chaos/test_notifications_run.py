"""`leasehold run` discovering by S3 event notifications (issue 35), on both store backends.

Sources on the loopback S3 under keys in random order (hashed prefixes), their events on an SQS
queue as a live bucket would send them — shuffled, some twice, some wrapped by SNS or
EventBridge, some never sent (lost), and events for objects outside the stream's prefix. The
first `leasehold run` is SIGKILLed at the most dangerous moment: its tick has created the units
of the messages it received and not deleted one message yet (`tests/support/pausing_queue.py`).
The next runs receive those messages again once their visibility times out, find their objects
held and drop them; the backstop pass (due at a stream's first tick, then every
`backstop_interval`) finds the objects whose events were lost. Then (on SQLite: the DynamoDB
store makes no other call for it) a second wave lands with its events, among them a re-upload
of an ingested key (each backend's re-upload tests are in `tests/notifications`). The published
Iceberg table, read with pyiceberg and polars, holds every well-formed record exactly once, and
nothing from outside the prefix.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.ingestion.sample_data import record_line
from tests.support.aws_server import AWS_TEST_ENV
from tests.support.cli_project import CliProject, cli_project, kill_group
from tests.support.pipeline_env import STREAM, source_ids
from tests.support.s3_notifications import (
    NotifiedBucket,
    eventbridge,
    s3_message,
    s3_record,
    sns_wrapped,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

OBJECTS, RECORDS, MALFORMED_EVERY = 24, 6, 13
AT = datetime(2026, 1, 2, 12, tzinfo=timezone.utc)
VISIBILITY_S = 3
LEASE_TIMEOUT_S = 6.0


def hashed(key: str) -> str:
    """A key in random order, as producers spreading load write them."""
    return f"{hashlib.sha1(key.encode()).hexdigest()[:4]}/{key}"


@pytest.fixture(params=["sqlite", "dynamodb"])
def project(request: pytest.FixtureRequest, aws_server: Any, tmp_path: Path) -> CliProject:
    endpoint = aws_server.endpoint_url
    project = cli_project(
        tmp_path / "project",
        request.param,
        objects=OBJECTS,
        records_per_object=RECORDS,
        malformed_every=MALFORMED_EVERY,
        chunk_size=4,
        lease_timeout_s=LEASE_TIMEOUT_S,
        dynamodb_endpoint_url=endpoint,
        partition={"max_objects": 3},
    )
    bucket = NotifiedBucket(endpoint)
    project.bucket = bucket  # type: ignore[attr-defined]
    project.streams_path.write_text(
        f"""
streams:
  {STREAM}:
    source: s3://{bucket.bucket}/events
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: file://{project.root / "lake"}
    partition: {{max_objects: 3}}
    discovery: {{mode: notifications, queue: '{bucket.queue_url}', backstop_interval: P1D}}
"""
    )
    project.env.update(
        AWS_TEST_ENV,
        LEASEHOLD_S3_ENDPOINT_URL=endpoint,
        LEASEHOLD_NOTIFICATION_WAIT_SECONDS="0",  # the loopback server serves one at a time
        LEASEHOLD_NOTIFICATION_VISIBILITY_SECONDS=str(VISIBILITY_S),
    )
    return project


def upload(project: CliProject, paths: list[Path]) -> list[tuple[str, dict[str, Any]]]:
    """Each file under a random-order key: (its full key, its S3 event record)."""
    bucket: NotifiedBucket = project.bucket  # type: ignore[attr-defined]
    uploaded = []
    for path in paths:
        key = hashed(path.relative_to(project.sources).as_posix())
        uploaded.append((f"{bucket.prefix}/{key}", bucket.put(key, path.read_bytes())))
    return uploaded


def published_ids(project: CliProject) -> Counter[str]:
    """The table at its current snapshot, read by pyiceberg and by polars (they must agree)."""
    settings = CatalogSettings(
        iceberg_catalog_path=str(project.root / "data" / "iceberg" / "catalog.db")
    )
    target = target_for(settings, ICEBERG)
    assert isinstance(target, IcebergTarget)
    snapshot = target.load(STREAM).metadata.current_snapshot_id
    read = target.read(STREAM, None, snapshot, columns=["event_id"])
    ids = Counter(read.column(0).to_pylist())
    frame = pl.scan_iceberg(target.load(STREAM), snapshot_id=snapshot)
    assert Counter(frame.select("event_id").collect()["event_id"].to_list()) == ids
    return ids


def run_until_published(project: CliProject, expected: Counter[str]) -> None:
    for _ in range(3):
        code, output = project.run("run")
        assert code == 0, output[-3000:]
        if published_ids(project) == expected:
            return
        time.sleep(VISIBILITY_S)
    ids = published_ids(project)
    lost, twice = set(expected) - set(ids), [k for k, n in ids.items() if n > 1]
    raise AssertionError(
        f"{len(lost)} lost, {len(twice)} twice, {len(set(ids) - set(expected))} extra"
    )


def test_every_record_once_whatever_the_events(project: CliProject, tmp_path: Path) -> None:
    bucket: NotifiedBucket = project.bucket  # type: ignore[attr-defined]
    rng = random.Random(35)
    uploaded = upload(project, sorted(project.sources.rglob("*.jsonl")))
    rng.shuffle(uploaded)
    sent = uploaded[6:]  # the first six events are lost: only the backstop pass finds those
    bodies = [s3_message(record) for _, record in sent]
    bodies += [sns_wrapped(s3_message(record)) for _, record in sent[:6]]
    bodies += [eventbridge(bucket.bucket, key, 1) for key, _ in sent[6:9]]
    stray = (record_line(10**9, AT) + "\n").encode()
    bucket.s3.put_object(Bucket=bucket.bucket, Key="elsewhere/x.jsonl", Body=stray)
    bodies.append(s3_message(s3_record(bucket.bucket, "elsewhere/x.jsonl", len(stray))))
    rng.shuffle(bodies)
    bucket.send(*bodies)

    marker = tmp_path / "paused"
    killed = project.start("run", wrapper=("tests.support.pausing_queue", str(marker)))
    deadline = time.monotonic() + 180
    while not marker.exists():
        assert killed.poll() is None, project.tail()
        assert time.monotonic() < deadline, "the first run never reached a message deletion"
        time.sleep(0.2)
    kill_group(killed)
    assert bucket.waiting() >= len(bodies) - 1  # nothing was deleted
    time.sleep(LEASE_TIMEOUT_S)  # the killed tick's supplier lease, and the messages' visibility

    expected = source_ids(project.sources)
    run_until_published(project, expected)
    assert bucket.waiting() == 0

    code, status = project.run("status")
    assert code == 0 and "S3 events since discovery by notifications began" in status, status
    assert "duplicates" in status  # the redelivered messages of the killed run
    if project.settings.backend != "sqlite":
        return  # the second wave adds no store operation the first did not make: once is enough

    # A second wave with its events, and an ingested key uploaded again (its event dropped).
    wave = project.sources / "wave"
    wave.mkdir()
    for i in range(4):
        (wave / f"w{i}.jsonl").write_text(
            "\n".join(record_line(5_000_000 + 10 * i + j, AT) for j in range(RECORDS)) + "\n"
        )
    new = upload(project, sorted(wave.glob("*.jsonl")))
    again = upload(project, [sorted(project.sources.rglob("part-*.jsonl"))[0]])
    bucket.send(*(s3_message(record) for _, record in [*new, *again]))
    run_until_published(project, source_ids(project.sources))
