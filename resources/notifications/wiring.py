"""What wires a bucket's S3 events to a stream's SQS queue, as documents: the bucket's
notification configuration entry, the queue policy statement that lets S3 send to the queue,
each merged into what the bucket or queue already has, and whether a bucket's configuration
delivers a stream's events to its queue (`leasehold notifications`, `leasehold doctor`).

The entry is the bucket's `QueueConfigurations` item with Id `leasehold-<stream>` (events
`s3:ObjectCreated:*` and `s3:ObjectRemoved:*`, filtered on the stream's key prefix); the
statement, Sid `leasehold-<stream>-s3-events`, allows `s3.amazonaws.com` to `sqs:SendMessage` on
the queue when the sender is the bucket (`aws:SourceArn`) of the queue's account
(`aws:SourceAccount`). A merge replaces only leasehold's own entry or statement, by Id or Sid:
every other configuration (queues, topics, Lambda functions, EventBridge) and statement stays,
and merging again gives the same document.

Pure: no I/O.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from resources.errors import LeaseholdError

EVENTS = ("s3:ObjectCreated:*", "s3:ObjectRemoved:*")
CONFIGURATION_KINDS = (
    "QueueConfigurations",
    "TopicConfigurations",
    "LambdaFunctionConfigurations",
    "EventBridgeConfiguration",
)
"""The parts of a bucket's notification configuration (GetBucketNotificationConfiguration's
answer holds `ResponseMetadata` too, which a put does not take)."""
POLICY_VERSION = "2012-10-17"
DEFAULT_REGION = "us-east-1"


class WiringError(LeaseholdError):
    """A queue URL or ARN, or a source URL, that does not say what the wiring needs."""


@dataclass(frozen=True)
class QueueAddress:
    """An SQS queue as its ARN names it."""

    partition: str
    region: str
    account: str
    name: str

    @property
    def arn(self) -> str:
        return f"arn:{self.partition}:sqs:{self.region}:{self.account}:{self.name}"

    def bucket_arn(self, bucket: str) -> str:
        """The ARN of `bucket` in this queue's partition."""
        return f"arn:{self.partition}:s3:::{bucket}"


def partition_of(region: str) -> str:
    """The AWS partition a region is in (`aws`, `aws-cn`, `aws-us-gov`)."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def queue_from_url(queue_url: str, region: str | None = None) -> QueueAddress:
    """The queue a URL names: `https://sqs.<region>.amazonaws.com/<account>/<name>` (also the
    legacy `<region>.queue.amazonaws.com`); for any other host (a local server) the region is
    `region` (else us-east-1). Raises `WiringError` when the path is not `/<account>/<name>`."""
    parts = urlsplit(queue_url)
    path = [p for p in parts.path.split("/") if p]
    if len(path) != 2 or not path[0].isdigit():
        raise WiringError(f"{queue_url!r} is not an SQS queue URL (…/<account id>/<queue name>)")
    labels = (parts.hostname or "").split(".")
    found = region or DEFAULT_REGION
    if (parts.hostname or "").endswith(".amazonaws.com"):
        if labels[0] == "sqs" and len(labels) >= 4:
            found = labels[1]
        elif len(labels) >= 4 and labels[1] == "queue":
            found = labels[0]
        elif labels[0] == "queue":
            found = DEFAULT_REGION
    return QueueAddress(partition_of(found), found, path[0], path[1])


def queue_from_arn(arn: str) -> QueueAddress:
    """The queue an `arn:<partition>:sqs:<region>:<account>:<name>` names; raises
    `WiringError` for anything else."""
    fields = arn.split(":")
    if len(fields) != 6 or fields[0] != "arn" or fields[2] != "sqs":
        raise WiringError(f"{arn!r} is not an SQS queue ARN")
    return QueueAddress(fields[1], fields[3], fields[4], fields[5])


def source_location(source: str) -> tuple[str, str]:
    """(bucket, key prefix the events are filtered on) of an `s3://bucket/prefix` source: the
    prefix ends with `/` (`events/`), empty for a whole bucket. Raises `WiringError` for a
    source not on S3."""
    if not source.startswith("s3://"):
        raise WiringError(f"{source!r} is not on S3: only S3 sends object events")
    bucket, _, prefix = source[len("s3://") :].partition("/")
    prefix = prefix.strip("/")
    return bucket, f"{prefix}/" if prefix else ""


def configuration_id(stream: str) -> str:
    """The Id of a stream's entry in its bucket's notification configuration."""
    return f"leasehold-{stream}"


def statement_sid(stream: str) -> str:
    """The Sid of a stream's statement in its queue's policy."""
    return f"leasehold-{stream}-s3-events"


def queue_configuration(stream: str, queue_arn: str, key_prefix: str) -> dict[str, Any]:
    """The bucket's `QueueConfigurations` entry sending the stream's object events (created
    and removed, under `key_prefix`) to the queue."""
    entry: dict[str, Any] = {
        "Id": configuration_id(stream),
        "QueueArn": queue_arn,
        "Events": list(EVENTS),
    }
    if key_prefix:
        entry["Filter"] = {"Key": {"FilterRules": [{"Name": "prefix", "Value": key_prefix}]}}
    return entry


def merged_notification_configuration(
    existing: Mapping[str, Any] | None, entry: Mapping[str, Any]
) -> dict[str, Any]:
    """The bucket's notification configuration `existing` (as GetBucketNotificationConfiguration
    answers, or None) with `entry` in place of any configuration of the same Id — of any
    kind — and every other configuration kept, in order; ready for
    PutBucketNotificationConfiguration."""
    merged: dict[str, Any] = {}
    for kind in CONFIGURATION_KINDS:
        value = (existing or {}).get(kind)
        if kind == "EventBridgeConfiguration":
            if value is not None:
                merged[kind] = value
            continue
        kept = [dict(c) for c in value or [] if c.get("Id") != entry["Id"]]
        if kind == "QueueConfigurations":
            kept.append(dict(entry))
        if kept:
            merged[kind] = kept
    return merged


def _events_overlap(ours: list[Any], theirs: list[Any]) -> bool:
    def covers(wide: str, narrow: str) -> bool:
        return wide == narrow or (wide.endswith(":*") and narrow.startswith(wide[:-1]))

    return any(covers(a, b) or covers(b, a) for a in map(str, ours) for b in map(str, theirs))


def _keys_overlap(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> bool:
    a, b = _filter_rules(ours), _filter_rules(theirs)
    pa, pb = a.get("prefix", ""), b.get("prefix", "")
    sa, sb = a.get("suffix", ""), b.get("suffix", "")
    return (pa.startswith(pb) or pb.startswith(pa)) and (sa.endswith(sb) or sb.endswith(sa))


def overlapping(existing: Mapping[str, Any], entry: Mapping[str, Any]) -> list[str]:
    """The Ids of the configurations in `existing` (other than `entry`'s own) that S3 would
    refuse beside `entry`: a queue, topic or Lambda configuration sending an event type the
    entry sends for keys the entry's filter matches too."""
    found = []
    for kind in CONFIGURATION_KINDS[:3]:
        for other in existing.get(kind, []):
            if other.get("Id") == entry["Id"]:
                continue
            if _events_overlap(entry["Events"], other.get("Events", [])) and _keys_overlap(
                entry, other
            ):
                found.append(str(other.get("Id", "?")))
    return found


def policy_statement(stream: str, queue: QueueAddress, bucket: str) -> dict[str, Any]:
    """The queue policy statement letting S3 send the bucket's events to the queue: only for
    that bucket, and only from the queue's account (the bucket's owner)."""
    return {
        "Sid": statement_sid(stream),
        "Effect": "Allow",
        "Principal": {"Service": "s3.amazonaws.com"},
        "Action": "sqs:SendMessage",
        "Resource": queue.arn,
        "Condition": {
            "ArnEquals": {"aws:SourceArn": queue.bucket_arn(bucket)},
            "StringEquals": {"aws:SourceAccount": queue.account},
        },
    }


def merged_queue_policy(existing: str | None, statement: Mapping[str, Any]) -> dict[str, Any]:
    """The queue's policy (its `Policy` attribute, JSON, or None/empty when it has none) with
    `statement` in place of the statement of the same Sid, or added; the others kept in order.
    Raises `WiringError` when the existing policy is not a JSON policy document."""
    policy: dict[str, Any] = {"Version": POLICY_VERSION, "Statement": []}
    if existing and existing.strip():
        try:
            loaded = json.loads(existing)
        except ValueError as exc:
            raise WiringError(f"the queue's policy is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise WiringError("the queue's policy is not a JSON object")
        policy = dict(loaded)
    statements = policy.get("Statement", [])
    if isinstance(statements, dict):
        statements = [statements]
    if not isinstance(statements, list):
        raise WiringError("the queue's policy's Statement is not a list")
    kept = [s for s in statements if not isinstance(s, dict) or s.get("Sid") != statement["Sid"]]
    policy["Version"] = policy.get("Version", POLICY_VERSION)
    policy["Statement"] = [*kept, dict(statement)]
    return policy


@dataclass(frozen=True)
class Delivery:
    """How a bucket's notification configuration delivers a stream's created objects: to the
    queue (`direct`), through something leasehold does not follow (`indirect`: an SNS topic,
    EventBridge), or not at all (neither); `detail` says which entry."""

    direct: bool
    indirect: bool
    detail: str


def _filter_rules(entry: Mapping[str, Any]) -> dict[str, str]:
    rules = entry.get("Filter", {}).get("Key", {}).get("FilterRules", [])
    return {str(r.get("Name", "")).lower(): str(r.get("Value", "")) for r in rules}


def _covers(entry: Mapping[str, Any], key_prefix: str) -> bool:
    """Whether the entry sends created-object events of keys under `key_prefix`."""
    created = any(str(e).startswith("s3:ObjectCreated:") for e in entry.get("Events", []))
    return created and key_prefix.startswith(_filter_rules(entry).get("prefix", ""))


def delivery(configuration: Mapping[str, Any], queue_arn: str, key_prefix: str) -> Delivery:
    """Whether `configuration` (the bucket's) sends the created objects under `key_prefix` to
    the queue `queue_arn`: a queue entry for it whose prefix filter covers the stream's (a
    suffix filter is said in `detail`: only part of the keys are sent)."""
    for entry in configuration.get("QueueConfigurations", []):
        if entry.get("QueueArn") == queue_arn and _covers(entry, key_prefix):
            suffix = _filter_rules(entry).get("suffix")
            only = f", only keys ending {suffix!r}" if suffix else ""
            return Delivery(True, False, f"entry {entry.get('Id', '?')!r}{only}")
    topics = [
        str(e.get("TopicArn", "?"))
        for e in configuration.get("TopicConfigurations", [])
        if _covers(e, key_prefix)
    ]
    if topics:
        return Delivery(False, True, f"through SNS topic {topics[0]} (not followed to the queue)")
    if "EventBridgeConfiguration" in configuration:
        return Delivery(False, True, "through EventBridge (its rule is not followed to the queue)")
    prefix = key_prefix or "the whole bucket"
    return Delivery(False, False, f"no entry sends created objects under {prefix} to {queue_arn}")
