"""The DynamoDB client: credentials (an assumed role, refreshed before it expires) and every
call through bounded, jittered retries.

botocore's own retries are off: each call goes through `call_with_retries` — bounded attempts,
full jitter — and then fails with `StoreUnavailableError` naming the table and the operation.
Data Prepper retries throttling forever at a fixed pace, which deepens it.

With `sts_role_arn` the client signs with the role's temporary credentials, and botocore
assumes the role again (same role, session name and external id) before they expire — an
hour by default — so a long-running process keeps its store. STS is asked at the store's
`endpoint_url` when one is set (a local server; moto serves STS on the same port).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

import boto3
import botocore.session
from botocore.config import Config
from botocore.credentials import CredentialProvider, CredentialResolver, RefreshableCredentials
from botocore.exceptions import (
    BotoCoreError,
    ClientError,
    ConnectionClosedError,
    ConnectTimeoutError,
    EndpointConnectionError,
    NoCredentialsError,
    ReadTimeoutError,
)

if TYPE_CHECKING:  # boto3-stubs, a dev extra: only the type checker reads them
    from mypy_boto3_dynamodb.type_defs import KeysAndAttributesTypeDef, WriteRequestUnionTypeDef

from resources.coordination.errors import (
    StoreConfigError,
    StoreRefusedError,
    StoreUnavailableError,
)
from resources.retry import RetryPolicy, call_with_retries, log_retries
from resources.stores.settings import StoreSettings

T = TypeVar("T")

log = logging.getLogger(__name__)

ROLE_SESSION_NAME = "leasehold-coordination"
# How long before the role's credentials expire botocore renews them (its own defaults): from
# the advisory margin on, one caller assumes the role again while the others keep signing with
# the current credentials (a failure there is only logged); from the mandatory margin on, every
# caller waits for fresh ones (and a failure fails the call, retried like any store call).
STS_ADVISORY_REFRESH_S = 15 * 60
STS_MANDATORY_REFRESH_S = 10 * 60

RETRYABLE_CODES = {
    "ProvisionedThroughputExceededException",
    "ThrottlingException",
    "RequestLimitExceeded",
    "InternalServerError",
    "ServiceUnavailable",
    "TransactionInProgressException",
    "Throttling",  # STS's code, when assuming the role (again) is throttled
}
# BatchGetItem's and BatchWriteItem's limits: keys per call.
BATCH_GET_KEYS = 100
BATCH_WRITE_KEYS = 25
CONNECTION_ERRORS = (
    EndpointConnectionError,
    ConnectionClosedError,
    ConnectTimeoutError,
    ReadTimeoutError,
)


class UnprocessedKeysError(Exception):
    """BatchGetItem (or BatchWriteItem) left keys unprocessed (throttled, or over its 16 MB
    response): AWS asks for those to be asked again with backoff, so it is retried like
    throttling."""


def error_code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def cancellation_reasons(exc: ClientError) -> list[str]:
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]


def is_retryable(exc: BaseException) -> bool:
    if isinstance(exc, (UnprocessedKeysError, *CONNECTION_ERRORS)):
        return True
    if error_code(exc) in RETRYABLE_CODES:
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        if status >= 500:
            return True
    if isinstance(exc, ClientError) and error_code(exc) == "TransactionCanceledException":
        reasons = set(cancellation_reasons(exc)) - {"None"}
        return reasons == {"TransactionConflict"}
    return False


class AssumedRole:
    """The role of `settings.sts_role_arn`, assumed with the default credentials (environment,
    profile, instance role) through an STS client at the store's endpoint."""

    def __init__(self, settings: StoreSettings, config: Config) -> None:
        self.role_arn = settings.sts_role_arn
        self.params: dict[str, Any] = {
            "RoleArn": settings.sts_role_arn,
            "RoleSessionName": ROLE_SESSION_NAME,
        }
        if settings.sts_external_id:
            self.params["ExternalId"] = settings.sts_external_id
        self.sts = boto3.session.Session(region_name=settings.region).client(
            "sts", endpoint_url=settings.endpoint_url, config=config
        )
        self.credentials: RefreshableCredentials | None = None

    def fetch(self) -> dict[str, Any]:
        """Assume the role once; the credentials in botocore's refresh format."""
        creds = self.sts.assume_role(**self.params)["Credentials"]
        expiry = creds["Expiration"]
        log.debug("assumed %s; its credentials expire at %s", self.role_arn, expiry)
        return {
            "access_key": creds["AccessKeyId"],
            "secret_key": creds["SecretAccessKey"],
            "token": creds["SessionToken"],
            # A datetime from botocore; the text of anything else a stubbed client gives.
            "expiry_time": expiry.isoformat() if isinstance(expiry, datetime) else str(expiry),  # type: ignore[redundant-expr]
        }

    def session(self, first: dict[str, Any], region: str) -> boto3.session.Session:
        """A boto3 session signing with `first`, and with `fetch`'s fresh credentials once
        those come within `STS_ADVISORY_REFRESH_S` of expiring."""
        self.credentials = RefreshableCredentials.create_from_metadata(
            metadata=first,
            refresh_using=self.fetch,
            method=_AssumedRoleProvider.METHOD,
            advisory_timeout=STS_ADVISORY_REFRESH_S,
            mandatory_timeout=STS_MANDATORY_REFRESH_S,
        )
        core = botocore.session.get_session()
        core.register_component(
            "credential_provider", CredentialResolver([_AssumedRoleProvider(self.credentials)])
        )
        return boto3.session.Session(botocore_session=core, region_name=region)


class _AssumedRoleProvider(CredentialProvider):
    """The only credential provider of the store's session: the assumed role's credentials."""

    METHOD = "custom-leasehold-assume-role"
    CANONICAL_NAME = "custom-leasehold-assume-role"

    def __init__(self, credentials: RefreshableCredentials) -> None:
        super().__init__()
        self._credentials = credentials

    def load(self) -> RefreshableCredentials:
        return self._credentials


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
        self.assumed_role: AssumedRole | None = None
        if settings.sts_role_arn:
            role = AssumedRole(settings, config)
            try:
                first = self.call("AssumeRole", role.fetch)
            except (ClientError, NoCredentialsError) as exc:  # refused: not worth retrying
                raise StoreConfigError(
                    "sts_role_arn", f"cannot assume {settings.sts_role_arn!r}: {exc}"
                ) from exc
            session = role.session(first, settings.region)
            self.assumed_role = role
        else:
            session = boto3.session.Session(region_name=settings.region)
        self.client = session.client("dynamodb", endpoint_url=settings.endpoint_url, config=config)

    def call(self, action: str, fn: Callable[[], T]) -> T:
        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return StoreUnavailableError(
                f"DynamoDB table {self.table_name!r}: {action} failed after {attempts} "
                f"attempts: {exc}"
            )

        # Throttling and transaction conflicts are routine: visible with --debug only.
        what = f"DynamoDB {action} on {self.table_name!r}"
        retrying = log_retries(log, logging.DEBUG, what, self.retry)
        return call_with_retries(
            fn,
            policy=self.retry,
            is_retryable=is_retryable,
            on_give_up=give_up,
            sleep=self._sleep,
            on_retry=retrying,
        )

    def refused(self, action: str, exc: ClientError | BotoCoreError) -> StoreRefusedError:
        """`exc` — an error `call` raised as it came, since no retry changes it (access
        denied, no such table, a request DynamoDB rejects, no credentials) — as the
        `LeaseStoreError` the store's interface promises, naming the table and `action`. A
        caller that expects one error of a call (a failed condition) maps every other."""
        return StoreRefusedError(f"DynamoDB table {self.table_name!r}: {action} refused: {exc}")

    def batch_get(
        self, action: str, keys: Sequence[dict[str, Any]], attributes: Sequence[str] = ()
    ) -> list[dict[str, Any]]:
        """The items of `keys` (distinct: DynamoDB refuses a batch that repeats one) that
        exist, strongly consistent, only `attributes` when given, `BATCH_GET_KEYS` per call.
        Keys left unprocessed are asked again, and only those, with the same bounded, jittered
        backoff as any throttled call."""
        request: KeysAndAttributesTypeDef = {"Keys": [], "ConsistentRead": True}
        if attributes:
            placeholders = {f"#a{i}": name for i, name in enumerate(attributes)}
            request["ProjectionExpression"] = ", ".join(placeholders)
            request["ExpressionAttributeNames"] = placeholders
        found: list[dict[str, Any]] = []
        for start in range(0, len(keys), BATCH_GET_KEYS):
            batch = list(keys[start : start + BATCH_GET_KEYS])
            self.call(action, self._batch_attempt(request, batch, found))
        return found

    def _batch_attempt(
        self,
        request: KeysAndAttributesTypeDef,
        keys: list[dict[str, Any]],
        found: list[dict[str, Any]],
    ) -> Callable[[], None]:
        """One batch as a retryable call: each attempt asks for the keys still unprocessed and
        adds what it got to `found`."""
        pending: Sequence[Mapping[str, Any]] = keys

        def attempt() -> None:
            nonlocal pending
            out = self.client.batch_get_item(
                RequestItems={self.table_name: {**request, "Keys": pending}}
            )
            found.extend(out.get("Responses", {}).get(self.table_name, []))
            asked = len(pending)
            unprocessed = out.get("UnprocessedKeys", {}).get(self.table_name)
            pending = unprocessed.get("Keys", []) if unprocessed else []
            if pending:
                raise UnprocessedKeysError(f"{len(pending)} of {asked} keys left unprocessed")

        return attempt

    def batch_delete(self, action: str, keys: Sequence[dict[str, Any]]) -> None:
        """Delete the items of `keys` (distinct), `BATCH_WRITE_KEYS` per call; an absent item is
        no error. Keys left unprocessed are sent again, and only those, with the same bounded,
        jittered backoff as any throttled call."""
        self._batch_write(action, [{"DeleteRequest": {"Key": k}} for k in keys])

    def batch_put(self, action: str, items: Sequence[dict[str, Any]]) -> None:
        """Put `items` (distinct keys), replacing any item of the same key, `BATCH_WRITE_KEYS`
        per call, unprocessed ones sent again as `batch_delete` does."""
        self._batch_write(action, [{"PutRequest": {"Item": i}} for i in items])

    def _batch_write(self, action: str, requests: list[WriteRequestUnionTypeDef]) -> None:
        for start in range(0, len(requests), BATCH_WRITE_KEYS):
            self.call(action, self._write_attempt(requests[start : start + BATCH_WRITE_KEYS]))

    def _write_attempt(self, requests: list[WriteRequestUnionTypeDef]) -> Callable[[], None]:
        pending: Sequence[WriteRequestUnionTypeDef] = requests

        def attempt() -> None:
            nonlocal pending
            out = self.client.batch_write_item(RequestItems={self.table_name: pending})
            asked = len(pending)
            pending = out.get("UnprocessedItems", {}).get(self.table_name, [])
            if pending:
                raise UnprocessedKeysError(f"{len(pending)} of {asked} writes left unprocessed")

        return attempt
