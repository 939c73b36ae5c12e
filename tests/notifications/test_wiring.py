"""The documents that wire a bucket to a stream's queue, without AWS: the entry and the
statement, their merge into what the bucket and queue already hold, and whether a bucket's
configuration delivers the stream's events."""

from __future__ import annotations

import json

import pytest

from resources.notifications.wiring import (
    QueueAddress,
    WiringError,
    delivery,
    merged_notification_configuration,
    merged_queue_policy,
    overlapping,
    policy_statement,
    queue_configuration,
    queue_from_arn,
    queue_from_url,
    source_location,
)

ARN = "arn:aws:sqs:eu-west-1:123456789012:events-created"
QUEUE = QueueAddress("aws", "eu-west-1", "123456789012", "events-created")
OTHERS = {
    "QueueConfigurations": [
        {
            "Id": "audit",
            "QueueArn": "arn:aws:sqs:eu-west-1:123456789012:audit",
            "Events": ["s3:ObjectRemoved:*"],
        }
    ],
    "TopicConfigurations": [
        {
            "Id": "fanout",
            "TopicArn": "arn:aws:sns:eu-west-1:123456789012:t",
            "Events": ["s3:ObjectCreated:*"],
            "Filter": {"Key": {"FilterRules": [{"Name": "Prefix", "Value": "other/"}]}},
        }
    ],
    "LambdaFunctionConfigurations": [
        {
            "Id": "thumbs",
            "LambdaFunctionArn": "arn:aws:lambda:eu-west-1:123456789012:function:f",
            "Events": ["s3:ObjectCreated:Put"],
        }
    ],
    "EventBridgeConfiguration": {},
}


@pytest.mark.parametrize(
    ("url", "region", "expected"),
    [
        ("https://sqs.eu-west-1.amazonaws.com/123456789012/events-created", None, ARN),
        ("https://eu-west-1.queue.amazonaws.com/123456789012/events-created", None, ARN),
        (
            "https://queue.amazonaws.com/123456789012/q",
            None,
            "arn:aws:sqs:us-east-1:123456789012:q",
        ),
        (
            "https://sqs.cn-north-1.amazonaws.com.cn/123456789012/q",
            "cn-north-1",
            "arn:aws-cn:sqs:cn-north-1:123456789012:q",
        ),
        ("http://127.0.0.1:5000/123456789012/q", None, "arn:aws:sqs:us-east-1:123456789012:q"),
        (
            "http://127.0.0.1:5000/123456789012/q",
            "eu-central-1",
            "arn:aws:sqs:eu-central-1:123456789012:q",
        ),
    ],
)
def test_a_queue_url_names_its_arn(url: str, region: str | None, expected: str) -> None:
    assert queue_from_url(url, region).arn == expected


def test_a_url_or_arn_that_is_no_queue_is_refused() -> None:
    with pytest.raises(WiringError, match="not an SQS queue URL"):
        queue_from_url("https://sqs.eu-west-1.amazonaws.com/events-created")
    with pytest.raises(WiringError, match="not an SQS queue ARN"):
        queue_from_arn("arn:aws:sns:eu-west-1:123456789012:t")
    assert queue_from_arn(ARN) == QUEUE


def test_a_source_gives_its_bucket_and_the_prefix_events_are_filtered_on() -> None:
    assert source_location("s3://src/events/2026") == ("src", "events/2026/")
    assert source_location("s3://src") == ("src", "")
    with pytest.raises(WiringError, match="only S3"):
        source_location("file:///tmp/src")


def test_the_entry_sends_created_and_removed_objects_under_the_prefix() -> None:
    assert queue_configuration("events", ARN, "events/") == {
        "Id": "leasehold-events",
        "QueueArn": ARN,
        "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
        "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "events/"}]}},
    }
    assert "Filter" not in queue_configuration("events", ARN, "")


def test_the_merge_keeps_every_other_configuration_and_is_idempotent() -> None:
    entry = queue_configuration("events", ARN, "events/")
    merged = merged_notification_configuration({**OTHERS, "ResponseMetadata": {}}, entry)
    assert merged["QueueConfigurations"] == [*OTHERS["QueueConfigurations"], entry]
    for kind in ("TopicConfigurations", "LambdaFunctionConfigurations", "EventBridgeConfiguration"):
        assert merged[kind] == OTHERS[kind]
    assert "ResponseMetadata" not in merged
    assert merged_notification_configuration(merged, entry) == merged
    moved = queue_configuration("events", ARN, "events/v2/")
    again = merged_notification_configuration(merged, moved)
    assert again["QueueConfigurations"] == [*OTHERS["QueueConfigurations"], moved]
    assert merged_notification_configuration(None, entry) == {"QueueConfigurations": [entry]}


def test_the_statement_lets_s3_send_from_the_bucket_of_the_queues_account() -> None:
    statement = policy_statement("events", QUEUE, "src")
    assert statement["Principal"] == {"Service": "s3.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == ARN
    assert statement["Condition"] == {
        "ArnEquals": {"aws:SourceArn": "arn:aws:s3:::src"},
        "StringEquals": {"aws:SourceAccount": "123456789012"},
    }


def test_the_policy_merge_replaces_only_the_statement_of_its_sid() -> None:
    statement = policy_statement("events", QUEUE, "src")
    assert merged_queue_policy(None, statement) == {
        "Version": "2012-10-17",
        "Statement": [statement],
    }
    owner = {
        "Sid": "owner",
        "Effect": "Allow",
        "Principal": {"AWS": "123456789012"},
        "Action": "sqs:*",
        "Resource": ARN,
    }
    existing = json.dumps({"Version": "2012-10-17", "Id": "p", "Statement": owner})
    merged = merged_queue_policy(existing, statement)
    assert merged == {"Version": "2012-10-17", "Id": "p", "Statement": [owner, statement]}
    assert merged_queue_policy(json.dumps(merged), statement) == merged
    other_bucket = policy_statement("events", QUEUE, "src2")
    assert merged_queue_policy(json.dumps(merged), other_bucket)["Statement"] == [
        owner,
        other_bucket,
    ]
    with pytest.raises(WiringError, match="not JSON"):
        merged_queue_policy("{", statement)


def test_delivery_finds_the_entry_whose_prefix_covers_the_streams() -> None:
    entry = queue_configuration("events", ARN, "events/")
    assert delivery({"QueueConfigurations": [entry]}, ARN, "events/").direct
    wider = queue_configuration("all", ARN, "")
    assert delivery({"QueueConfigurations": [wider]}, ARN, "events/").direct
    found = delivery({"QueueConfigurations": [entry]}, ARN, "clicks/")
    assert not found.direct and not found.indirect
    assert "no entry sends created objects under clicks/" in found.detail
    other_queue = queue_configuration("events", ARN + "-x", "events/")
    assert not delivery({"QueueConfigurations": [other_queue]}, ARN, "events/").direct
    removed_only = {**entry, "Events": ["s3:ObjectRemoved:*"]}
    assert not delivery({"QueueConfigurations": [removed_only]}, ARN, "events/").direct
    suffix = {
        **entry,
        "Filter": {
            "Key": {
                "FilterRules": [
                    {"Name": "prefix", "Value": "ev"},
                    {"Name": "suffix", "Value": ".jsonl"},
                ]
            }
        },
    }
    assert (
        "only keys ending '.jsonl'"
        in delivery({"QueueConfigurations": [suffix]}, ARN, "events/").detail
    )


def test_delivery_through_sns_or_eventbridge_is_said_not_followed() -> None:
    topic = delivery({"TopicConfigurations": OTHERS["TopicConfigurations"]}, ARN, "other/x/")
    assert topic.indirect and not topic.direct and "SNS topic" in topic.detail
    assert not delivery(
        {"TopicConfigurations": OTHERS["TopicConfigurations"]}, ARN, "events/"
    ).indirect
    assert delivery({"EventBridgeConfiguration": {}}, ARN, "events/").indirect


def test_configurations_s3_would_refuse_beside_the_entry_are_named() -> None:
    entry = queue_configuration("events", ARN, "events/")

    def other(events: list[str], **rules: str) -> dict[str, object]:
        filter_rules = [{"Name": name, "Value": value} for name, value in rules.items()]
        found: dict[str, object] = {"Id": "other", "QueueArn": ARN + "-x", "Events": events}
        if filter_rules:
            found["Filter"] = {"Key": {"FilterRules": filter_rules}}
        return found

    def clashes(configuration: dict[str, object]) -> list[str]:
        return overlapping({"QueueConfigurations": [configuration]}, entry)

    assert clashes(other(["s3:ObjectCreated:Put"])) == ["other"]
    assert clashes(other(["s3:ObjectRemoved:*"], prefix="events/2026/")) == ["other"]
    assert clashes(other(["s3:ObjectCreated:*"], prefix="clicks/")) == []
    assert clashes(other(["s3:ObjectRestore:*"])) == []
    assert clashes({**entry, "QueueArn": ARN + "-old"}) == []  # its own Id: replaced
    assert overlapping(OTHERS, entry) == ["audit", "thumbs"]
