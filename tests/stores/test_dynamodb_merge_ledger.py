"""DynamoDB-only: what the merge ledger costs in API calls (one transaction per merge commit,
never a Scan), a merge commit that an ingestion commit overtakes between its read and its
transaction, and an ingestion commit a close overtakes the same way."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from resources.stores import build_store
from resources.stores.base import CoordinationStore
from resources.stores.dynamodb.store import DynamoDbLeaseStore
from resources.stores.settings import StoreSettings
from tests.support.fakes import FakeClock
from tests.support.merge_ledger import (
    DT,
    INTERVAL,
    TABLE,
    acquire_job,
    ingest,
    merge,
    merged,
    obj,
)


@pytest.fixture
def dynamodb_stores(
    settings_for: Callable[..., StoreSettings], clock: FakeClock
) -> Iterator[tuple[DynamoDbLeaseStore, DynamoDbLeaseStore]]:
    """Two nodes on one table: the merger and an ingester."""
    settings = settings_for("dynamodb")
    stores = [build_store(settings, clock=clock) for _ in range(2)]
    yield stores  # type: ignore[misc]
    for store in stores:
        store.close_store()


def record_calls(
    store: DynamoDbLeaseStore, before: Callable[[str], None] = lambda name: None
) -> list[str]:
    """Every API operation the store's client sends from now on, by name; `before` runs
    just before each is sent."""
    calls: list[str] = []

    def hook(model: Any, **kwargs: Any) -> None:
        calls.append(model.name)
        before(model.name)

    store.client.meta.events.register("before-call.dynamodb", hook)
    return calls


def test_a_merge_commit_is_one_transaction_and_nothing_scans(
    dynamodb_stores: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, _ = dynamodb_stores
    calls = record_calls(store)
    ingest(store, obj("a"), obj("b"), obj("c"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2)))
    store.close_partition(TABLE, DT)
    job = acquire_job(store)
    before = len(calls)
    store.commit_merge(job.token, merge(2, merged(2, 3)))
    assert calls[before:].count("TransactWriteItems") == 1
    assert [r.upper for r in store.merge_ranges(TABLE, DT)] == [0, 2, 3]
    store.table_partitions(TABLE)
    store.table_partition(TABLE, DT)
    store.ledger_objects(TABLE, DT)
    assert calls and "Scan" not in calls


def test_an_ingestion_commit_landing_during_the_merge_commit_is_seen_by_its_retry(
    dynamodb_stores: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, ingester = dynamodb_stores
    ingest(store, obj("a"), obj("b"))
    job = acquire_job(store)
    landed: list[CoordinationStore] = []

    def ingest_once(name: str) -> None:
        if name == "TransactWriteItems" and not landed:
            landed.append(ingester)
            ingest(ingester, obj("overtaking"))  # after the merge read nextObjectId = 3

    calls = record_calls(store, ingest_once)
    now = store.now_ms()
    result = store.commit_merge(job.token, merge(0, merged(0, 2)))
    assert landed and calls.count("TransactWriteItems") == 2  # cancelled once, then retried
    assert result.merge_due_at_ms == now + int(INTERVAL * 1000)  # id 3 is not forgotten
    partition = store.table_partition(TABLE, DT)
    assert partition.next_object_id == 4 and partition.merged_upper == 2
    assert partition.merge_due_at_ms == result.merge_due_at_ms
    assert [r.upper for r in store.merge_ranges(TABLE, DT)] == [0, 2]


def test_a_close_landing_during_an_ingestion_commit_makes_its_objects_delayed(
    dynamodb_stores: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    """The commit read the partition open (`nextObjectId` 2, no `lastLiveObjectId`) and
    assigned id 2 as live; a close then recorded `lastLiveObjectId` 1. Closing leaves the
    counter as it is, so the commit must be refused on the close itself and retried: id 2 is
    delayed, as `lastLiveObjectId` says. (Found by the merge race test: an object above
    `lastLiveObjectId` committed as live.)"""
    ingester, closer = dynamodb_stores
    ingest(ingester, obj("a"))
    closed: list[int | None] = []

    def close_once(name: str) -> None:
        # The commit's transaction, right after it read the counters (BatchGetItem).
        if name == "TransactWriteItems" and calls[-2:-1] == ["BatchGetItem"] and not closed:
            partition = closer.close_partition(TABLE, DT)
            closed.append(None if partition is None else partition.last_live_object_id)

    calls = record_calls(ingester, close_once)
    (late,) = ingest(ingester, obj("late"))
    assert closed == [1]
    assert (late.object_id, late.delayed) == (2, True)
    assert calls.count("BatchGetItem") == 2  # cancelled once, the counters read again
    assert [o.delayed for o in ingester.ledger_objects(TABLE, DT)] == [False, True]


def test_a_merge_commit_overtaken_by_every_ingestion_commit_still_lands(
    dynamodb_stores: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    """A partition under steady ingestion: a commit lands before each of the merge commit's
    transactions. Once the merge knows objects are left, more of them change nothing it writes
    (the job stays due), so only the first attempt — which read everything merged — may be
    cancelled. (Found by the merge race test: a merge commit that lost to ingestion twelve
    times in a row and failed.)"""
    store, ingester = dynamodb_stores
    ingest(store, obj("a"), obj("b"))
    job = acquire_job(store)
    landed: list[int] = []

    def ingest_every_time(name: str) -> None:
        if name == "TransactWriteItems":
            landed.append(len(landed))
            ingest(ingester, obj(f"overtaking-{len(landed)}"))

    record_calls(store, ingest_every_time)
    now = store.now_ms()
    result = store.commit_merge(job.token, merge(0, merged(0, 2)))
    assert len(landed) == 2  # cancelled once (it read ids 1-2, all merged), then it landed
    assert result.merge_due_at_ms == now + int(INTERVAL * 1000)
    partition = store.table_partition(TABLE, DT)
    assert partition.next_object_id == 5 and partition.merged_upper == 2
    assert partition.merge_due_at_ms == result.merge_due_at_ms
