"""How leasehold calls AWS (S3, SQS; any S3/SQS-compatible endpoint) through boto3: botocore's own
retries off, every call through `call_with_retries` (bounded, full jitter), the errors worth
another attempt told apart from those no retry changes.

Shared by the object stores and the notifications package; the lease store and the catalogs
classify their services' errors themselves (DynamoDB's and Glue's codes differ).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

from resources.retry import RetryPolicy, call_with_retries, log_retries

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
