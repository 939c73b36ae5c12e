"""`resources.aws_calls`: the timestamps leasehold's AWS clients parse, and the clients it makes."""

from __future__ import annotations

from datetime import datetime, timezone

import boto3
import pytest
from botocore.utils import parse_timestamp

from resources.aws_calls import aws_client, parse_aws_timestamp
from tests.support.aws_server import LocalAwsServer

FORMS = [
    "2026-01-02T03:04:05.000Z",  # S3 ListObjectsV2's LastModified
    "2026-01-02T03:04:05.123Z",
    "2026-01-02T03:04:05Z",
    "2026-01-02T03:04:05.123456Z",
    "2026-01-02T03:04:05+02:00",
    "2026-01-02T03:04:05",
    "Fri, 02 Jan 2026 03:04:05 GMT",  # a HEAD's Last-Modified header
    "1767323045",  # epoch seconds
    "1767323045.5",
]


@pytest.mark.parametrize("value", FORMS)
def test_every_form_reads_as_botocores_own_parser_reads_it(value: str) -> None:
    ours, theirs = parse_aws_timestamp(value), parse_timestamp(value)
    assert ours == theirs
    assert ours.timestamp() == theirs.timestamp()


def test_a_z_string_that_is_no_iso_time_is_left_to_botocore() -> None:
    with pytest.raises(ValueError):
        parse_timestamp("not-a-timeTat all, Z")
    with pytest.raises(ValueError):
        parse_aws_timestamp("not-a-timeTat all, Z")


def test_listed_objects_carry_their_times_in_utc(aws_server: LocalAwsServer) -> None:
    admin = boto3.client("s3", endpoint_url=aws_server.endpoint_url, region_name="us-east-1")
    admin.create_bucket(Bucket="timestamps")
    admin.put_object(Bucket="timestamps", Key="a", Body=b"x")
    client = aws_client("s3", endpoint_url=aws_server.endpoint_url, region="us-east-1")
    (listed,) = client.list_objects_v2(Bucket="timestamps")["Contents"]
    head = client.head_object(Bucket="timestamps", Key="a")
    assert listed["LastModified"].utcoffset() == timezone.utc.utcoffset(None)
    assert listed["LastModified"] == head["LastModified"]
    assert abs(listed["LastModified"].timestamp() - datetime.now().timestamp()) < 600
