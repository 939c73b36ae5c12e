"""`leasehold doctor`'s checks of the lease store: the SQLite file writable, or the DynamoDB
table step by step (credentials, the table, its keys, GSI and TTL, a scratch item written, read
and deleted)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from resources.cli.doctor_check import DOCTOR_RETRY, SCRATCH_SID, Check, error_text
from resources.errors import ConfigError
from resources.stores.settings import StoreSettings

if TYPE_CHECKING:  # boto3 is imported only when the store is DynamoDB
    from resources.stores.dynamodb.client import DynamoDbClient


def check_store(settings: StoreSettings) -> Iterator[Check]:
    if settings.backend == "sqlite":
        yield _check_sqlite(settings)
        return
    yield from _check_dynamodb(settings)


def _check_sqlite(settings: StoreSettings) -> Check:
    path = settings.resolved_sqlite_path().resolve()
    where = path if path.exists() else path.parent
    existing = next((p for p in [where, *where.parents] if p.exists()), Path("/"))
    if os.access(existing, os.W_OK):
        state = "exists" if path.exists() else "is created at the first run"
        return Check("store: SQLite file writable", True, f"{path} {state}")
    return Check(
        "store: SQLite file writable",
        False,
        f"{existing} is not writable: the store {path} cannot be written",
        "set LEASEHOLD_SQLITE_PATH (or LEASEHOLD_DATA_DIR) to a writable place",
    )


def _check_dynamodb(settings: StoreSettings) -> Iterator[Check]:
    """The lease table, step by step: credentials, the table, its keys, GSI and TTL, a scratch
    item written, read and deleted. The first step that fails ends the checks."""
    from resources.stores.dynamodb.client import DynamoDbClient
    from resources.stores.dynamodb.table import describe_table

    where = f"table {settings.table_name!r} in {settings.region} at " + (
        settings.endpoint_url or "the AWS endpoint"
    )
    if not settings.sts_role_arn and not _has_credentials(settings):
        yield Check(
            "store: AWS credentials",
            False,
            "no AWS credentials found (environment, profile, container or instance role)",
            "set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or run with a role",
        )
        return
    try:
        client = DynamoDbClient(settings, retry=DOCTOR_RETRY)
        table = describe_table(client, settings)
    except Exception as exc:  # noqa: BLE001 - refused, unreachable, no such role: say it
        yield Check(
            "store: AWS credentials",
            False,
            f"{where}: DescribeTable failed: {error_text(exc)}",
            "check the credentials (or LEASEHOLD_STS_ROLE_ARN) may call dynamodb:DescribeTable "
            "and that LEASEHOLD_DYNAMODB_ENDPOINT_URL/REGION are right",
        )
        return
    yield Check("store: AWS credentials", True, f"DescribeTable answered for {where}")
    exists = _table_exists(table, where)
    yield exists
    if table is None:
        return
    shape = _table_shape(client, settings, table)
    yield shape
    if shape.ok:
        yield _scratch_item(client, settings, where)


def _has_credentials(settings: StoreSettings) -> bool:
    """Whether boto3 finds credentials (environment, profile, container or instance role)."""
    import boto3

    return boto3.session.Session(region_name=settings.region).get_credentials() is not None


def _table_exists(table: Mapping[str, Any] | None, where: str) -> Check:
    """The lease table's DescribeTable answer (None: no such table)."""
    if table is None:
        return Check(
            "store: table exists",
            False,
            f"{where} does not exist",
            "create it: one `leasehold run` (or the code location's start) without "
            "LEASEHOLD_SKIP_TABLE_CREATION creates it with its keys, GSI and TTL; or fix "
            "LEASEHOLD_DYNAMODB_TABLE / LEASEHOLD_DYNAMODB_REGION",
        )
    return Check("store: table exists", True, f"{where}, {table.get('TableStatus', '?')}")


def _table_shape(
    client: DynamoDbClient, settings: StoreSettings, table: Mapping[str, Any]
) -> Check:
    """The table's keys and GSI as leasehold creates them, the GSI ACTIVE, TTL when one is
    configured."""
    from resources.coordination.items import ATTR
    from resources.stores.dynamodb.table import GSI, require_table

    what = "store: keys, GSI and TTL"
    try:
        require_table(client, settings)  # keys, the GSI, TTL when one is configured
    except ConfigError as exc:
        return Check(
            what,
            False,
            error_text(exc),
            "recreate the table as leasehold creates it (docs/production.md), or point "
            "LEASEHOLD_DYNAMODB_TABLE at one that fits",
        )
    ttl = (
        client.client.describe_time_to_live(TableName=settings.table_name)
        .get("TimeToLiveDescription", {})
        .get("TimeToLiveStatus", "DISABLED")
    )
    gsi = {i["IndexName"]: i.get("IndexStatus", "?") for i in table["GlobalSecondaryIndexes"]}
    ttl_note = (
        f"TTL {ttl} on {ATTR['expiration']!r}"
        if settings.ttl
        else f"TTL {ttl} (LEASEHOLD_TTL unset: items do not expire)"
    )
    if gsi[GSI] != "ACTIVE":
        return Check(
            what,
            False,
            f"global secondary index {GSI!r} is {gsi[GSI]}, not ACTIVE",
            "wait until the index is ACTIVE (it is being built) and run doctor again",
        )
    return Check(what, True, f"keys {ATTR['sid']}/{ATTR['key']}, index {GSI!r} ACTIVE, {ttl_note}")


def _scratch_item(client: DynamoDbClient, settings: StoreSettings, where: str) -> Check:
    """A scratch item under `SCRATCH_SID` written, read back and deleted: the write path's
    permissions."""
    from resources.coordination.items import ATTR

    key = {
        ATTR["sid"]: {"S": f"{SCRATCH_SID}|{uuid.uuid4().hex}"},
        ATTR["key"]: {"S": "scratch"},
    }
    try:
        client.client.put_item(TableName=settings.table_name, Item=key)
        got = client.client.get_item(TableName=settings.table_name, Key=key, ConsistentRead=True)
        client.client.delete_item(TableName=settings.table_name, Key=key)
        if "Item" not in got:
            raise RuntimeError("the item written was not read back")
    except Exception as exc:  # noqa: BLE001 - whatever the write path refuses, say it
        return Check(
            "store: write, read, delete",
            False,
            f"a scratch item in {where}: {error_text(exc)}",
            "grant dynamodb:PutItem, GetItem, DeleteItem, Query, TransactWriteItems on the "
            "table and its index",
        )
    return Check("store: write, read, delete", True, f"a scratch item under {SCRATCH_SID!r}")
