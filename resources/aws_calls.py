"""How leasehold calls AWS (S3, SQS; any S3/SQS-compatible endpoint) through boto3: botocore's own
retries off, every call through `call_with_retries` (bounded, full jitter), the errors worth
another attempt told apart from those no retry changes.

Shared by the object stores and the notifications package; the lease store and the catalogs
classify their services' errors themselves (DynamoDB's and Glue's codes differ).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

from resources.retry import RetryPolicy, call_with_retries, log_retries

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

T = TypeVar("T")

RETRYABLE_CODES = frozenset(
    {
        "SlowDown",
        "InternalError",
        "RequestTimeout",
        "ServiceUnavailable",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
    }
)


def client_config(max_pool_connections: int = 10) -> Any:
    """botocore's `Config` for a client whose calls go through `call_aws`: no retries of its
    own, short connect and read timeouts."""
    from botocore.config import Config

    return Config(
        retries={"total_max_attempts": 1},
        connect_timeout=2,
        read_timeout=30,
        max_pool_connections=max_pool_connections,
    )


@overload
def aws_client(
    service: Literal["s3"],
    *,
    endpoint_url: str | None,
    region: str,
    max_pool_connections: int = 10,
) -> S3Client: ...


@overload
def aws_client(
    service: str, *, endpoint_url: str | None, region: str, max_pool_connections: int = 10
) -> Any: ...


def aws_client(
    service: str, *, endpoint_url: str | None, region: str, max_pool_connections: int = 10
) -> Any:
    """A boto3 client of `service` with `client_config`, made from leasehold's own boto3
    session, whose responses parse their timestamps with `parse_aws_timestamp`. The session
    is made once per process (credentials resolved as boto3's default session resolves them);
    safe to call from several threads at once (a boto3 session alone is not)."""
    global _session
    with _session_lock:
        if _session is None:
            import boto3
            import botocore.session

            core = botocore.session.get_session()  # a new one, not boto3's default
            core.get_component("response_parser_factory").set_parser_defaults(
                timestamp_parser=parse_aws_timestamp
            )
            _session = boto3.session.Session(botocore_session=core)
        return _session.client(
            service,
            endpoint_url=endpoint_url,
            region_name=region,
            config=client_config(max_pool_connections=max_pool_connections),
        )


_session: Any = None
_session_lock = threading.Lock()


def parse_aws_timestamp(value: str) -> datetime:
    """A response's timestamp: the ISO 8601 UTC form S3 lists objects with
    (`2026-01-02T03:04:05.000Z`) by `datetime.fromisoformat`, anything else (HTTP dates,
    epoch seconds) by botocore's own parser. botocore's goes through dateutil: ~100 µs a
    listed key, most of a listing's CPU; this is ~20 µs (bench/discovery.py)."""
    if len(value) >= 20 and value[10] == "T" and value[-1] == "Z":
        try:
            return datetime.fromisoformat(value[:-1] + "+00:00")  # Python 3.10 reads no Z
        except ValueError:  # not ISO 8601 after all: botocore's parser reads it or says why
            pass
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


def retryable(exc: BaseException) -> bool:
    """Throttled, a 5xx, a timeout or a connection that failed: worth another attempt."""
    from botocore.exceptions import BotoCoreError, ClientError

    if isinstance(exc, ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return code in RETRYABLE_CODES or status >= 500
    return isinstance(exc, BotoCoreError)


def call_aws(
    what: str,
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    give_up: Callable[[BaseException, int], BaseException],
    logger: logging.Logger,
) -> T:
    """`fn()` retried while `retryable`, each retry logged as `<what> failed (attempt n of m)`;
    then the error `give_up(last error, attempts)` makes. An error no retry changes (a
    `ClientError` such as AccessDenied or NoSuchKey) is raised as it came: the caller maps it."""
    return call_with_retries(
        fn,
        policy=policy,
        is_retryable=retryable,
        on_give_up=give_up,
        on_retry=log_retries(logger, logging.WARNING, what, policy),
    )
