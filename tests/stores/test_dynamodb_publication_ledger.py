"""DynamoDB-only: what recording publications costs in API calls (one transaction each, never
a Scan), where the history lives, and a publisher overtaken between its read and its
transaction — by another publisher (re-read, then refused or retried) or by an ingestion
commit (no effect on it)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from resources.ledger.publication import Publication, StalePublicationError
from resources.stores import build_store
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.store import DynamoDbLeaseStore
from resources.stores.settings import StoreSettings
from tests.stores.test_dynamodb_merge_ledger import record_calls
from tests.support.fakes import FakeClock
from tests.support.merge_ledger import DT, TABLE, ingest, obj
from tests.support.publication_ledger import publication, published_state


@pytest.fixture
def two_publishers(
    settings_for: Callable[..., StoreSettings], clock: FakeClock
) -> Iterator[tuple[DynamoDbLeaseStore, DynamoDbLeaseStore]]:
    """Two nodes on one table, both under a partition prefix."""
    settings = settings_for("dynamodb", partition_prefix="tenant")
    stores = [build_store(settings, clock=clock) for _ in range(2)]
    yield stores  # type: ignore[misc]
    for store in stores:
        store.close_store()


def overtaken_by(other: Callable[[], object]) -> Callable[[str], None]:
    """A `record_calls` hook running `other` once, just before the first transaction."""
    done: list[bool] = []

    def before(name: str) -> None:
        if name == "TransactWriteItems" and not done:
            done.append(True)
            other()

    return before


def test_recording_is_one_transaction_and_nothing_scans(
    two_publishers: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, _ = two_publishers
    ingest(store, *(obj(f"o{i}") for i in range(30)))
    calls = record_calls(store)
    records = [store.record_publication(publication(upper)) for upper in range(1, 31)]
    assert calls.count("TransactWriteItems") == 30 and calls.count("GetItem") == 30
    before = len(calls)
    assert store.publications(TABLE, DT) == records
    assert calls[before:] == ["Query"]  # one page holds them all
    assert store.forget_publications(TABLE, DT, 29) == 28  # more than one batch of deletes
    assert calls.count("BatchWriteItem") == 2
    assert store.publications(TABLE, DT) == records[28:]
    assert "Scan" not in calls
    raw = store.client.get_item(
        TableName=store.table_name,
        Key=codec.key(f"tenant|{TABLE}|{DT}|publications", f"{30:019d}"),
        ConsistentRead=True,
    )["Item"]
    assert raw["location"]["S"] == records[-1].location


def test_a_publisher_overtaken_by_the_same_version_is_refused(
    two_publishers: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, rival = two_publishers
    ingest(store, obj("a"), obj("b"))
    theirs: list[Publication] = []
    calls = record_calls(
        store, overtaken_by(lambda: theirs.append(rival.record_publication(publication(2))))
    )
    with pytest.raises(StalePublicationError) as refused:
        store.record_publication(publication(2, token="ours"))
    assert refused.value.current == (False, 2)
    assert calls.count("TransactWriteItems") == 1 and calls.count("GetItem") == 2  # re-read
    assert store.publications(TABLE, DT) == theirs
    assert published_state(store) == (0, False, 2, 1)


def test_a_publisher_overtaken_by_an_older_version_retries_with_the_next_seq(
    two_publishers: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, rival = two_publishers
    ingest(store, obj("a"), obj("b"))
    calls = record_calls(store, overtaken_by(lambda: rival.record_publication(publication(1))))
    ours = store.record_publication(publication(2))
    assert calls.count("TransactWriteItems") == 2  # cancelled once, then recorded
    assert ours.seq == 2
    assert [(p.seq, p.upper) for p in store.publications(TABLE, DT)] == [(1, 1), (2, 2)]
    assert published_state(store) == (0, False, 2, 2)


def test_an_ingestion_commit_landing_meanwhile_does_not_cancel_the_publication(
    two_publishers: tuple[DynamoDbLeaseStore, DynamoDbLeaseStore],
) -> None:
    store, ingester = two_publishers
    ingest(store, obj("a"), obj("b"))
    calls = record_calls(store, overtaken_by(lambda: ingest(ingester, obj("c"))))
    ours = store.record_publication(publication(2))
    assert calls.count("TransactWriteItems") == 1 and ours.seq == 1
    partition = store.table_partition(TABLE, DT)
    assert partition.next_object_id == 4 and published_state(store) == (0, False, 2, 1)
