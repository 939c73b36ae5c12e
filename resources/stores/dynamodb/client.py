"""The DynamoDB client: credentials (an assumed role, refreshed before it expires) and every
call through bounded, jittered retries.

botocore's own retries are off: each call goes through `call_with_retries` — bounded attempts,
full jitter — and then fails with `StoreUnavailableError` naming the table and the operation.
Data Prepper retries throttling forever at a fixed pace, which deepens it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import (
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    ReadTimeoutError,
)

from resources.coordination.errors import StoreUnavailableError
from resources.retry import RetryPolicy, call_with_retries
from resources.stores.settings import StoreSettings

T = TypeVar("T")

RETRYABLE_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionInProgressException",
}
CONNECTION_ERRORS = (
    EndpointConnectionError,
    ConnectionClosedError,
    ConnectTimeoutError,
    ReadTimeoutError,
)


def error_code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def cancellation_reasons(exc: ClientError) -> list[str]:
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, CONNECTION_ERRORS):
        return True
    if error_code(exc) in RETRYABLE_CODES:
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if status >= 500:
            return True
    if error_code(exc) == "TransactionCanceledException":
        reasons = set(cancellation_reasons(exc)) - {"None"}  # type: ignore[arg-type]
        return reasons == {"TransactionConflict"}
    return False


def session_for(settings: StoreSettings) -> boto3.session.Session:
    session = boto3.session.Session(region_name=settings.region)
    if settings.sts_role_arn:
        assume: dict[str, Any] = {
            "RoleArn": settings.sts_role_arn,
            "RoleSessionName": "leasehold-coordination",
        }
        if settings.sts_external_id:
            assume["ExternalId"] = settings.sts_external_id
        creds = session.client("sts").assume_role(**assume)["Credentials"]
        session = boto3.session.Session(
            region_name=settings.region,
            aws_access_key_id=creds["AccessKeyId"],
            aws_secret_access_key=creds["SecretAccessKey"],
            aws_session_token=creds["SessionToken"],
        )
    return session


class DynamoDbClient:
    """One boto3 DynamoDB client for one table, and the retry rules every call follows."""

    def __init__(
        self,
        settings: StoreSettings,
        *,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.table_name = settings.table_name
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        config = Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=10)
        self.client = session_for(settings).client(
            "dynamodb", endpoint_url=settings.endpoint_url, config=config
        )

    def call(self, action: str, fn: Callable[[], T]) -> T:
        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return StoreUnavailableError(
                f"DynamoDB table {self.table_name!r}: {action} failed after {attempts} "
                f"attempts: {exc}"
            )

        return call_with_retries(
            fn, policy=self.retry, is_retryable=is_retryable, on_give_up=give_up, sleep=self._sleep
        )
