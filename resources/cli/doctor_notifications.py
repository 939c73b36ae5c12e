"""`leasehold doctor`'s checks of a stream that discovers by S3 event notifications: its SQS
queue answers (GetQueueAttributes), receives (one ReceiveMessage of at most one message,
visibility timeout 0 and no wait: a message waiting is left visible, but counts one receive
towards a dead-letter queue's `maxReceiveCount`), and its bucket's notification configuration
sends the stream's created objects to the queue — when the role may read it
(GetBucketNotificationConfiguration; access denied is said, not failed)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from resources.cli.doctor_check import DOCTOR_RETRY, Check, error_text
from resources.notifications.bucket_notifications import (
    BucketNotifications,
    BucketNotificationsError,
)
from resources.notifications.queue import EventQueue, QueueError
from resources.notifications.wiring import delivery, queue_from_url, source_location
from resources.streams import LakeSettings, StreamConfig

QUEUE_ACTIONS = "sqs:GetQueueAttributes, ReceiveMessage, DeleteMessage, ChangeMessageVisibility"


class NotificationReader(Protocol):
    """What the bucket check reads (`BucketNotifications`)."""

    bucket: str

    def read(self) -> dict[str, Any]: ...


def check_notifications(lake: LakeSettings) -> Iterator[Check]:
    """The three checks of each stream with `discovery.mode: notifications`, in name order;
    none for a stream that lists its source."""
    for name, config in sorted(lake.streams().items()):
        if config.discovery.notifications and config.discovery.queue:
            yield from _check_stream(lake, name, config, config.discovery.queue)


def _check_stream(lake: LakeSettings, name: str, config: StreamConfig, url: str) -> Iterator[Check]:
    queue = EventQueue(url, region=lake.region, retry=DOCTOR_RETRY, wait_s=0)
    what = f"notifications: {name} queue reachable"
    try:
        attributes = queue.attributes()
    except QueueError as exc:
        yield Check(
            what,
            False,
            f"{url}: {error_text(exc)}",
            f"create the queue or fix discovery.queue of {name} in the streams file; the role "
            f"needs {QUEUE_ACTIONS} on it; then `leasehold notifications {name} --apply`",
        )
        return
    yield Check(what, True, queue_summary(url, attributes))
    yield _check_receive(name, queue)
    bucket, prefix = source_location(config.source)
    arn = attributes.get("QueueArn") or queue_from_url(url, lake.region).arn
    reader = BucketNotifications(
        bucket, endpoint_url=lake.s3_endpoint_url, region=lake.region, retry=DOCTOR_RETRY
    )
    yield check_bucket(name, reader, arn, prefix)


def queue_summary(url: str, attributes: dict[str, str]) -> str:
    """What the queue's attributes say about it: messages waiting and in flight, the
    visibility timeout, whether a dead-letter queue catches what is never deleted."""
    waiting = attributes.get("ApproximateNumberOfMessages", "?")
    in_flight = attributes.get("ApproximateNumberOfMessagesNotVisible", "?")
    timeout = attributes.get("VisibilityTimeout", "?")
    dead_letters = (
        "a dead-letter queue" if "RedrivePolicy" in attributes else "no dead-letter queue"
    )
    return (
        f"{url}: {waiting} messages waiting, {in_flight} in flight, visibility timeout "
        f"{timeout} s, {dead_letters}"
    )


def _check_receive(name: str, queue: EventQueue) -> Check:
    what = f"notifications: {name} queue receives"
    try:
        messages, _ = queue.receive(1, 0)
    except QueueError as exc:
        return Check(
            what,
            False,
            error_text(exc),
            "grant sqs:ReceiveMessage (and DeleteMessage, ChangeMessageVisibility) on the "
            "queue; a queue encrypted with a KMS key also needs kms:Decrypt on the key",
        )
    found = "a message waiting (left visible)" if messages else "no message waiting"
    return Check(what, True, f"ReceiveMessage answered: {found}")


def check_bucket(name: str, reader: NotificationReader, queue_arn: str, prefix: str) -> Check:
    """Whether the bucket's notification configuration sends the stream's created objects
    (keys under `prefix`) to `queue_arn`. A configuration the role may not read passes, saying
    so: reading it is doctor's only use of s3:GetBucketNotification."""
    what = f"notifications: {name} bucket sends events to the queue"
    fix = f"run `leasehold notifications {name} --apply` (docs/production.md)"
    try:
        configuration = reader.read()
    except BucketNotificationsError as exc:
        if exc.access_denied:
            return Check(
                what,
                True,
                f"could not read bucket {reader.bucket!r}'s notification configuration (access "
                "denied: grant s3:GetBucketNotification to check it); not checked",
            )
        return Check(what, False, error_text(exc), fix)
    found = delivery(configuration, queue_arn, prefix)
    if found.direct or found.indirect:
        return Check(what, True, f"bucket {reader.bucket!r}: {found.detail}")
    return Check(what, False, f"bucket {reader.bucket!r}: {found.detail}", fix)
