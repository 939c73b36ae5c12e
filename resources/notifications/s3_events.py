"""S3 object events from a queue message, whichever way they were delivered.

Three shapes arrive on an SQS queue:
- S3's own notification: `{"Records": [{"eventName": "ObjectCreated:Put", "s3": {"bucket":
  {"name": ...}, "object": {"key": ..., "size": ..., "eTag": ..., "sequencer": ...}}}]}`; the key is
  URL-encoded (a space as `+`), so it is decoded;
- the same, wrapped by an SNS topic: `{"Type": "Notification", "Message": "<the JSON above>"}`;
- EventBridge's: `{"source": "aws.s3", "detail-type": "Object Created", "detail": {"bucket":
  {"name": ...}, "object": {"key": ..., "size": ..., "etag": ...}}}`; its key is not encoded.
S3's `s3:TestEvent` (sent when a configuration is saved) holds no object. Removal events
(`ObjectRemoved:*`, EventBridge's "Object Deleted") are returned too, with `created` false.

Pure: no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote_plus

from resources.errors import LeaseholdError


class EventMessageError(LeaseholdError):
    """A queue message that is not an S3 event in any shape leasehold reads."""


@dataclass(frozen=True)
class ObjectEvent:
    """One object created (or removed) in a bucket."""

    bucket: str
    key: str
    """The object's full key in the bucket, decoded."""
    size: int
    """Bytes (-1 where the event does not say, as for removals)."""
    created: bool
    sequencer: str = ""
    """S3's per-key order of events (hex, compared after padding); empty when absent."""
    etag: str = ""
    """The object's ETag, without quotes; empty when the event does not say (removals)."""

    def later_than(self, other: ObjectEvent) -> bool:
        """Whether this event happened after `other` on the same key: by sequencer when both
        have one (S3 pads them to different lengths: the longer is compared as is)."""
        width = max(len(self.sequencer), len(other.sequencer))
        return self.sequencer.rjust(width, "0") > other.sequencer.rjust(width, "0")


def parse_message(body: str) -> list[ObjectEvent]:
    """The object events of one message body: empty for a test event; raises
    `EventMessageError` naming what is wrong for anything else."""
    try:
        value = json.loads(body)
    except ValueError as exc:
        raise EventMessageError(f"not JSON: {exc}") from None
    if isinstance(value, dict) and value.get("Type") == "Notification" and "Message" in value:
        return parse_message(str(value["Message"]))  # SNS
    if not isinstance(value, dict):
        raise EventMessageError("not a JSON object")
    if value.get("Event") == "s3:TestEvent":
        return []
    if value.get("source") == "aws.s3" and "detail" in value:
        return [_eventbridge(value)]
    records = value.get("Records")
    if not isinstance(records, list):
        raise EventMessageError("no Records, SNS Message or EventBridge detail")
    return [_record(r) for r in records if _is_object_event(r)]


def _is_object_event(record: Any) -> bool:
    name = record.get("eventName", "") if isinstance(record, dict) else ""
    return str(name).startswith(("ObjectCreated:", "ObjectRemoved:"))


def _record(record: dict[str, Any]) -> ObjectEvent:
    try:
        s3 = record["s3"]
        obj = s3["object"]
        return ObjectEvent(
            bucket=str(s3["bucket"]["name"]),
            key=unquote_plus(str(obj["key"])),
            size=int(obj.get("size", -1)),
            created=str(record["eventName"]).startswith("ObjectCreated:"),
            sequencer=str(obj.get("sequencer", "")),
            etag=str(obj.get("eTag", "")).strip('"'),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EventMessageError(f"an S3 record without {exc}") from None


def _eventbridge(value: dict[str, Any]) -> ObjectEvent:
    kind = value.get("detail-type")
    if kind not in ("Object Created", "Object Deleted"):
        raise EventMessageError(f"an EventBridge event of type {kind!r}, not an object's")
    try:
        detail = value["detail"]
        obj = detail["object"]
        return ObjectEvent(
            bucket=str(detail["bucket"]["name"]),
            key=str(obj["key"]),
            size=int(obj.get("size", -1)),
            created=kind == "Object Created",
            sequencer=str(obj.get("sequencer", "")),
            etag=str(obj.get("etag", "")).strip('"'),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise EventMessageError(f"an EventBridge S3 event without {exc}") from None
