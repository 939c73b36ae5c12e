"""A bucket's S3 event notification configuration, read and written whole.

boto3's own retries are off; every call goes through `call_with_retries` (bounded, full
jitter). A call that still fails raises `BucketNotificationsError` naming the bucket and the
action — `access_denied` set when S3 refused the caller (`AccessDenied`), which a reader may
take as "not readable by this role" rather than a fault.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from resources.aws_calls import aws_client, call_aws
from resources.errors import LeaseholdError
from resources.notifications.wiring import CONFIGURATION_KINDS
from resources.retry import RetryPolicy

T = TypeVar("T")
log = logging.getLogger(__name__)


class BucketNotificationsError(LeaseholdError):
    """S3 refused, or did not answer, a call on a bucket's notification configuration."""

    def __init__(self, message: str, *, access_denied: bool = False) -> None:
        super().__init__(message)
        self.access_denied = access_denied


class BucketNotifications:
    """One bucket's notification configuration, on S3 or an S3-compatible endpoint."""

    def __init__(
        self,
        bucket: str,
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.bucket = bucket
        self.retry = retry or RetryPolicy()
        self.client = aws_client("s3", endpoint_url=endpoint_url, region=region or "us-east-1")

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        from botocore.exceptions import ClientError

        what = f"S3 {action} on bucket {self.bucket!r}"

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return BucketNotificationsError(f"{what} failed after {attempts} attempts: {exc}")

        try:
            return call_aws(what, fn, policy=self.retry, give_up=give_up, logger=log)
        except ClientError as exc:
            code = exc.response.get("Error", {}).get("Code", "")
            raise BucketNotificationsError(
                f"{what} refused: {exc}", access_denied=code == "AccessDenied"
            ) from exc

    def read(self) -> dict[str, Any]:
        """The bucket's notification configuration: its queue, topic, Lambda and EventBridge
        configurations (empty when it has none). Raises `BucketNotificationsError`."""
        out: Any = self._call(
            "GetBucketNotificationConfiguration",
            lambda: self.client.get_bucket_notification_configuration(Bucket=self.bucket),
        )
        return {kind: out[kind] for kind in CONFIGURATION_KINDS if kind in out}

    def write(self, configuration: Mapping[str, Any]) -> None:
        """Replace the bucket's whole notification configuration with `configuration`.
        Raises `BucketNotificationsError`."""
        self._call(
            "PutBucketNotificationConfiguration",
            lambda: self.client.put_bucket_notification_configuration(
                Bucket=self.bucket,
                # a configuration as read back, a plain dict: the stubs want their TypedDict
                NotificationConfiguration=dict(configuration),  # type: ignore[arg-type]
            ),
        )
