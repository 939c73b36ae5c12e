"""The DynamoDB table: created on start (keys, the `source-status` GSI, TTL) unless
`skip_table_creation`, and checked either way, so a table that does not fit fails before any
work with a message naming the setting. A command that only looks (`require_table`) never
creates it: a missing table is a `StoreNotFoundError` naming table, region and endpoint.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from botocore.exceptions import ClientError

from resources.coordination.errors import StoreConfigError, StoreNotFoundError
from resources.coordination.items import ATTR
from resources.stores.dynamodb.client import DynamoDbClient, error_code
from resources.stores.settings import StoreSettings

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # boto3-stubs, a dev extra: only the type checker reads them
    from mypy_boto3_dynamodb.type_defs import TableDescriptionTypeDef

GSI = "source-status"


def create_table(client: DynamoDbClient, settings: StoreSettings) -> None:
    s = settings
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
        "TableName": settings.table_name,
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
        client.call("CreateTable", lambda: client.client.create_table(**request))
    except ClientError as exc:
        if error_code(exc) != "ResourceInUseException":
            raise
        # Another node created it first: it must fit like any existing table.
    client.call(
        "DescribeTable",
        lambda: client.client.get_waiter("table_exists").wait(
            TableName=settings.table_name, WaiterConfig={"Delay": 1, "MaxAttempts": 120}
        ),
    )
    if settings.ttl_seconds is not None:
        _enable_ttl(client, settings)
    check_table(client, settings)


def _enable_ttl(client: DynamoDbClient, settings: StoreSettings) -> None:
    try:
        client.call(
            "UpdateTimeToLive",
            lambda: client.client.update_time_to_live(
                TableName=settings.table_name,
                TimeToLiveSpecification={
                    "Enabled": True,
                    "AttributeName": ATTR["expiration"],
                },
            ),
        )
    except ClientError as exc:
        # Enabled by an earlier start ("already enabled"), or being enabled by another node
        # starting at the same moment (DynamoDB refuses a second change while the first is
        # under way): either is what was asked for. Anything else is raised.
        if not _ttl_on(client, settings):
            raise
        log.info("%s: TTL already on (%s)", settings.table_name, error_code(exc))


def _ttl_on(client: DynamoDbClient, settings: StoreSettings) -> bool:
    """Whether the table's TTL is ENABLED or ENABLING, on our attribute."""
    ttl = client.call(
        "DescribeTimeToLive",
        lambda: client.client.describe_time_to_live(TableName=settings.table_name),
    )["TimeToLiveDescription"]
    return (
        ttl.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
        and ttl.get("AttributeName") == ATTR["expiration"]
    )


def describe_table(
    client: DynamoDbClient, settings: StoreSettings
) -> TableDescriptionTypeDef | None:
    """The table's description, None if there is no such table."""
    try:
        return client.call(
            "DescribeTable", lambda: client.client.describe_table(TableName=settings.table_name)
        )["Table"]
    except ClientError as exc:
        if error_code(exc) == "ResourceNotFoundException":
            return None
        raise


def require_table(client: DynamoDbClient, settings: StoreSettings) -> None:
    """The table must exist (never created here) and fit, as `check_table` checks."""
    table = describe_table(client, settings)
    if table is None:
        raise StoreNotFoundError(settings.location())
    _check_fit(client, settings, table)


def check_table(client: DynamoDbClient, settings: StoreSettings) -> None:
    """An existing table must have our keys, the `source-status` index and (with a TTL
    configured) TTL on `expirationTime`; anything else fails here, before any work."""
    table = describe_table(client, settings)
    if table is None:
        raise StoreConfigError(
            "table_name",
            f"table {settings.table_name!r} does not exist and skip_table_creation is set",
        )
    _check_fit(client, settings, table)


def _check_fit(
    client: DynamoDbClient, settings: StoreSettings, table: TableDescriptionTypeDef
) -> None:
    keys = {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]}
    want = {ATTR["sid"]: "HASH", ATTR["key"]: "RANGE"}
    if keys != want:
        raise StoreConfigError(
            "table_name", f"table {settings.table_name!r} has keys {keys}, leasehold needs {want}"
        )
    indexes = {i["IndexName"]: i for i in table.get("GlobalSecondaryIndexes", [])}
    index_keys = {
        k["AttributeName"]: k["KeyType"] for k in indexes.get(GSI, {}).get("KeySchema", [])
    }
    want_index = {ATTR["status_key"]: "HASH", ATTR["priority"]: "RANGE"}
    if index_keys != want_index:
        raise StoreConfigError(
            "table_name",
            f"table {settings.table_name!r} lacks the global secondary index {GSI!r} on "
            f"{want_index} (found {sorted(indexes) or 'no indexes'})",
        )
    if settings.ttl_seconds is not None:
        ttl = client.call(
            "DescribeTimeToLive",
            lambda: client.client.describe_time_to_live(TableName=settings.table_name),
        )["TimeToLiveDescription"]
        if (
            ttl.get("TimeToLiveStatus") not in ("ENABLED", "ENABLING")
            or ttl.get("AttributeName") != ATTR["expiration"]
        ):
            raise StoreConfigError(
                "ttl",
                f"ttl is configured but table {settings.table_name!r} has TTL "
                f"{ttl.get('TimeToLiveStatus', 'DISABLED')} on "
                f"{ttl.get('AttributeName')!r}, not ENABLED on {ATTR['expiration']!r}",
            )
