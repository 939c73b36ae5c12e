"""Notifications discovery and an object rewritten in place, on both store backends with S3
and SQS on the loopback server: an event whose ETag is not its claim's (whatever the size) is
a change, recorded once; ignored, or its new version made a claimed unit once (`on_change`);
the backstop listing sees a change whose event was lost."""

from __future__ import annotations

from typing import Any

import pytest

from resources.coordination.source_changes import APPENDED, PENDING, REPLACED
from resources.ingestion.reconciliation import ReconcileState
from resources.ingestion.work_units import replaced_by, unit_of, version_unit_key
from resources.stores.base import CoordinationStore
from tests.notifications.test_notification_discovery import STREAM, drain, tick
from tests.support.s3_notifications import NotifiedBucket, s3_message

KEY = "2026/k.jsonl"
SAME_SIZE = b'{"id": "y"}\n'
OTHER_SIZE = b'{"id": "yy"}\n'


@pytest.fixture
def bucket(aws_server: Any) -> NotifiedBucket:
    return NotifiedBucket(aws_server.endpoint_url)


def held_by(store: CoordinationStore) -> str:
    return store.object_claims(store.source_identifier(STREAM), [KEY])[KEY].unit


@pytest.mark.parametrize("body", [SAME_SIZE, OTHER_SIZE], ids=["same", "other"])
def test_ignore_records_a_reupload_once_and_makes_no_unit(
    store: CoordinationStore, bucket: NotifiedBucket, body: bytes
) -> None:
    bucket.send(s3_message(bucket.put(KEY)))
    drain(store, bucket)
    record = bucket.put(KEY, body)
    bucket.send(s3_message(record), s3_message(record))  # and a redelivery
    counts = drain(store, bucket)
    assert counts["changed"] >= 1  # once per tick that saw it: still one record
    sid = store.source_identifier(STREAM)
    (change,) = store.source_changes(sid)
    etag = record["s3"]["object"]["eTag"]
    assert (change.key, change.etag, change.size, change.state) == (KEY, etag, len(body), PENDING)
    assert [i.partition_key for i in store.iter_items(sid)] == [KEY]
    assert held_by(store) == KEY


@pytest.mark.parametrize("body", [SAME_SIZE, OTHER_SIZE], ids=["same", "other"])
@pytest.mark.parametrize("on_change", ["append", "replace"])
def test_append_and_replace_claim_the_new_version_for_a_unit_of_its_own_once(
    store: CoordinationStore, bucket: NotifiedBucket, body: bytes, on_change: str
) -> None:
    bucket.send(s3_message(bucket.put(KEY)))
    drain(store, bucket, on_change=on_change)
    record = bucket.put(KEY, body)
    etag = record["s3"]["object"]["eTag"]
    bucket.send(s3_message(record))
    step = tick(store, bucket, on_change=on_change)
    version = version_unit_key(KEY, etag)
    assert step.counts["changed"] == 1 and step.found.source_keys == [version]
    sid = store.source_identifier(STREAM)
    item = store.get(sid, version)
    assert item is not None and [(o.key, o.etag) for o in unit_of(item).objects] == [(KEY, etag)]
    assert held_by(store) == version
    assert [c.state for c in store.source_changes(sid)] == [
        APPENDED if on_change == "append" else REPLACED
    ]
    assert replaced_by(item.progress) == (None if on_change == "append" else (KEY, KEY))
    bucket.send(s3_message(record))  # redelivered: the version is held now
    again = drain(store, bucket, on_change=on_change)
    assert again["duplicates"] == 1 and again["changed"] == 0
    assert len(list(store.iter_items(sid))) == 2


def test_the_backstop_pass_finds_a_change_whose_event_was_lost(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    bucket.send(s3_message(bucket.put(KEY)))
    drain(store, bucket)
    record = bucket.put(KEY, SAME_SIZE)  # its event never sent
    step = tick(store, bucket, backstop=ReconcileState(), on_change="append")
    assert step.backstop.changed == 1
    version = version_unit_key(KEY, record["s3"]["object"]["eTag"])
    assert step.backstop.created == [] and step.found.source_keys == [version]
    assert held_by(store) == version
