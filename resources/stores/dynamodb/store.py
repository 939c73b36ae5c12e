"""DynamoDB lease store: the multi-node backend, Data Prepper's table layout.

Every owner write is one `UpdateItem` conditional on status, owner and epoch; a refused one
returns the old item in the same call (`ReturnValuesOnConditionCheckFailure`), so telling
"not found" from "not owned" costs nothing extra. The `source-status` GSI only *proposes*
candidates for `acquire_next` — it lags the table — and the conditional write decides.

A commit (§5) is one `TransactWriteItems`: the per-table-partition id counters (conditional on
the values just read), the small objects, the commit record and the fenced lease update. If
another commit moved a counter first, the transaction is cancelled whole and retried.

botocore's own retries are off: every call goes through `call_with_retries` — bounded
attempts, full jitter — and then fails with the table and the operation named.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator, Sequence
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

from resources.coordination import metrics as m
from resources.coordination.errors import (
    PartitionNotFoundError,
    PartitionNotOwnedError,
    PartitionUnavailableError,
    StoreConfigError,
    StoreUnavailableError,
)
from resources.coordination.items import (
    ATTR,
    NOT_GIVEN,
    Clock,
    LeaseItem,
    LeaseToken,
    PartitionStatus,
    priority_at,
    status_key,
    to_millis,
)
from resources.coordination.lease_store import LeaseStore
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    check_commit_size,
    group_by_partition,
)
from resources.retry import RetryPolicy, call_with_retries
from resources.stores.settings import StoreSettings

T = TypeVar("T")

GSI = "source-status"
METRICS_SID = "__leasehold__|metrics"
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
# Attribute name placeholders: every expression uses `#short` names for Data Prepper's names.
NAMES = {f"#{short}": name for short, name in ATTR.items()}


def _names(*expressions: str) -> dict[str, str]:
    """Exactly the `#name` placeholders used (DynamoDB rejects unused ones)."""
    used = {t for e in expressions for t in re.findall(r"#\w+", e)}
    return {k: v for k, v in NAMES.items() if k in used}


def _s(value: str) -> dict[str, str]:
    return {"S": value}


def _n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def _code(exc: BaseException) -> str:
    return exc.response.get("Error", {}).get("Code", "") if isinstance(exc, ClientError) else ""


def _reasons(exc: ClientError) -> list[str]:
    return [r.get("Code", "None") for r in exc.response.get("CancellationReasons", [])]


def _item_from(raw: dict[str, Any]) -> LeaseItem:
    def s(name: str) -> str | None:
        value = raw.get(ATTR[name])
        return None if value is None else value["S"]

    def n(name: str) -> int | None:
        value = raw.get(ATTR[name])
        return None if value is None else int(value["N"])

    return LeaseItem(
        source_identifier=raw[ATTR["sid"]]["S"],
        partition_key=raw[ATTR["key"]]["S"],
        status=PartitionStatus(raw[ATTR["status"]]["S"]),
        owner=s("owner"),
        progress_state=s("progress"),
        ownership_timeout_ms=n("ownership_timeout"),
        reopen_at_ms=n("reopen_at"),
        closed_count=n("closed_count") or 0,
        version=n("version") or 0,
        epoch=n("epoch") or 0,
        priority=s("priority") or "",
        expiration_time=n("expiration"),
        dead_letter_reason=s("dead_letter"),
    )


class _Update:
    """Builds one UpdateExpression: SET/REMOVE clauses and their values."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.values: dict[str, dict[str, str]] = {}

    def set(self, short: str, value: dict[str, str]) -> _Update:
        self.sets.append(f"#{short} = :{short}")
        self.values[f":{short}"] = value
        return self

    def incr(self, short: str) -> _Update:
        self.sets.append(f"#{short} = #{short} + :one")
        self.values[":one"] = _n(1)
        return self

    def remove(self, *shorts: str) -> _Update:
        self.removes.extend(f"#{s}" for s in shorts)
        return self

    def progress(self, progress_state: str | None) -> _Update:
        if progress_state is NOT_GIVEN:
            return self
        if progress_state is None:
            return self.remove("progress")
        return self.set("progress", _s(progress_state))

    def expression(self) -> str:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        return " ".join(parts)

    def names(self, condition: str = "") -> dict[str, str]:
        return _names(self.expression(), condition)


OWNED = "#status = :c_assigned AND #owner = :c_owner AND #epoch = :c_epoch"
AVAILABLE = (
    "attribute_exists(#key) AND (#status = :c_unassigned"
    " OR (#status = :c_assigned AND #ownership_timeout < :c_now)"
    " OR (#status = :c_closed AND #reopen_at <= :c_now))"
)


class DynamoDbLeaseStore(LeaseStore):
    backend = "dynamodb"

    def __init__(
        self,
        settings: StoreSettings,
        *,
        clock: Clock = time.time,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        settings.validate()
        super().__init__(
            partition_prefix=settings.partition_prefix,
            ttl_seconds=settings.ttl_seconds,
            clock=clock,
        )
        self.settings = settings
        self.table_name = settings.table_name
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self._seq = 0
        self._seq_lock = threading.Lock()
        self.client = self._client(settings)
        if settings.skip_table_creation:
            self._check_table()
        else:
            self._create_table()

    # -- connection and table ------------------------------------------------------------------

    @staticmethod
    def _client(settings: StoreSettings) -> Any:
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
        config = Config(
            retries={"total_max_attempts": 1},
            connect_timeout=2,
            read_timeout=10,
        )
        return session.client("dynamodb", endpoint_url=settings.endpoint_url, config=config)

    def _call(self, action: str, fn: Callable[[], T]) -> T:
        def retryable(exc: BaseException) -> bool:
            if isinstance(exc, CONNECTION_ERRORS):
                return True
            if _code(exc) in RETRYABLE_CODES:
                return True
            if isinstance(exc, ClientError):
                status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
                if status >= 500:
                    return True
            if _code(exc) == "TransactionCanceledException":
                reasons = set(_reasons(exc)) - {"None"}  # type: ignore[arg-type]
                return reasons == {"TransactionConflict"}
            return False

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return StoreUnavailableError(
                f"DynamoDB table {self.table_name!r}: {action} failed after {attempts} "
                f"attempts: {exc}"
            )

        return call_with_retries(
            fn, policy=self.retry, is_retryable=retryable, on_give_up=give_up, sleep=self._sleep
        )

    def _create_table(self) -> None:
        s = self.settings
        provisioned = s.billing_mode == "PROVISIONED"
        throughput = {
            "ReadCapacityUnits": s.provisioned_read_capacity_units,
            "WriteCapacityUnits": s.provisioned_write_capacity_units,
        }
        index: dict[str, Any] = {
            "IndexName": GSI,
            "KeySchema": [
                {"AttributeName": ATTR["status_key"], "KeyType": "HASH"},
                {"AttributeName": ATTR["priority"], "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "ALL"},
        }
        request: dict[str, Any] = {
            "TableName": self.table_name,
            "KeySchema": [
                {"AttributeName": ATTR["sid"], "KeyType": "HASH"},
                {"AttributeName": ATTR["key"], "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": ATTR[a], "AttributeType": "S"}
                for a in ("sid", "key", "status_key", "priority")
            ],
            "BillingMode": s.billing_mode,
            "GlobalSecondaryIndexes": [index],
        }
        if provisioned:
            request["ProvisionedThroughput"] = throughput
            index["ProvisionedThroughput"] = throughput
        try:
            self._call("CreateTable", lambda: self.client.create_table(**request))
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise
            # Another node created it first: it must fit like any existing table.
        self._call(
            "DescribeTable",
            lambda: self.client.get_waiter("table_exists").wait(
                TableName=self.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
            ),
        )
        if self.ttl_seconds is not None:
            try:
                self._call(
                    "UpdateTimeToLive",
                    lambda: self.client.update_time_to_live(
                        TableName=self.table_name,
                        TimeToLiveSpecification={
                            "Enabled": True,
                            "AttributeName": ATTR["expiration"],
                        },
                    ),
                )
            except ClientError as exc:
                if "already enabled" not in str(exc).lower():
                    raise
        self._check_table()

    def _check_table(self) -> None:
        """An existing table must have our keys, the `source-status` index and (with a TTL
        configured) TTL on `expirationTime`; anything else fails here, before any work."""
        try:
            table = self._call(
                "DescribeTable", lambda: self.client.describe_table(TableName=self.table_name)
            )["Table"]
        except ClientError as exc:
            if _code(exc) == "ResourceNotFoundException":
                raise StoreConfigError(
                    "table_name",
                    f"table {self.table_name!r} does not exist and skip_table_creation is set",
                ) from None
            raise
        keys = {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]}
        want = {ATTR["sid"]: "HASH", ATTR["key"]: "RANGE"}
        if keys != want:
            raise StoreConfigError(
                "table_name", f"table {self.table_name!r} has keys {keys}, leasehold needs {want}"
            )
        indexes = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
        index_keys = {
            k["AttributeName"]: k["KeyType"] for k in indexes.get(GSI, {}).get("KeySchema", [])
        }
        want_index = {ATTR["status_key"]: "HASH", ATTR["priority"]: "RANGE"}
        if index_keys != want_index:
            raise StoreConfigError(
                "table_name",
                f"table {self.table_name!r} lacks the global secondary index {GSI!r} on "
                f"{want_index} (found {sorted(indexes) or 'no indexes'})",
            )
        if self.ttl_seconds is not None:
            ttl = self._call(
                "DescribeTimeToLive",
                lambda: self.client.describe_time_to_live(TableName=self.table_name),
            )["TimeToLiveDescription"]
            if (
                ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING")
                or ttl.get("AttributeName") != ATTR["expiration"]
            ):
                raise StoreConfigError(
                    "ttl",
                    f"ttl is configured but table {self.table_name!r} has TTL "
                    f"{ttl.get('TimeToLiveStatus', 'DISABLED')} on "
                    f"{ttl.get('AttributeName')!r}, not ENABLED on {ATTR['expiration']!r}",
                )

    # -- helpers -------------------------------------------------------------------------------

    @staticmethod
    def _key(sid: str, key: str) -> dict[str, dict[str, str]]:
        return {ATTR["sid"]: _s(sid), ATTR["key"]: _s(key)}

    def _with_ttl(self, update: _Update, now: int) -> _Update:
        expiration = self.expiration_at(now)
        return update if expiration is None else update.set("expiration", _n(expiration))

    def _update(
        self,
        action: str,
        sid: str,
        key: str,
        update: _Update,
        condition: str,
        condition_values: dict[str, dict[str, str]],
    ) -> tuple[LeaseItem | None, dict[str, Any] | None]:
        """One conditional UpdateItem: (new item, None) or (None, old item or {} if absent)."""
        try:
            out = self._call(
                action,
                lambda: self.client.update_item(
                    TableName=self.table_name,
                    Key=self._key(sid, key),
                    UpdateExpression=update.expression(),
                    ConditionExpression=condition,
                    ExpressionAttributeNames=update.names(condition),
                    ExpressionAttributeValues={**update.values, **condition_values},
                    ReturnValues="ALL_NEW",
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                ),
            )
        except ClientError as exc:
            if _code(exc) != "ConditionalCheckFailedException":
                raise
            old = exc.response.get("Item")
            if old is None:
                current = self.get(sid, key)  # the server did not return the old item
                return None, {} if current is None else {"item": current}
            return None, {"item": _item_from(old)}
        return _item_from(out["Attributes"]), None

    # -- partition operations ------------------------------------------------------------------

    def create_partitions(
        self,
        source_identifier: str,
        partition_keys: Sequence[str],
        progress_state: str | None = None,
    ) -> int:
        keys = list(dict.fromkeys(partition_keys))
        now = self.now_ms()
        with self._seq_lock:
            base = self._seq
            self._seq += len(keys)
        expiration = self.expiration_at(now)
        created = 0
        for start in range(0, len(keys), 100):
            puts = []
            for offset, key in enumerate(keys[start : start + 100]):
                item = {
                    **self._key(source_identifier, key),
                    ATTR["status"]: _s(PartitionStatus.UNASSIGNED.value),
                    ATTR["status_key"]: _s(
                        status_key(source_identifier, PartitionStatus.UNASSIGNED)
                    ),
                    ATTR["priority"]: _s(priority_at(now, base + start + offset)),
                    ATTR["closed_count"]: _n(0),
                    ATTR["version"]: _n(1),
                    ATTR["epoch"]: _n(0),
                }
                if progress_state is not None:
                    item[ATTR["progress"]] = _s(progress_state)
                if expiration is not None:
                    item[ATTR["expiration"]] = _n(expiration)
                puts.append(item)
            created += self._put_absent(puts)
        self.metrics.incr(source_identifier, m.PARTITIONS_CREATED, created)
        return created

    def _put_absent(self, items: list[dict[str, Any]]) -> int:
        """Put items that do not exist yet, in one transaction; drop existing ones and retry."""
        while items:
            try:
                self._call(
                    "create",
                    lambda items=items: self.client.transact_write_items(
                        TransactItems=[
                            {
                                "Put": {
                                    "TableName": self.table_name,
                                    "Item": item,
                                    "ConditionExpression": "attribute_not_exists(#key)",
                                    "ExpressionAttributeNames": {"#key": ATTR["key"]},
                                }
                            }
                            for item in items
                        ]
                    ),
                )
                return len(items)
            except ClientError as exc:
                reasons = _reasons(exc)
                if _code(exc) != "TransactionCanceledException" or len(reasons) != len(items):
                    raise
                items = [
                    i for i, r in zip(items, reasons, strict=True) if r != "ConditionalCheckFailed"
                ]
        return 0

    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None:
        out = self._call(
            "get",
            lambda: self.client.get_item(
                TableName=self.table_name,
                Key=self._key(source_identifier, partition_key),
                ConsistentRead=True,
            ),
        )
        raw = out.get("Item")
        return None if raw is None or ATTR["status"] not in raw else _item_from(raw)

    def _try_acquire(
        self, sid: str, key: str, owner: str, timeout_s: float
    ) -> tuple[LeaseItem | None, dict[str, Any] | None]:
        now = self.now_ms()
        deadline = now + to_millis(timeout_s)
        update = (
            _Update()
            .set("owner", _s(owner))
            .set("status", _s(PartitionStatus.ASSIGNED.value))
            .set("status_key", _s(status_key(sid, PartitionStatus.ASSIGNED)))
            .set("ownership_timeout", _n(deadline))
            .set("priority", _s(priority_at(deadline)))
            .incr("epoch")
            .incr("version")
            .remove("reopen_at", "dead_letter")
        )
        values = {
            ":c_unassigned": _s(PartitionStatus.UNASSIGNED.value),
            ":c_assigned": _s(PartitionStatus.ASSIGNED.value),
            ":c_closed": _s(PartitionStatus.CLOSED.value),
            ":c_now": _n(now),
        }
        return self._update("acquire", sid, key, self._with_ttl(update, now), AVAILABLE, values)

    def acquire(
        self, source_identifier: str, partition_key: str, owner: str, timeout_s: float
    ) -> LeaseItem:
        item, refused = self._try_acquire(source_identifier, partition_key, owner, timeout_s)
        if item is not None:
            self.metrics.incr(source_identifier, m.PARTITIONS_ACQUIRED)
            return item
        if refused and "item" in refused:
            raise PartitionUnavailableError(refused["item"])
        self.metrics.incr(source_identifier, m.PARTITION_NOT_FOUND)
        raise PartitionNotFoundError(source_identifier, partition_key)

    def _by_status(
        self, sid: str, status: PartitionStatus, op: str, now_prio: str, limit: int = 25
    ) -> list[LeaseItem]:
        """One GSI query: items of `status`, by priority, optionally `op` now (GSI: may lag)."""
        condition = "#status_key = :sk" + (f" AND #priority {op} :p" if op else "")
        values = {":sk": _s(status_key(sid, status))}
        if op:
            values[":p"] = _s(now_prio)
        out = self._call(
            "query_status",
            lambda: self.client.query(
                TableName=self.table_name,
                IndexName=GSI,
                KeyConditionExpression=condition,
                ExpressionAttributeNames=_names(condition),
                ExpressionAttributeValues=values,
                ScanIndexForward=True,
                Limit=limit,
            ),
        )
        return [_item_from(raw) for raw in out.get("Items", [])]

    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        now = self.now_ms()
        sid, now_prio = source_identifier, priority_at(now)
        items = self._by_status(sid, PartitionStatus.ASSIGNED, "<", now_prio, limit)
        items += self._by_status(sid, PartitionStatus.CLOSED, "<=", now_prio, limit)
        if unassigned_for_s is not None:
            waited = priority_at(now - to_millis(unassigned_for_s))
            items += self._by_status(sid, PartitionStatus.UNASSIGNED, "<", waited, limit)
        return sorted(items, key=lambda i: i.priority)[:limit]

    def acquire_next(
        self, source_identifier: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        now_prio = priority_at(self.now_ms())
        for status, op in (
            (PartitionStatus.ASSIGNED, "<"),
            (PartitionStatus.CLOSED, "<="),
            (PartitionStatus.UNASSIGNED, ""),
        ):
            for candidate in self._by_status(source_identifier, status, op, now_prio):
                key = candidate.partition_key
                item, _ = self._try_acquire(source_identifier, key, owner, timeout_s)
                if item is not None:
                    self.metrics.incr(source_identifier, m.PARTITIONS_ACQUIRED)
                    return item
        self.metrics.incr(source_identifier, m.NO_PARTITIONS_ACQUIRED)
        return None

    def _owned_values(self, token: LeaseToken) -> dict[str, dict[str, str]]:
        return {
            ":c_assigned": _s(PartitionStatus.ASSIGNED.value),
            ":c_owner": _s(token.owner),
            ":c_epoch": _n(token.epoch),
        }

    def _refused(
        self, token: LeaseToken, action: str, refused: dict[str, Any] | None
    ) -> PartitionNotOwnedError:
        self.metrics.incr(token.source_identifier, m.update_errors(action))
        missing = not refused or "item" not in refused
        self.metrics.incr(
            token.source_identifier, m.PARTITION_NOT_FOUND if missing else m.PARTITION_NOT_OWNED
        )
        return PartitionNotOwnedError(token, action)

    def _fenced(self, token: LeaseToken, action: str, update: _Update) -> LeaseItem:
        try:
            item, refused = self._update(
                action,
                token.source_identifier,
                token.partition_key,
                self._with_ttl(update, self.now_ms()),
                OWNED,
                self._owned_values(token),
            )
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(action))
            raise
        if item is None:
            raise self._refused(token, action, refused)
        return item

    def _release(self, sid: str, status: PartitionStatus, priority: str) -> _Update:
        return (
            _Update()
            .set("status", _s(status.value))
            .set("status_key", _s(status_key(sid, status)))
            .set("priority", _s(priority))
            .incr("version")
            .remove("owner", "ownership_timeout")
        )

    def renew(
        self, token: LeaseToken, timeout_s: float, progress_state: str | None = NOT_GIVEN
    ) -> LeaseItem:
        update = self._renew_update(self.now_ms(), timeout_s, progress_state)
        return self._fenced(token, "saveState", update)

    @staticmethod
    def _renew_update(now: int, timeout_s: float, progress_state: str | None) -> _Update:
        deadline = now + to_millis(timeout_s)
        return (
            _Update()
            .set("ownership_timeout", _n(deadline))
            .set("priority", _s(priority_at(deadline)))
            .incr("version")
            .progress(progress_state)
        )

    def close(
        self,
        token: LeaseToken,
        reopen_after_s: float,
        max_closed_count: int,
        reason: str = "",
        progress_state: str | None = NOT_GIVEN,
    ) -> LeaseItem:
        now = self.now_ms()
        reopen = now + to_millis(reopen_after_s)
        sid = token.source_identifier
        update = (
            self._release(sid, PartitionStatus.CLOSED, priority_at(reopen))
            .set("reopen_at", _n(reopen))
            .incr("closed_count")
            .progress(progress_state)
        )
        condition = OWNED + " AND #closed_count < :c_max"
        values = {**self._owned_values(token), ":c_max": _n(max_closed_count)}
        item, refused = self._update(
            "close", sid, token.partition_key, self._with_ttl(update, now), condition, values
        )
        if item is None:
            old = (refused or {}).get("item")
            owned = (
                old is not None
                and old.status is PartitionStatus.ASSIGNED
                and old.owner == token.owner
                and old.epoch == token.epoch
            )
            if not owned:
                raise self._refused(token, "close", refused)
            # Closed too often: dead-letter it (the rare second call of this path).
            dead = (
                self._release(sid, PartitionStatus.COMPLETED, priority_at(now))
                .incr("closed_count")
                .set("dead_letter", _s(reason or f"closed {old.closed_count + 1} times"))
                .remove("reopen_at")
                .progress(progress_state)
            )
            item = self._fenced(token, "close", dead)
        self.metrics.incr(sid, m.PARTITIONS_CLOSED)
        return item

    def give_up(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        now = self.now_ms()
        update = self._release(
            token.source_identifier, PartitionStatus.UNASSIGNED, priority_at(now)
        ).progress(progress_state)
        return self._fenced(token, "giveUp", update)

    def complete(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        update = self._complete_update(token, progress_state)
        item = self._fenced(token, "complete", update)
        self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return item

    def _complete_update(self, token: LeaseToken, progress_state: str | None) -> _Update:
        now = self.now_ms()
        return self._release(
            token.source_identifier, PartitionStatus.COMPLETED, priority_at(now)
        ).progress(progress_state)

    def iter_items(self, source_identifier: str | None = None) -> Iterator[LeaseItem]:
        if source_identifier is None:
            pages = self.client.get_paginator("scan").paginate(TableName=self.table_name)
        else:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#sid = :sid",
                ExpressionAttributeNames={"#sid": ATTR["sid"]},
                ExpressionAttributeValues={":sid": _s(source_identifier)},
                ConsistentRead=True,
            )
        items = [
            _item_from(raw)
            for page in self._call("iter_items", lambda: list(pages))
            for raw in page.get("Items", [])
            if ATTR["status"] in raw
        ]
        yield from sorted(items, key=lambda i: (i.source_identifier, i.priority))

    def source_identifiers(self) -> list[str]:
        return sorted({item.source_identifier for item in self.iter_items()})

    # -- ledger --------------------------------------------------------------------------------

    def _ledger_sid(self, kind: str, name: str) -> str:
        return "|".join([*([self.partition_prefix] if self.partition_prefix else []), name, kind])

    def _partition_key(self, table: str, dt: str) -> dict[str, dict[str, str]]:
        return self._key(self._ledger_sid("tablePartition", table), dt)

    def _objects_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("smallObjects", f"{table}|{dt}")

    def _record_key(self, sid: str, key: str) -> dict[str, dict[str, str]]:
        return self._key(f"{sid}|commit", key)

    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
    ) -> CommitResult:
        objects = list(objects)
        check_commit_size(objects)
        groups = group_by_partition(objects)
        action = "complete" if complete else "saveState"
        for _ in range(self.retry.max_attempts * 2):
            counters = self._read_counters(list(groups))
            now = self.now_ms()
            registered: list[RegisteredObject] = []
            writes: list[dict[str, Any]] = []
            for (table, dt), group in groups.items():
                next_id, last_live = counters.get((table, dt), (None, None))
                first = next_id or 1
                counter: dict[str, Any] = {
                    "TableName": self.table_name,
                    "Key": self._partition_key(table, dt),
                    "UpdateExpression": "SET nextObjectId = :new",
                    "ExpressionAttributeValues": {":new": _n(first + len(group))},
                }
                if next_id is None:
                    counter["ConditionExpression"] = "attribute_not_exists(nextObjectId)"
                else:
                    counter["ConditionExpression"] = "nextObjectId = :old"
                    counter["ExpressionAttributeValues"][":old"] = _n(next_id)
                writes.append({"Update": counter})
                for offset, obj in enumerate(group):
                    reg = RegisteredObject(
                        table=table,
                        dt=dt,
                        object_id=first + offset,
                        url=obj.url,
                        content_length=obj.content_length,
                        row_count=obj.row_count,
                        source_identifier=token.source_identifier,
                        source_partition_key=token.partition_key,
                        epoch=token.epoch,
                        delayed=last_live is not None,
                    )
                    registered.append(reg)
                    writes.append({"Put": self._object_put(reg, now)})
            record_index = None
            if complete:
                record_index = len(writes)
                writes.append({"Put": self._record_put(token, registered, now)})
            if complete:
                update = self._complete_update(token, progress_state)
            else:
                update = self._renew_update(now, timeout_s, progress_state)
            update = self._with_ttl(update, now)
            lease_index = len(writes)
            writes.append(
                {
                    "Update": {
                        "TableName": self.table_name,
                        "Key": self._key(token.source_identifier, token.partition_key),
                        "UpdateExpression": update.expression(),
                        "ConditionExpression": OWNED,
                        "ExpressionAttributeNames": update.names(OWNED),
                        "ExpressionAttributeValues": {
                            **update.values,
                            **self._owned_values(token),
                        },
                    }
                }
            )
            try:
                self._call(
                    action,
                    lambda writes=writes: self.client.transact_write_items(TransactItems=writes),
                )
            except StoreUnavailableError:
                self.metrics.incr(token.source_identifier, m.update_errors(action))
                raise
            except ClientError as exc:
                reasons = _reasons(exc)
                if _code(exc) != "TransactionCanceledException" or not reasons:
                    raise
                if reasons[lease_index] == "ConditionalCheckFailed":
                    current = self.get(token.source_identifier, token.partition_key)
                    raise self._refused(
                        token, action, None if current is None else {"item": current}
                    ) from None
                if record_index is not None and reasons[record_index] == "ConditionalCheckFailed":
                    record = self.commit_record(token.source_identifier, token.partition_key)
                    raise AlreadyCommittedError(record) from None  # type: ignore[arg-type]
                continue  # a counter moved under us: read it again and retry
            item = self.get(token.source_identifier, token.partition_key)
            if complete:
                self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
            return CommitResult(item, tuple(registered))  # type: ignore[arg-type]
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: {action} kept losing the id-counter race"
        )

    def _read_counters(
        self, partitions: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, int | None]]:
        if not partitions:
            return {}
        keys = [self._partition_key(t, d) for t, d in partitions]
        out = self._call(
            "commit",
            lambda: self.client.batch_get_item(
                RequestItems={self.table_name: {"Keys": keys, "ConsistentRead": True}}
            ),
        )
        found: dict[tuple[str, str], tuple[int, int | None]] = {}
        for raw in out.get("Responses", {}).get(self.table_name, []):
            table = raw[ATTR["sid"]]["S"].rsplit("|", 1)[0]
            if self.partition_prefix:
                table = table.split("|", 1)[1]
            last = raw.get("lastLiveObjectId")
            found[(table, raw[ATTR["key"]]["S"])] = (
                int(raw["nextObjectId"]["N"]),
                None if last is None else int(last["N"]),
            )
        return found

    def _object_put(self, o: RegisteredObject, now: int) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": {
                **self._key(self._objects_sid(o.table, o.dt), f"{o.object_id:019d}"),
                "url": _s(o.url),
                "contentLength": _n(o.content_length),
                "rowCount": _n(o.row_count),
                "sourceOfObject": _s(o.source_identifier),
                "sourceObjectPartitionKey": _s(o.source_partition_key),
                "epoch": _n(o.epoch),
                "delayed": {"BOOL": o.delayed},
                "committedAt": _n(now),
            },
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def _record_put(
        self, token: LeaseToken, registered: list[RegisteredObject], now: int
    ) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": {
                **self._record_key(token.source_identifier, token.partition_key),
                "epoch": _n(token.epoch),
                "objectIds": {
                    "L": [{"L": [_s(o.table), _s(o.dt), _n(o.object_id)]} for o in registered]
                },
                "committedAt": _n(now),
            },
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        out = self._call(
            "commit_record",
            lambda: self.client.get_item(
                TableName=self.table_name,
                Key=self._record_key(source_identifier, partition_key),
                ConsistentRead=True,
            ),
        )
        raw = out.get("Item")
        if raw is None:
            return None
        ids = tuple(
            (x["L"][0]["S"], x["L"][1]["S"], int(x["L"][2]["N"])) for x in raw["objectIds"]["L"]
        )
        return CommitRecord(
            source_identifier,
            partition_key,
            int(raw["epoch"]["N"]),
            ids,
            int(raw["committedAt"]["N"]),
        )

    def _query_all(self, action: str, sid: str) -> list[dict[str, Any]]:
        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#sid = :sid",
                ExpressionAttributeNames={"#sid": ATTR["sid"]},
                ExpressionAttributeValues={":sid": _s(sid)},
                ConsistentRead=True,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        return self._call(action, query)

    def table_partitions(self, table: str) -> list[TablePartition]:
        out = []
        for raw in self._query_all("table_partitions", self._ledger_sid("tablePartition", table)):
            last = raw.get("lastLiveObjectId")
            out.append(
                TablePartition(
                    table=table,
                    dt=raw[ATTR["key"]]["S"],
                    next_object_id=int(raw["nextObjectId"]["N"]),
                    last_live_object_id=None if last is None else int(last["N"]),
                    current_manifest_version=int(
                        raw.get("currentManifestVersion", {"N": "-1"})["N"]
                    ),
                    desired_manifest_version=int(
                        raw.get("desiredManifestVersion", {"N": "-1"})["N"]
                    ),
                    switched=raw.get("switched", {"BOOL": False})["BOOL"],
                )
            )
        return sorted(out, key=lambda p: p.dt)

    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        dts = [dt] if dt is not None else [p.dt for p in self.table_partitions(table)]
        out = []
        for day in dts:
            for raw in self._query_all("ledger_objects", self._objects_sid(table, day)):
                out.append(
                    RegisteredObject(
                        table=table,
                        dt=day,
                        object_id=int(raw[ATTR["key"]]["S"]),
                        url=raw["url"]["S"],
                        content_length=int(raw["contentLength"]["N"]),
                        row_count=int(raw["rowCount"]["N"]),
                        source_identifier=raw["sourceOfObject"]["S"],
                        source_partition_key=raw["sourceObjectPartitionKey"]["S"],
                        epoch=int(raw["epoch"]["N"]),
                        delayed=raw["delayed"]["BOOL"],
                    )
                )
        return sorted(out, key=lambda o: (o.dt, o.object_id))

    # -- metrics -------------------------------------------------------------------------------

    def _add_metrics(self, deltas: dict[str, dict[str, int]]) -> None:
        for sid, metrics in deltas.items():
            names = {f"#m{i}": name for i, name in enumerate(metrics)}
            values = {f":m{i}": _n(v) for i, v in enumerate(metrics.values())}
            self._call(
                "flush_metrics",
                lambda names=names, values=values, sid=sid: self.client.update_item(
                    TableName=self.table_name,
                    Key=self._key(METRICS_SID, sid),
                    UpdateExpression="ADD " + ", ".join(f"{n} :{n[1:]}" for n in names),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                ),
            )

    def read_metrics(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for raw in self._query_all("read_metrics", METRICS_SID):
            sid = raw[ATTR["key"]]["S"]
            out[sid] = {
                k: int(v["N"]) for k, v in raw.items() if k not in (ATTR["sid"], ATTR["key"])
            }
        return out

    def close_store(self) -> None:
        self.flush_metrics()
