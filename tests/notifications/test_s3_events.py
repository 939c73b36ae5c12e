"""S3 event messages in their three shapes (S3's own, wrapped by SNS, EventBridge's), keys
decoded as S3 encodes them, S3's test event, removals, and what is not an S3 event."""

from __future__ import annotations

import json
from typing import Any

import pytest

from resources.notifications.s3_events import EventMessageError, ObjectEvent, parse_message


def s3_record(key: str, name: str = "ObjectCreated:Put", **obj: Any) -> dict[str, Any]:
    return {
        "eventName": name,
        "s3": {"bucket": {"name": "src"}, "object": {"key": key, **obj}},
    }


def s3_message(*records: dict[str, Any]) -> str:
    return json.dumps({"Records": list(records)})


def test_an_s3_notification_gives_its_objects() -> None:
    body = s3_message(
        s3_record("events/a.jsonl", size=12, sequencer="0A1"),
        s3_record("events/b.jsonl", "ObjectCreated:CompleteMultipartUpload", size=3),
    )
    assert parse_message(body) == [
        ObjectEvent("src", "events/a.jsonl", 12, True, "0A1"),
        ObjectEvent("src", "events/b.jsonl", 3, True),
    ]


def test_keys_are_decoded_a_plus_as_a_space_and_an_encoded_plus_as_a_plus() -> None:
    body = s3_message(s3_record("events/a+b%2Bc%3D.jsonl", size=1))
    (event,) = parse_message(body)
    assert event.key == "events/a b+c=.jsonl"


def test_an_sns_wrapped_notification_gives_the_same_objects() -> None:
    inner = s3_message(s3_record("events/a%2B1.jsonl", size=5))
    wrapped = json.dumps({"Type": "Notification", "TopicArn": "arn:aws:sns:x", "Message": inner})
    assert parse_message(wrapped) == parse_message(inner)
    assert parse_message(wrapped)[0].key == "events/a+1.jsonl"


def test_an_eventbridge_event_gives_its_object_with_the_key_as_is() -> None:
    def event(kind: str) -> str:
        detail = {"bucket": {"name": "src"}, "object": {"key": "events/a+b.jsonl", "size": 7}}
        return json.dumps({"source": "aws.s3", "detail-type": kind, "detail": detail})

    assert parse_message(event("Object Created")) == [
        ObjectEvent("src", "events/a+b.jsonl", 7, True)
    ]
    (deleted,) = parse_message(event("Object Deleted"))
    assert not deleted.created
    with pytest.raises(EventMessageError, match="Object Restore Completed"):
        parse_message(event("Object Restore Completed"))


def test_the_test_event_holds_no_object_and_other_records_are_skipped() -> None:
    assert parse_message(json.dumps({"Service": "Amazon S3", "Event": "s3:TestEvent"})) == []
    restore = s3_record("events/a.jsonl", "ObjectRestore:Completed")
    assert parse_message(s3_message(restore)) == []


def test_removals_are_returned_as_not_created_with_no_size() -> None:
    (removed,) = parse_message(s3_message(s3_record("events/a.jsonl", "ObjectRemoved:Delete")))
    assert removed == ObjectEvent("src", "events/a.jsonl", -1, False)


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ("not json", "not JSON"),
        ("[1, 2]", "not a JSON object"),
        ('{"hello": 1}', "no Records"),
        (json.dumps({"Records": [{"eventName": "ObjectCreated:Put", "s3": {}}]}), "without"),
        (json.dumps({"Type": "Notification", "Message": "nope"}), "not JSON"),
        (
            json.dumps({"source": "aws.s3", "detail-type": "Object Created", "detail": {}}),
            "without",
        ),
    ],
)
def test_a_malformed_message_names_what_is_wrong(body: str, says: str) -> None:
    with pytest.raises(EventMessageError, match=says):
        parse_message(body)


def test_later_than_compares_sequencers_padded_to_the_same_width() -> None:
    early = ObjectEvent("src", "k", 1, True, "0A")
    late = ObjectEvent("src", "k", 1, True, "000B")
    assert late.later_than(early) and not early.later_than(late)
