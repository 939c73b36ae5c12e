"""`leasehold notifications STREAM [--apply]`: wire a stream's bucket to its SQS queue.

For a stream with `discovery.mode: notifications` it prints the two documents that connect
the bucket to the queue (`resources.notifications.wiring`): the bucket's notification
configuration entry (`QueueConfigurations`, Id `leasehold-<stream>`, created and removed
objects under the stream's prefix) and the queue policy statement letting S3 send to the queue
from that bucket only. The queue's ARN is the queue's own (GetQueueAttributes) when it answers,
else derived from its URL. With `--apply` it applies both, each merged into what is there:
the queue's policy first (S3 checks, when the configuration is saved, that it may send to the
queue), then the bucket's configuration, read first, leasehold's entry replaced by its Id and
every other configuration kept. Applying twice gives the same configuration. A bucket whose
other configurations already send the same events for the same keys (S3 refuses overlapping
ones) is refused before anything is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from resources.cli.stream_choice import chosen_streams
from resources.errors import LeaseholdError
from resources.notifications.bucket_notifications import BucketNotifications
from resources.notifications.queue import EventQueue
from resources.notifications.wiring import (
    QueueAddress,
    WiringError,
    merged_notification_configuration,
    merged_queue_policy,
    overlapping,
    policy_statement,
    queue_configuration,
    queue_from_arn,
    queue_from_url,
    source_location,
)
from resources.streams import LakeSettings, StreamConfig, StreamConfigError


@dataclass(frozen=True)
class Wiring:
    """What connects one stream's bucket to its queue."""

    stream: str
    bucket: str
    key_prefix: str
    queue_url: str
    queue: QueueAddress
    arn_from: str
    """Where the queue's ARN came from: the queue itself, or its URL (and why)."""
    entry: dict[str, Any]
    statement: dict[str, Any]
    policy: str | None
    """The queue's policy as it is (None when it has none or was not read)."""


def notifications_stream(name: str, config: StreamConfig) -> str:
    """The stream's queue URL; raises `StreamConfigError` on `discovery.mode` for a stream
    that does not discover by notifications."""
    if not config.discovery.notifications or config.discovery.queue is None:
        raise StreamConfigError(
            name,
            "discovery.mode",
            f"is {config.discovery.mode!r}: `leasehold notifications` wires a stream with "
            "`discovery.mode: notifications` and its `discovery.queue`",
        )
    return config.discovery.queue


def plan_wiring(
    name: str, config: StreamConfig, queue: EventQueue, region: str | None, *, need_queue: bool
) -> Wiring:
    """The documents for stream `name`. The queue is asked for its ARN and policy; when it
    does not answer the ARN is derived from its URL, unless `need_queue` (then its
    `QueueError` is raised)."""
    from resources.notifications.queue import QueueError

    bucket, prefix = source_location(config.source)
    try:
        attributes = queue.attributes()
        address = queue_from_arn(attributes["QueueArn"])
        arn_from = "the queue's QueueArn"
    except QueueError as exc:
        if need_queue:
            raise
        attributes = {}
        address = queue_from_url(queue.url, region)
        arn_from = f"derived from the URL; the queue did not answer: {' '.join(str(exc).split())}"
    return Wiring(
        stream=name,
        bucket=bucket,
        key_prefix=prefix,
        queue_url=queue.url,
        queue=address,
        arn_from=arn_from,
        entry=queue_configuration(name, address.arn, prefix),
        statement=policy_statement(name, address, bucket),
        policy=attributes.get("Policy"),
    )


def wiring_text(wiring: Wiring) -> str:
    """The two documents, each under a line saying where it goes and how `--apply` merges it."""
    keys = wiring.key_prefix or "every key"
    return "\n".join(
        [
            f"stream {wiring.stream}: bucket {wiring.bucket!r}, keys under {keys}, queue "
            f"{wiring.queue_url}",
            f"queue ARN {wiring.queue.arn} ({wiring.arn_from})",
            "",
            f"S3 notification configuration of bucket {wiring.bucket!r} (--apply merges this "
            "entry by its Id; the bucket's other configurations stay):",
            json.dumps({"QueueConfigurations": [wiring.entry]}, indent=2),
            "",
            "SQS queue policy (--apply merges this statement by its Sid into the queue's "
            "policy; its other statements stay):",
            json.dumps({"Version": "2012-10-17", "Statement": [wiring.statement]}, indent=2),
        ]
    )


def apply_wiring(wiring: Wiring, queue: EventQueue, bucket: BucketNotifications) -> list[str]:
    """Merge the statement into the queue's policy, then the entry into the bucket's
    configuration (S3 refuses a queue it may not send to); one line per change made. A bucket
    whose other configurations overlap the entry (S3 would refuse it) is a `WiringError`
    naming them, before anything is written. Raises `QueueError`, `BucketNotificationsError`,
    `WiringError`."""
    existing = bucket.read()
    clashes = overlapping(existing, wiring.entry)
    if clashes:
        raise WiringError(
            f"bucket {wiring.bucket!r}: its configurations {', '.join(map(repr, clashes))} "
            f"already send created or removed objects under {wiring.key_prefix or 'every key'} "
            "and S3 refuses overlapping configurations: fan the events out through SNS or "
            "EventBridge (docs/production.md), or narrow those configurations"
        )
    policy = merged_queue_policy(wiring.policy, wiring.statement)
    queue.set_policy(json.dumps(policy))
    configuration = merged_notification_configuration(existing, wiring.entry)
    bucket.write(configuration)
    others = sum(len(v) for v in configuration.values() if isinstance(v, list)) - 1
    kept = f"{others} other entries kept" + (
        ", EventBridge kept" if "EventBridgeConfiguration" in configuration else ""
    )
    return [
        f"applied: queue policy of {wiring.queue_url}: statement {wiring.statement['Sid']!r} "
        f"({len(policy['Statement']) - 1} other statements kept)",
        f"applied: notification configuration of bucket {wiring.bucket!r}: entry "
        f"{wiring.entry['Id']!r} ({kept})",
    ]


def cmd_notifications(args: argparse.Namespace) -> int:
    lake = LakeSettings.from_env()
    streams = lake.streams()
    (name,) = chosen_streams(args.stream, streams, field="STREAM")
    config = streams[name]
    queue = EventQueue(notifications_stream(name, config), region=lake.region, wait_s=0)
    wiring = plan_wiring(name, config, queue, lake.region, need_queue=args.apply)
    print(wiring_text(wiring))
    if not args.apply:
        return 0
    bucket = BucketNotifications(
        wiring.bucket, endpoint_url=lake.s3_endpoint_url, region=lake.region
    )
    try:
        lines = apply_wiring(wiring, queue, bucket)
    except LeaseholdError:
        print(f"leasehold: notifications of {name}: not applied in full", file=sys.stderr)
        raise
    print()
    print("\n".join(lines))
    return 0


def add_notifications_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    notifications = add(
        "notifications",
        help="print (or --apply) the bucket notification configuration and the SQS queue "
        "policy that send a stream's S3 events to its queue (discovery.mode: notifications)",
    )
    notifications.add_argument(
        "stream", metavar="STREAM", help="the stream (discovery.mode: notifications)"
    )
    notifications.add_argument(
        "--apply",
        action="store_true",
        help="apply both, merged into the bucket's configuration and the queue's policy",
    )
    notifications.set_defaults(fn=cmd_notifications)
