"""An S3 retry is logged; giving up is one ObjectStoreError naming the object."""

from __future__ import annotations

import logging

import pytest

from resources.objects.base import ObjectStoreError
from resources.objects.s3 import S3ObjectStore
from resources.retry import RetryPolicy
from tests.support.aws_server import free_port


def test_s3_retries_are_logged(caplog) -> None:
    store = S3ObjectStore(
        "bucket",
        "events",
        endpoint_url=f"http://127.0.0.1:{free_port()}",  # nothing listens there
        retry=RetryPolicy(max_attempts=3, base_delay_s=0.01),
    )
    with pytest.raises(ObjectStoreError, match="S3 get of s3://bucket/events/k failed after 3"):
        store.get_bytes("k")
    retries = [r for r in caplog.records if r.name == "resources.objects.s3"]
    assert [r.levelno for r in retries] == [logging.WARNING] * 2
    assert "S3 get of s3://bucket/events/k failed (attempt 1 of 3)" in retries[0].getMessage()
    assert "Could not connect" in retries[0].getMessage()
