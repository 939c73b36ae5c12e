"""DynamoDB-only behaviour: table shape, existing-table checks, and faults over real HTTP."""

from __future__ import annotations

import time
import uuid

import boto3
import pytest
from botocore.client import BaseClient
from botocore.exceptions import ClientError

from resources.coordination.errors import (
    StoreConfigError,
    StoreNotFoundError,
    StoreRefusedError,
    StoreUnavailableError,
)
from resources.coordination.items import ATTR
from resources.retry import RetryPolicy
from resources.stores import open_existing_store
from resources.stores.dynamodb.store import GSI, DynamoDbLeaseStore
from resources.stores.settings import StoreSettings
from tests.support.aws_server import LocalAwsServer
from tests.support.throttling_proxy import ThrottlingProxy


def settings(endpoint: str, **overrides: object) -> StoreSettings:
    base = dict(
        backend="dynamodb",
        table_name=f"t-{uuid.uuid4().hex[:10]}",
        region="us-east-1",
        endpoint_url=endpoint,
    )
    return StoreSettings(**{**base, **overrides})  # type: ignore[arg-type]


def client(endpoint: str):
    return boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")


def test_table_is_created_with_keys_gsi_and_ttl(aws_server: LocalAwsServer) -> None:
    s = settings(aws_server.endpoint_url, ttl="P7D")
    DynamoDbLeaseStore(s)
    table = client(aws_server.endpoint_url).describe_table(TableName=s.table_name)["Table"]
    assert {k["AttributeName"]: k["KeyType"] for k in table["KeySchema"]} == {
        "sourceIdentifier": "HASH",
        "sourcePartitionKey": "RANGE",
    }
    (index,) = table["GlobalSecondaryIndexes"]
    assert index["IndexName"] == GSI
    assert [k["AttributeName"] for k in index["KeySchema"]] == [
        "sourceStatusCombinationKey",
        "partitionPriority",
    ]
    assert table["ProvisionedThroughput"]["ReadCapacityUnits"] == 10
    assert table["ProvisionedThroughput"]["WriteCapacityUnits"] == 10
    ttl = client(aws_server.endpoint_url).describe_time_to_live(TableName=s.table_name)
    assert ttl["TimeToLiveDescription"]["AttributeName"] == ATTR["expiration"]
    assert ttl["TimeToLiveDescription"]["TimeToLiveStatus"] == "ENABLED"


def test_on_demand_billing(aws_server: LocalAwsServer) -> None:
    s = settings(aws_server.endpoint_url, billing_mode="PAY_PER_REQUEST")
    DynamoDbLeaseStore(s)
    table = client(aws_server.endpoint_url).describe_table(TableName=s.table_name)["Table"]
    assert table["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"


def test_a_second_node_reuses_the_table(aws_server: LocalAwsServer) -> None:
    s = settings(aws_server.endpoint_url)
    one = DynamoDbLeaseStore(s)
    one.create_partitions(one.source_identifier("e"), ["a"])
    two = DynamoDbLeaseStore(s)  # CreateTable finds it in use: fine, it fits
    assert two.get(two.source_identifier("e"), "a") is not None


def test_nodes_enabling_ttl_at_once_all_start(
    aws_server: LocalAwsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Hosts started together on a fresh deployment each create the table and turn TTL on:
    DynamoDB refuses the second UpdateTimeToLive while the first is under way (a
    ValidationException, not "already enabled"). The TTL is on: that node goes on."""
    s = settings(aws_server.endpoint_url, ttl="P1D")
    DynamoDbLeaseStore(s)  # the first node: table and TTL
    refusal = {"Error": {"Code": "ValidationException", "Message": "Time to live has been "
                         "modified multiple times within a fixed interval"}}  # fmt: skip

    def refused(self: object, operation: str, params: object) -> object:
        if operation == "UpdateTimeToLive":
            raise ClientError(refusal, operation)  # type: ignore[arg-type]
        return real(self, operation, params)

    real = BaseClient._make_api_call
    monkeypatch.setattr(BaseClient, "_make_api_call", refused)
    second = DynamoDbLeaseStore(s)
    assert second.table_name == s.table_name
    # A refusal while TTL is not on (a fresh table) is still an error.
    with pytest.raises(StoreRefusedError):
        DynamoDbLeaseStore(settings(aws_server.endpoint_url, ttl="P1D"))


def test_skip_table_creation_accepts_a_fitting_table(aws_server: LocalAwsServer) -> None:
    s = settings(aws_server.endpoint_url, ttl="P1D")
    DynamoDbLeaseStore(s)
    reuse = DynamoDbLeaseStore(StoreSettings(**{**s.__dict__, "skip_table_creation": True}))
    assert reuse.table_name == s.table_name


@pytest.mark.parametrize("problem", ["missing", "wrong_keys", "no_gsi", "ttl_disabled"])
def test_skip_table_creation_rejects_a_table_that_does_not_fit(
    aws_server: LocalAwsServer, problem: str
) -> None:
    s = settings(aws_server.endpoint_url, skip_table_creation=True, ttl="P1D")
    ddb = client(aws_server.endpoint_url)
    attrs = [{"AttributeName": "id", "AttributeType": "S"}]
    if problem == "wrong_keys":
        ddb.create_table(
            TableName=s.table_name,
            KeySchema=[{"AttributeName": "id", "KeyType": "HASH"}],
            AttributeDefinitions=attrs,
            BillingMode="PAY_PER_REQUEST",
        )
    elif problem in ("no_gsi", "ttl_disabled"):
        DynamoDbLeaseStore(settings(aws_server.endpoint_url, table_name=s.table_name))
        if problem == "no_gsi":
            ddb.update_table(
                TableName=s.table_name, GlobalSecondaryIndexUpdates=[{"Delete": {"IndexName": GSI}}]
            )
    with pytest.raises(StoreConfigError) as err:
        DynamoDbLeaseStore(s)
    expected_field = "ttl" if problem == "ttl_disabled" else "table_name"
    assert err.value.field == expected_field
    assert s.table_name in str(err.value)


def test_endpoint_disappearing_gives_bounded_retries_then_a_clear_error() -> None:
    server = LocalAwsServer().start()
    sleeps: list[float] = []
    policy = RetryPolicy(max_attempts=4, base_delay_s=0.05, max_delay_s=0.2)
    try:
        store = DynamoDbLeaseStore(settings(server.endpoint_url), retry=policy, sleep=sleeps.append)
        sid = store.source_identifier("events")
        store.create_partitions(sid, ["a"])
    finally:
        server.stop()
    started = time.monotonic()
    with pytest.raises(StoreUnavailableError) as err:
        store.acquire(sid, "a", "w1", 60)
    assert time.monotonic() - started < 30
    message = str(err.value)
    assert store.table_name in message and "acquire" in message and "4 attempts" in message
    assert len(sleeps) == policy.max_attempts - 1
    assert all(0 <= s <= policy.max_delay_s for s in sleeps)


def test_throttling_backs_off_with_jitter_within_a_bound(aws_server: LocalAwsServer) -> None:
    policy = RetryPolicy(max_attempts=5, base_delay_s=0.01, max_delay_s=0.1)
    with ThrottlingProxy(aws_server.endpoint_url) as proxy:
        sleeps: list[float] = []
        store = DynamoDbLeaseStore(settings(proxy.endpoint_url), retry=policy, sleep=sleeps.append)
        sid = store.source_identifier("events")
        store.create_partitions(sid, ["a", "b"])
        proxy.throttle_next = 3
        item = store.acquire(sid, "a", "w1", 60)  # succeeds on the 4th attempt
        assert item.owner == "w1" and proxy.throttled == 3
        assert len(sleeps) == 3 and all(0 <= s <= policy.max_delay_s for s in sleeps)
        assert len(set(sleeps)) > 1  # jittered, not a fixed pace
        proxy.throttle_next = 100
        with pytest.raises(StoreUnavailableError) as err:
            store.acquire(sid, "b", "w1", 60)
        assert "5 attempts" in str(err.value) and "ProvisionedThroughputExceeded" in str(err.value)
        assert proxy.throttled == 3 + 5  # bounded: it stopped asking
        proxy.throttle_next = 0
        assert store.get(sid, "b").owner is None  # nothing half-written


def test_retry_delays_are_bounded_full_jitter() -> None:
    policy = RetryPolicy(max_attempts=6, base_delay_s=0.05, max_delay_s=2.0)
    for attempt in range(1, 10):
        for _ in range(50):
            assert 0 <= policy.delay(attempt) <= min(2.0, 0.05 * 2**attempt)


def test_missing_keys_asks_again_for_unprocessed_keys(aws_server: LocalAwsServer) -> None:
    """A throttled BatchGetItem answers in part: the rest is asked again, with backoff, and an
    answer that never completes ends in a clear, bounded error — never a key reported missing
    because DynamoDB did not get to it."""
    policy = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.1)
    with ThrottlingProxy(aws_server.endpoint_url) as proxy:
        sleeps: list[float] = []
        store = DynamoDbLeaseStore(settings(proxy.endpoint_url), retry=policy, sleep=sleeps.append)
        sid = store.source_identifier("events")
        keys = [f"k{i:03d}" for i in range(150)]
        store.create_partitions(sid, keys[::2])
        proxy.defer_batch_gets = 3  # batch 1: 50 of 100 keys answered, 25 of 50, 12 of 25
        assert store.missing_keys(sid, keys) == keys[1::2]
        assert proxy.deferred_keys == 50 + 25 + 13
        assert len(sleeps) == 3 and all(0 <= s <= policy.max_delay_s for s in sleeps)
        proxy.defer_batch_gets = 100
        with pytest.raises(StoreUnavailableError) as err:
            store.missing_keys(sid, keys)
        message = str(err.value)
        assert "missing_keys" in message and "4 attempts" in message
        assert "left unprocessed" in message


def test_opening_an_existing_table_never_creates_one(aws_server: LocalAwsServer) -> None:
    s = settings(aws_server.endpoint_url)
    with pytest.raises(StoreNotFoundError) as err:
        open_existing_store(s)
    assert str(err.value) == (
        f"no lease store: DynamoDB table {s.table_name!r} in us-east-1 at "
        f"{aws_server.endpoint_url} (LEASEHOLD_DYNAMODB_TABLE, LEASEHOLD_DYNAMODB_REGION, "
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL); `leasehold run` creates it"
    )
    assert s.table_name not in client(aws_server.endpoint_url).list_tables()["TableNames"]
    created = DynamoDbLeaseStore(s)
    sid = created.source_identifier("events")
    created.create_partitions(sid, ["a"])
    assert open_existing_store(s).missing_keys(sid, ["a", "b"]) == ["b"]
