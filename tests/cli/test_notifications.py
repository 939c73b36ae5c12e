"""`leasehold notifications STREAM [--apply]` and doctor's notification checks against the
loopback AWS server: the documents printed, applied and merged with what the bucket and the
queue already hold (twice: the same), a listing stream refused on `discovery.mode`, and the
doctor's checks passing and failing (queue missing, bucket not sending to it, configuration
not readable).

The loopback server serves one request at a time: every receive here is without wait."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest

from resources.cli.doctor_check import Check
from resources.cli.doctor_notifications import check_bucket, check_notifications
from resources.cli.main import main
from resources.notifications.bucket_notifications import BucketNotificationsError
from resources.streams import LakeSettings
from tests.support.aws_server import LocalAwsServer

SCHEMA = "{event_id: string, event_time: timestamp}"


@dataclass
class Wired:
    """A source bucket with notifications of its own, an event queue with a policy of its own,
    and a streams file: `events` by notifications, `clicks` by listing."""

    s3: Any
    sqs: Any
    bucket: str
    queue_url: str
    queue_arn: str
    streams: Path

    def bucket_configuration(self) -> dict[str, Any]:
        out = self.s3.get_bucket_notification_configuration(Bucket=self.bucket)
        out.pop("ResponseMetadata", None)
        return dict(out)

    def queue_policy(self) -> dict[str, Any]:
        attributes = self.sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["Policy"]
        )["Attributes"]
        return dict(json.loads(attributes["Policy"]))

    def write_streams(self, queue_url: str) -> None:
        self.streams.write_text(
            f"""
streams:
  events:
    source: s3://{self.bucket}/events
    format: jsonl
    schema: {SCHEMA}
    event_time: event_time
    table: s3://{self.bucket}-lake/events
    discovery: {{mode: notifications, queue: "{queue_url}"}}
  clicks:
    source: s3://{self.bucket}/clicks
    format: jsonl
    schema: {SCHEMA}
    event_time: event_time
    table: s3://{self.bucket}-lake/clicks
"""
        )


OWNER = {"Sid": "owner", "Effect": "Allow", "Principal": {"AWS": "123456789012"}}


@pytest.fixture
def wired(aws_server: LocalAwsServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Wired:
    endpoint = aws_server.endpoint_url
    suffix = uuid.uuid4().hex[:8]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    sqs = boto3.client("sqs", endpoint_url=endpoint, region_name="us-east-1")
    bucket = f"src-{suffix}"
    for name in (bucket, f"{bucket}-lake"):
        s3.create_bucket(Bucket=name)
    url = sqs.create_queue(QueueName=f"events-{suffix}")["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]
    queue_arn = arn["QueueArn"]
    owner = {**OWNER, "Action": "sqs:SendMessage", "Resource": queue_arn}
    policy = json.dumps({"Version": "2012-10-17", "Statement": [owner]})
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"Policy": policy})
    audit = sqs.create_queue(QueueName=f"audit-{suffix}")["QueueUrl"]
    audit_arn = sqs.get_queue_attributes(QueueUrl=audit, AttributeNames=["QueueArn"])
    s3.put_bucket_notification_configuration(
        Bucket=bucket,
        NotificationConfiguration={
            "QueueConfigurations": [
                {
                    "Id": "audit",
                    "QueueArn": audit_arn["Attributes"]["QueueArn"],
                    "Events": ["s3:ObjectRestore:*"],
                }
            ]
        },
    )
    wired = Wired(s3, sqs, bucket, url, queue_arn, tmp_path / "streams.yaml")
    wired.write_streams(url)
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(wired.streams))
    monkeypatch.setenv("LEASEHOLD_S3_ENDPOINT_URL", endpoint)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    return wired


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name.removeprefix("notifications: events "): c for c in checks}


def test_the_documents_are_printed_and_nothing_is_applied(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    before = wired.bucket_configuration()
    assert main(["notifications", "events"]) == 0
    out = capsys.readouterr().out
    assert f"queue ARN {wired.queue_arn} (the queue's QueueArn)" in out
    entry = json.loads(out[out.index("{") : out.index("\n}\n") + 2])
    assert entry == {
        "QueueConfigurations": [
            {
                "Id": "leasehold-events",
                "QueueArn": wired.queue_arn,
                "Events": ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"],
                "Filter": {"Key": {"FilterRules": [{"Name": "prefix", "Value": "events/"}]}},
            }
        ]
    }
    policy = json.loads(out[out.index("SQS queue policy") :].split("\n", 1)[1])
    (statement,) = policy["Statement"]
    assert statement["Principal"] == {"Service": "s3.amazonaws.com"}
    assert statement["Condition"]["ArnEquals"] == {"aws:SourceArn": f"arn:aws:s3:::{wired.bucket}"}
    assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": "123456789012"}
    assert wired.bucket_configuration() == before
    assert [s["Sid"] for s in wired.queue_policy()["Statement"]] == ["owner"]


def test_apply_merges_both_documents_and_applying_again_changes_nothing(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["notifications", "events", "--apply"]) == 0
    out = capsys.readouterr().out
    assert "statement 'leasehold-events-s3-events' (1 other statements kept)" in out
    assert "entry 'leasehold-events' (1 other entries kept)" in out
    configuration = wired.bucket_configuration()
    assert [c["Id"] for c in configuration["QueueConfigurations"]] == ["audit", "leasehold-events"]
    ours = configuration["QueueConfigurations"][1]
    assert ours["QueueArn"] == wired.queue_arn
    assert sorted(ours["Events"]) == ["s3:ObjectCreated:*", "s3:ObjectRemoved:*"]
    policy = wired.queue_policy()
    assert [s["Sid"] for s in policy["Statement"]] == ["owner", "leasehold-events-s3-events"]
    assert main(["notifications", "events", "--apply"]) == 0
    assert wired.bucket_configuration() == configuration
    assert wired.queue_policy() == policy


def test_a_bucket_whose_configurations_overlap_is_refused_before_anything_is_written(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    configuration = wired.bucket_configuration()
    (audit,) = configuration["QueueConfigurations"]
    clash = {**audit, "Id": "everything", "Events": ["s3:ObjectCreated:Put"]}
    wired.s3.put_bucket_notification_configuration(
        Bucket=wired.bucket, NotificationConfiguration={"QueueConfigurations": [audit, clash]}
    )
    before = wired.bucket_configuration()
    assert main(["notifications", "events", "--apply"]) == 1
    err = capsys.readouterr().err
    assert "'everything'" in err and "S3 refuses overlapping configurations" in err
    assert wired.bucket_configuration() == before
    assert [s["Sid"] for s in wired.queue_policy()["Statement"]] == ["owner"]


def test_a_listing_stream_is_refused_naming_discovery_mode(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["notifications", "clicks"]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert "'clicks'" in line and "discovery.mode" in line and "'listing'" in line
    assert main(["notifications", "nope"]) == 2
    assert "STREAM" in capsys.readouterr().err


def test_a_queue_that_does_not_answer_gives_an_arn_from_its_url_and_is_not_applied(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = wired.queue_url.rsplit("/", 1)[0] + "/no-such-queue"
    wired.write_streams(missing)
    assert main(["notifications", "events"]) == 0
    out = capsys.readouterr().out
    assert "queue ARN arn:aws:sqs:us-east-1:123456789012:no-such-queue (derived from the URL" in out
    before = wired.bucket_configuration()
    assert main(["notifications", "events", "--apply"]) == 1
    assert "no-such-queue" in capsys.readouterr().err
    assert wired.bucket_configuration() == before


def test_doctor_passes_a_wired_stream_and_says_what_it_found(wired: Wired) -> None:
    assert main(["notifications", "events", "--apply"]) == 0
    checks = by_name(list(check_notifications(LakeSettings.from_env())))
    assert list(checks) == ["queue reachable", "queue receives", "bucket sends events to the queue"]
    assert all(c.ok for c in checks.values()), checks
    assert "visibility timeout 30 s, no dead-letter queue" in checks["queue reachable"].detail
    assert "'leasehold-events'" in checks["bucket sends events to the queue"].detail


def test_doctor_fails_a_bucket_that_does_not_send_to_the_queue_with_the_command_to_run(
    wired: Wired, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--no-spark-query"]) == 1
    out = capsys.readouterr().out
    assert "PASS  notifications: events queue reachable" in out
    assert "PASS  notifications: events queue receives" in out
    assert "FAIL  notifications: events bucket sends events to the queue" in out
    assert "no entry sends created objects under events/" in out
    assert "fix: run `leasehold notifications events --apply`" in out
    assert "notifications: clicks" not in out


def test_doctor_fails_a_missing_queue_and_checks_nothing_after_it(wired: Wired) -> None:
    wired.write_streams(wired.queue_url.rsplit("/", 1)[0] + "/no-such-queue")
    (check,) = check_notifications(LakeSettings.from_env())
    assert check.name == "notifications: events queue reachable" and not check.ok
    assert "no-such-queue" in check.detail
    assert "fix discovery.queue of events" in check.fix
    assert "`leasehold notifications events --apply`" in check.fix


class Unreadable:
    bucket = "src"

    def __init__(self, denied: bool) -> None:
        self.denied = denied

    def read(self) -> dict[str, Any]:
        raise BucketNotificationsError("S3 refused", access_denied=self.denied)


def test_a_configuration_the_role_may_not_read_is_said_not_failed() -> None:
    denied = check_bucket("events", Unreadable(True), "arn:aws:sqs:us-east-1:1:q", "events/")
    assert denied.ok and "could not read" in denied.detail and "not checked" in denied.detail
    refused = check_bucket("events", Unreadable(False), "arn:aws:sqs:us-east-1:1:q", "events/")
    assert not refused.ok and "--apply" in refused.fix
