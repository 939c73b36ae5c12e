"""Notifications discovery against SQS and S3 on the loopback AWS-compatible server, on both
store backends: every object that lands is in exactly one work unit, however its events arrive
(shuffled, repeated, SNS- or EventBridge-wrapped, lost, after a tick that died)."""

from __future__ import annotations

import random
import time
import uuid
from collections import Counter
from typing import Any

import pytest

from resources.coordination.supplier import caught_up_ms
from resources.ingestion.claimed_units import CLAIMING
from resources.ingestion.notification_discovery import NotificationDiscovery, NotificationStep
from resources.ingestion.reconciliation import ReconcileState
from resources.ingestion.work_units import plan_units, unit_of
from resources.stores.base import CoordinationStore
from tests.support.fakes import FakeClock
from tests.support.s3_notifications import (
    NotifiedBucket,
    eventbridge,
    s3_message,
    s3_record,
    sns_wrapped,
)

STREAM = "events"


@pytest.fixture
def bucket(aws_server: Any) -> NotifiedBucket:
    return NotifiedBucket(aws_server.endpoint_url)


def tick(
    store: CoordinationStore,
    bucket: NotifiedBucket,
    backstop: ReconcileState | None = None,
    queue: Any = None,
    **options: Any,
) -> NotificationStep:
    """One tick; by default the backstop pass is not due (it finished just now)."""
    options = {"unit_max_objects": 7, "max_messages": 15, "visibility_s": 1, **options}
    if backstop is None:
        backstop = ReconcileState(last_finished_ms=store.now_ms())
    return NotificationDiscovery(
        store,
        STREAM,
        queue or bucket.queue(),
        bucket.location(),
        "node-a",
        backstop_interval_s=3600,
        **options,
    ).discover(backstop)


def drain(store: CoordinationStore, bucket: NotifiedBucket, **options: Any) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _ in range(50):
        step = tick(store, bucket, **options)
        counts.update(step.counts)
        if step.counts["messages"] == 0:
            return counts
    raise AssertionError("the queue never drained")


def held_once(store: CoordinationStore, keys: list[str]) -> None:
    """Every key in exactly one unit, no other object in any, each claimed by its unit."""
    sid = store.source_identifier(STREAM)
    holders: Counter[str] = Counter()
    for item in store.iter_items(sid):
        holders.update(o.key for o in unit_of(item).objects)
    assert holders == Counter(keys)
    claims = store.object_claims(sid, keys)
    assert sorted(claims) == sorted(keys)
    for item in store.iter_items(sid):
        assert all(claims[o.key].unit == item.partition_key for o in unit_of(item).objects)


def random_keys(n: int) -> list[str]:
    return [f"{uuid.uuid4().hex[:2]}/part {i}+{uuid.uuid4().hex[:6]}.jsonl" for i in range(n)]


def test_events_in_random_key_order_become_units_once(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    keys = random_keys(40)
    records = [bucket.put(k) for k in keys]
    random.Random(7).shuffle(records)
    bucket.send(*(s3_message(r) for r in records))
    counts = drain(store, bucket)
    held_once(store, keys)
    assert counts["objects"] == 40 and counts["duplicates"] == 0
    assert bucket.waiting() == 0
    assert caught_up_ms(store, STREAM) is not None


def test_repeated_wrapped_and_reordered_events_are_dropped(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    keys = random_keys(12)
    records = [bucket.put(k) for k in keys]
    bodies = [s3_message(r) for r in records]
    bodies += [sns_wrapped(s3_message(r)) for r in records]
    bodies += [eventbridge(bucket.bucket, f"events/{k}", 11) for k in keys]
    random.Random(3).shuffle(bodies)
    bucket.send(*bodies[:20])
    first = drain(store, bucket)
    bucket.send(*bodies[20:], *bodies[:5])  # the rest, and some again (a redelivery)
    later = drain(store, bucket)
    held_once(store, keys)
    assert first["objects"] + later["objects"] == 12
    totals = store.read_global_state(STREAM, "discovery")["event_counts"]
    assert (
        totals["objects"] == 12
        and totals["duplicates"] == first["duplicates"] + later["duplicates"]
    )
    assert (
        first["duplicates"]
        + later["duplicates"]
        + first["repeated in the batch"]
        + later["repeated in the batch"]
        == len(bodies) + 5 - 12
    )
    assert bucket.waiting() == 0


def test_events_outside_the_source_removed_or_gone_are_counted_and_dropped(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    kept = bucket.put("2026/kept.jsonl")
    gone = bucket.put("2026/gone.jsonl")
    bucket.s3.delete_object(Bucket=bucket.bucket, Key="events/2026/gone.jsonl")
    gone["s3"]["object"].pop("size")  # an event without a size: a HEAD finds it gone
    bucket.s3.put_object(Bucket=bucket.bucket, Key="other/x.jsonl", Body=b"{}\n")
    removed = bucket.put("2026/removed.jsonl")
    bucket.send(
        s3_message(kept),
        s3_message(gone),
        s3_message(s3_record(bucket.bucket, "other/x.jsonl", 3)),
        s3_message(s3_record("another-bucket", "events/2026/kept.jsonl", 3)),
        s3_message(s3_record(bucket.bucket, "events/", 0)),  # a console "folder"
        s3_message(removed, s3_record(bucket.bucket, "events/2026/removed.jsonl", 0, False)),
        '{"Service": "Amazon S3", "Event": "s3:TestEvent", "Bucket": "b"}',
        "not json at all",
        '{"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}',
    )
    counts = drain(store, bucket)
    held_once(store, ["2026/kept.jsonl"])
    assert counts["outside the source"] == 3
    assert counts["deleted since"] == 1 and counts["removed"] == 1
    assert counts["not S3 events"] == 2
    assert bucket.waiting() == 0


def test_lost_events_are_found_by_the_backstop_pass(
    store: CoordinationStore, bucket: NotifiedBucket, clock: FakeClock
) -> None:
    announced = [f"a/{i:03d}.jsonl" for i in range(10)]
    lost = [f"b/{i:03d}.jsonl" for i in range(25)]
    bucket.send(*(s3_message(bucket.put(k)) for k in announced))
    for k in lost:
        bucket.put(k)
    drain(store, bucket)
    held_once(store, announced)
    state = ReconcileState(last_finished_ms=store.now_ms())
    clock.advance(3601)  # the pass is due: it lists 15 keys a tick, held or not
    while True:
        step = tick(store, bucket, backstop=state)
        state = step.backstop.state
        if step.backstop.finished_pass:
            break
    held_once(store, announced + lost)
    assert not tick(store, bucket, backstop=state).backstop.listed  # not due again yet


def test_a_reupload_under_an_ingested_key_is_not_ingested_again(
    store: CoordinationStore, bucket: NotifiedBucket, caplog: pytest.LogCaptureFixture
) -> None:
    bucket.send(s3_message(bucket.put("k.jsonl")))
    drain(store, bucket)
    bucket.send(s3_message(bucket.put("k.jsonl")), s3_message(bucket.put("k.jsonl", b"{}\n")))
    counts = drain(store, bucket)
    held_once(store, ["k.jsonl"])
    assert counts["changed"] == 1  # recorded, not read again (on_change: ignore)
    (change,) = store.source_changes(store.source_identifier(STREAM))
    assert (change.key, change.size, change.state) == ("k.jsonl", 3, "pending")
    assert "not read again" in caplog.text


class DyingQueue:
    """The queue of a tick that dies after creating its units, before deleting its messages."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def receive(self, limit: int, visibility_s: int) -> Any:
        return self.queue.receive(limit, visibility_s)

    def delete(self, messages: Any) -> int:
        raise RuntimeError("killed before deleting")


def test_a_tick_that_dies_before_deleting_its_messages(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    keys = random_keys(9)
    bucket.send(*(s3_message(bucket.put(k)) for k in keys))
    with pytest.raises(RuntimeError):
        tick(store, bucket, queue=DyingQueue(bucket.queue()))
    time.sleep(1.5)  # the messages' visibility timeout
    counts = drain(store, bucket)
    held_once(store, keys)
    assert counts["objects"] == 0 and counts["duplicates"] == 9


def test_a_tick_that_dies_before_claiming_its_units(
    store: CoordinationStore, bucket: NotifiedBucket, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = random_keys(9)
    bucket.send(*(s3_message(bucket.put(k)) for k in keys))

    def dies(*args: Any) -> None:
        raise RuntimeError("killed before claiming")

    with monkeypatch.context() as patched:
        patched.setattr(store, "claim_objects", dies)
        with pytest.raises(RuntimeError):
            tick(store, bucket)
    assert store.read_global_state(STREAM, "discovery")[CLAIMING]  # the intent survived
    time.sleep(1.5)
    counts = drain(store, bucket)
    held_once(store, keys)
    assert counts["objects"] == 0 and counts["duplicates"] == 9


def test_units_made_by_listing_are_indexed_before_any_event(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    listed = [f"2026/{i:03d}.jsonl" for i in range(30)]
    records = [bucket.put(k) for k in listed]
    units = plan_units(((k, 12) for k in listed), 4, 2**40)  # no ETags: sizes compared
    sid = store.source_identifier(STREAM)
    store.create_partitions(
        sid, [u.key for u in units], progress_states=[u.progress_state() for u in units]
    )
    bucket.send(*(s3_message(r) for r in records), s3_message(bucket.put("2026/new.jsonl")))
    counts = drain(store, bucket, max_messages=20)  # indexes 5 units a tick first
    held_once(store, [*listed, "2026/new.jsonl"])
    assert counts["objects"] == 1 and counts["duplicates"] == 30


def test_the_events_s3_itself_sends_once_the_bucket_is_wired(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    """No hand-made message: the loopback server's S3 sends its own events (and its
    `s3:TestEvent`) to the queue the configuration `leasehold notifications --apply` writes
    names; objects outside the prefix are filtered by S3 already. (It sends no removal
    events: those are the hand-made tests' above.)"""
    from resources.notifications.wiring import queue_configuration

    arn = bucket.sqs.get_queue_attributes(QueueUrl=bucket.queue_url, AttributeNames=["QueueArn"])
    entry = queue_configuration(STREAM, arn["Attributes"]["QueueArn"], "events/")
    bucket.s3.put_bucket_notification_configuration(
        Bucket=bucket.bucket, NotificationConfiguration={"QueueConfigurations": [entry]}
    )
    keys = random_keys(8)
    for key in keys:
        bucket.put(key)
    bucket.s3.put_object(Bucket=bucket.bucket, Key="elsewhere/x.jsonl", Body=b"{}\n")
    counts = drain(store, bucket)
    held_once(store, keys)
    assert counts["objects"] == 8 and counts["outside the source"] == 0  # S3 filtered it
    assert bucket.waiting() == 0


def test_a_stream_back_on_listing_is_indexed_again_when_it_returns(
    store: CoordinationStore, bucket: NotifiedBucket
) -> None:
    from resources.ingestion.claimed_units import INDEXED, forget_index

    drain(store, bucket)  # indexed (nothing to index)
    assert store.read_global_state(STREAM, "discovery")[INDEXED]
    assert forget_index(store, STREAM, "node-a", 60)  # a listing tick
    listed = plan_units([("2026/a.jsonl", 12), ("2026/b.jsonl", 12)], 10, 2**40)
    sid = store.source_identifier(STREAM)
    store.create_partitions(
        sid, [u.key for u in listed], progress_states=[u.progress_state() for u in listed]
    )
    bucket.send(s3_message(bucket.put("2026/b.jsonl")))
    counts = drain(store, bucket)
    held_once(store, ["2026/a.jsonl", "2026/b.jsonl"])
    assert counts["duplicates"] == 1 and counts["objects"] == 0
