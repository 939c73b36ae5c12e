"""S3 event messages as S3, SNS and EventBridge put them on an SQS queue, and a source bucket
with its queue on the loopback AWS-compatible server: for tests of notifications discovery."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote_plus

import boto3

from resources.ingestion.notification_discovery import SourceLocation
from resources.ingestion.source_listing import source_lister
from resources.notifications.queue import EventQueue
from resources.objects.s3 import S3ObjectStore

_sequence = iter(range(1, 10**9))


def s3_record(
    bucket: str, key: str, size: int, created: bool = True, etag: str = "0" * 32
) -> dict[str, Any]:
    """One record of S3's own event JSON (key URL-encoded, as S3 sends it; the ETag bare)."""
    obj: dict[str, Any] = {"key": quote_plus(key), "sequencer": f"{next(_sequence):016X}"}
    if created:
        obj.update(size=size, eTag=etag)
    return {
        "eventVersion": "2.1",
        "eventSource": "aws:s3",
        "eventName": "ObjectCreated:Put" if created else "ObjectRemoved:Delete",
        "s3": {"bucket": {"name": bucket, "arn": f"arn:aws:s3:::{bucket}"}, "object": obj},
    }


def s3_message(*records: dict[str, Any]) -> str:
    return json.dumps({"Records": list(records)})


def sns_wrapped(body: str) -> str:
    return json.dumps(
        {
            "Type": "Notification",
            "MessageId": str(uuid.uuid4()),
            "TopicArn": "arn:aws:sns:us-east-1:123456789012:events",
            "Subject": "Amazon S3 Notification",
            "Message": body,
        }
    )


def eventbridge(bucket: str, key: str, size: int) -> str:
    return json.dumps(
        {
            "version": "0",
            "detail-type": "Object Created",
            "source": "aws.s3",
            "detail": {
                "bucket": {"name": bucket},
                "object": {"key": key, "size": size, "sequencer": f"{next(_sequence):016X}"},
                "reason": "PutObject",
            },
        }
    )


@dataclass
class NotifiedBucket:
    """A bucket whose prefix is a stream's source and a queue its events go to."""

    endpoint_url: str
    bucket: str = field(default_factory=lambda: f"src-{uuid.uuid4().hex[:10]}")
    prefix: str = "events"

    def __post_init__(self) -> None:
        self.s3 = boto3.client("s3", endpoint_url=self.endpoint_url, region_name="us-east-1")
        self.sqs = boto3.client("sqs", endpoint_url=self.endpoint_url, region_name="us-east-1")
        self.s3.create_bucket(Bucket=self.bucket)
        self.queue_url = self.sqs.create_queue(QueueName=self.bucket)["QueueUrl"]

    def put(self, key: str, body: bytes = b'{"id": "x"}\n') -> dict[str, Any]:
        """Upload `key` (under the prefix); its S3 record, not sent."""
        full = f"{self.prefix}/{key}" if self.prefix else key
        etag = self.s3.put_object(Bucket=self.bucket, Key=full, Body=body)["ETag"].strip('"')
        return s3_record(self.bucket, full, len(body), etag=etag)

    def send(self, *bodies: str) -> None:
        for start in range(0, len(bodies), 10):
            entries = [
                {"Id": str(i), "MessageBody": b} for i, b in enumerate(bodies[start : start + 10])
            ]
            self.sqs.send_message_batch(QueueUrl=self.queue_url, Entries=entries)

    def queue(self) -> EventQueue:
        return EventQueue(self.queue_url, wait_s=0)  # the loopback server serves one at a time

    def location(self) -> SourceLocation:
        store = S3ObjectStore(self.bucket, self.prefix, endpoint_url=self.endpoint_url)
        return SourceLocation(self.bucket, self.prefix, store, source_lister(store))

    def waiting(self) -> int:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
        )["Attributes"]
        return sum(int(v) for v in attributes.values())
