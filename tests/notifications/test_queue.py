"""`EventQueue` against the loopback SQS (moto): receive, delete, release, attributes; a receipt
SQS refuses is counted, not raised; a queue that does not exist is a `QueueError` naming it.

The loopback server serves one request at a time: no long polling here (`wait_s=0`)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from resources.notifications.queue import EventQueue, QueueError, QueueMessage, queue_endpoint
from resources.retry import RetryPolicy
from tests.support.aws_server import LocalAwsServer

FAST = RetryPolicy(max_attempts=2, base_delay_s=0.01, max_delay_s=0.02)


@dataclass
class Queue:
    url: str
    sqs: Any
    events: EventQueue

    def send(self, *bodies: str) -> None:
        for body in bodies:
            self.sqs.send_message(QueueUrl=self.url, MessageBody=body)


@pytest.fixture
def queue(aws_server: LocalAwsServer) -> Iterator[Queue]:
    sqs = boto3.client("sqs", endpoint_url=aws_server.endpoint_url, region_name="us-east-1")
    url = sqs.create_queue(QueueName=f"events-{uuid.uuid4().hex[:8]}")["QueueUrl"]
    yield Queue(url, sqs, EventQueue(url, retry=FAST, wait_s=0))
    sqs.delete_queue(QueueUrl=url)


def test_the_queue_url_says_where_to_send_the_calls() -> None:
    assert queue_endpoint("https://sqs.eu-west-1.amazonaws.com/123456789012/q") == (
        None,
        "eu-west-1",
    )
    assert queue_endpoint("http://127.0.0.1:5000/123456789012/q") == ("http://127.0.0.1:5000", None)


def test_receive_returns_the_messages_and_whether_the_queue_was_drained(queue: Queue) -> None:
    queue.send("a", "b", "c")
    first, drained = queue.events.receive(2, visibility_s=60)
    assert len(first) == 2 and not drained
    rest, drained = queue.events.receive(5, visibility_s=60)
    assert [m.body for m in rest] == [b for b in "abc" if b not in {m.body for m in first}]
    assert drained
    assert sorted(m.body for m in first + rest) == ["a", "b", "c"]


def test_a_tick_receives_for_its_time_budget_at_most(queue: Queue) -> None:
    queue.send("a")
    late, drained = queue.events.receive(10, visibility_s=60, budget_s=0)
    assert late == [] and not drained  # out of time: not known to be drained


def test_deleted_messages_are_gone_and_released_ones_come_back(queue: Queue) -> None:
    queue.send("keep", "drop")
    messages, _ = queue.events.receive(10, visibility_s=60)
    by_body = {m.body: m for m in messages}
    assert queue.events.delete([by_body["drop"]]) == 0
    assert queue.events.release([by_body["keep"]]) == 0
    again, drained = queue.events.receive(10, visibility_s=60)
    assert [m.body for m in again] == ["keep"] and drained


def test_a_receipt_sqs_refuses_is_counted_not_raised(queue: Queue) -> None:
    queue.send("x")
    (message,), _ = queue.events.receive(1, visibility_s=60)
    stale = QueueMessage("gone", "not-a-receipt-handle", "x")
    assert queue.events.delete([message, stale]) == 1
    assert queue.events.receive(1, visibility_s=0)[0] == []


def test_the_attributes_hold_the_arn_and_the_counts(queue: Queue) -> None:
    queue.send("x")
    attributes = queue.events.attributes()
    assert attributes["QueueArn"].startswith("arn:aws:sqs:us-east-1:")
    assert attributes["QueueArn"].endswith(":" + queue.url.rsplit("/", 1)[1])
    assert attributes["ApproximateNumberOfMessages"] == "1"


def test_a_policy_set_is_read_back(queue: Queue) -> None:
    arn = queue.events.attributes()["QueueArn"]
    statement = {"Sid": "s", "Effect": "Allow", "Principal": "*", "Action": "sqs:SendMessage"}
    policy = json.dumps({"Version": "2012-10-17", "Statement": [{**statement, "Resource": arn}]})
    queue.events.set_policy(policy)
    assert json.loads(queue.events.attributes()["Policy"]) == json.loads(policy)


def test_a_queue_that_does_not_exist_is_a_queue_error_naming_it(queue: Queue) -> None:
    missing = queue.url.rsplit("/", 1)[0] + "/no-such-queue"
    events = EventQueue(missing, retry=FAST, wait_s=0)
    with pytest.raises(QueueError, match="no-such-queue") as raised:
        events.receive(1, visibility_s=0)
    assert "ReceiveMessage" in str(raised.value)
    with pytest.raises(QueueError, match="GetQueueAttributes on .*no-such-queue"):
        events.attributes()
