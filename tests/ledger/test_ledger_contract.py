"""The commit protocol every backend passes: ledger registration + COMPLETED in one fenced
transaction, dense ids per table partition, and no trace of a refused commit."""

from __future__ import annotations

from dataclasses import replace

import pytest

from resources.coordination.errors import PartitionNotOwnedError
from resources.coordination.items import ATTR, PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.ledger.model import AlreadyCommittedError, SmallObject
from resources.ledger.provenance import positions_of
from tests.support.fakes import FakeClock
from tests.support.ttl_sweep import sweep_expired

pytestmark = pytest.mark.contract

T = 60.0


def obj(dt: str, name: str, rows: int = 10, version: int = 1) -> SmallObject:
    return SmallObject(
        "events", dt, f"file:///lake/events/dt={dt}/{name}.parquet", rows * 100, rows, version
    )


def setup(store: LeaseStore, *keys: str) -> str:
    sid = store.source_identifier("events")
    store.create_partitions(sid, list(keys))
    return sid


def test_commit_registers_dense_ids_and_completes(store: LeaseStore) -> None:
    sid = setup(store, "a", "b")
    a = store.acquire(sid, "a", "w1", T)
    result = store.commit(
        a.token, [obj("2026-01-02", "a2"), obj("2026-01-01", "a1")], progress_state='{"rows": 20}'
    )
    assert result.item.status is PartitionStatus.COMPLETED and result.item.progress == {"rows": 20}
    assert [(o.dt, o.object_id) for o in result.objects] == [("2026-01-01", 1), ("2026-01-02", 1)]
    b = store.acquire(sid, "b", "w2", T)
    store.commit(b.token, [obj("2026-01-01", "b1"), obj("2026-01-01", "b1x")])
    day1 = store.ledger_objects("events", "2026-01-01")
    assert [(o.object_id, o.source_partition_key) for o in day1] == [(1, "a"), (2, "b"), (3, "b")]
    assert all(o.epoch == 1 and not o.delayed for o in day1)
    assert len(store.ledger_objects("events")) == 4
    parts = {p.dt: p.next_object_id for p in store.table_partitions("events")}
    assert parts == {"2026-01-01": 4, "2026-01-02": 2}
    record = store.commit_record(sid, "a")
    assert record.epoch == 1 and sorted(record.object_ids) == [
        ("events", "2026-01-01", 1),
        ("events", "2026-01-02", 1),
    ]
    assert store.get(sid, "b").status is PartitionStatus.COMPLETED


def test_fenced_commit_leaves_no_trace(store: LeaseStore, clock: FakeClock) -> None:
    sid = setup(store, "a")
    zombie = store.acquire(sid, "a", "w1", T)
    clock.advance(T + 1)
    successor = store.acquire(sid, "a", "w2", T)
    with pytest.raises(PartitionNotOwnedError):
        store.commit(zombie.token, [obj("2026-01-01", "zombie")])
    assert store.ledger_objects("events") == []
    assert store.table_partitions("events") == []
    assert store.commit_record(sid, "a") is None
    assert store.get(sid, "a") == successor
    done = store.commit(successor.token, [obj("2026-01-01", "ok")])
    assert [o.object_id for o in done.objects] == [1]


def test_commit_record_outlives_ttl_and_refuses_a_second_commit(
    store: LeaseStore, clock: FakeClock
) -> None:
    sid = setup(store, "a")
    store.commit(store.acquire(sid, "a", "w1", T).token, [obj("2026-01-01", "first")])
    clock.advance(86400 * 3)
    sweep_expired(store)  # the lease item is gone ...
    assert store.get(sid, "a") is None
    store.create_partitions(sid, ["a"])  # ... and re-created by a careless re-scan
    again = store.acquire(sid, "a", "w2", T)
    with pytest.raises(AlreadyCommittedError):
        store.commit(again.token, [obj("2026-01-01", "second")])
    assert [o.url.rsplit("/", 1)[1] for o in store.ledger_objects("events")] == ["first.parquet"]


def test_chunked_commits_keep_the_lease(store: LeaseStore, clock: FakeClock) -> None:
    sid = setup(store, "big")
    lease = store.acquire(sid, "big", "w1", T)
    clock.advance(50)
    chunk = store.commit(
        lease.token, [obj("2026-01-01", "c1")], progress_state='{"offset": 1000}', complete=False
    )
    assert chunk.item.status is PartitionStatus.ASSIGNED and chunk.item.epoch == lease.epoch
    assert chunk.item.ownership_timeout_ms == store.now_ms() + 60_000
    assert store.commit_record(sid, "big") is None
    clock.advance(T + 1)  # crashed after the first chunk: the successor resumes at the offset
    successor = store.acquire(sid, "big", "w2", T)
    assert successor.progress == {"offset": 1000}
    final = store.commit(
        successor.token, [obj("2026-01-01", "c2")], progress_state='{"offset": 2000}'
    )
    assert [o.object_id for o in final.objects] == [2]
    assert store.get(sid, "big").status is PartitionStatus.COMPLETED


def test_commit_may_register_nothing(store: LeaseStore) -> None:
    sid = setup(store, "empty")
    done = store.commit(store.acquire(sid, "empty", "w1", T).token, [])
    assert done.objects == () and done.item.status is PartitionStatus.COMPLETED
    assert store.commit_record(sid, "empty").object_ids == ()


def test_oversized_commit_is_refused_before_writing(store: LeaseStore) -> None:
    sid = setup(store, "wide")
    lease = store.acquire(sid, "wide", "w1", T)
    with pytest.raises(ValueError, match="single transaction"):
        store.commit(
            lease.token,
            [obj(f"2026-{m:02d}-{d:02d}", "x") for m in (1, 2, 3) for d in range(1, 29)],
        )
    assert store.ledger_objects("events") == []
    assert store.get(sid, "wide").status is PartitionStatus.ASSIGNED


def test_objects_read_back_with_their_commit_time(store: LeaseStore, clock: FakeClock) -> None:
    """Each object keeps its commit's time (the store's clock): `publication_lag` measures how
    long its rows have waited for publication from it. A commit's result holds the same time,
    so it equals the later read."""
    sid = setup(store, "a", "b")
    first = store.commit(store.acquire(sid, "a", "w1", T).token, [obj("2026-01-01", "a1")])
    first_ms = store.now_ms()
    clock.advance(90.5)
    second = store.commit(store.acquire(sid, "b", "w1", T).token, [obj("2026-01-01", "b1")])
    objects = store.ledger_objects("events", "2026-01-01")
    assert [o.committed_at_ms for o in objects] == [first_ms, first_ms + 90_500]
    assert objects == [*first.objects, *second.objects]


def test_an_object_item_without_its_commit_time_reads_as_unknown(
    store: LeaseStore, backend: str
) -> None:
    """Items written before the ledger read the commit time back may lack it (DynamoDB: an
    attribute, not a column): unknown, None, never an error."""
    if backend != "dynamodb":
        pytest.skip("the SQLite column is NOT NULL since the first release")
    sid = setup(store, "a")
    store.commit(store.acquire(sid, "a", "w1", T).token, [obj("2026-01-01", "a1")])
    store.client.update_item(  # type: ignore[attr-defined]
        TableName=store.table_name,  # type: ignore[attr-defined]
        Key={
            ATTR["sid"]: {"S": "events|2026-01-01|smallObjects"},
            ATTR["key"]: {"S": f"{1:019d}"},
        },
        UpdateExpression="REMOVE committedAt",
        ConditionExpression="attribute_exists(committedAt)",
    )
    (read,) = store.ledger_objects("events", "2026-01-01")
    assert read.committed_at_ms is None and read.object_id == 1


def test_objects_above_an_id_are_one_key_range(store: LeaseStore) -> None:
    sid = setup(store, "a", "b")
    first = store.acquire(sid, "a", "w", 60)
    store.commit(first.token, [obj("2026-01-01", "x"), obj("2026-01-01", "y")])
    second = store.acquire(sid, "b", "w", 60)
    store.commit(second.token, [obj("2026-01-01", "z"), obj("2026-01-02", "q")])
    above = store.ledger_objects("events", "2026-01-01", after=1)  # type: ignore[attr-defined]
    assert [o.object_id for o in above] == [2, 3]
    assert store.ledger_objects("events", "2026-01-01", after=3) == []  # type: ignore[attr-defined]


def test_objects_keep_the_schema_version_they_were_written_with(store: LeaseStore) -> None:
    """A partition's objects may span versions (a run added columns between two commits):
    each keeps its own, as the commit returned it, through every read of the ledger."""
    sid = setup(store, "a", "b")
    first = store.commit(
        store.acquire(sid, "a", "w1", T).token,
        [obj("2026-01-01", "a1"), obj("2026-01-02", "a2", version=2)],
    )
    second = store.commit(
        store.acquire(sid, "b", "w1", T).token,
        [obj("2026-01-01", "b1", version=2), obj("2026-01-01", "b2", version=3)],
    )
    assert [(o.dt, o.object_id, o.schema_version) for o in first.objects] == [
        ("2026-01-01", 1, 1),
        ("2026-01-02", 1, 2),
    ]
    assert [o.schema_version for o in second.objects] == [2, 3]
    every = store.ledger_objects("events")
    assert every == sorted([*first.objects, *second.objects], key=lambda o: (o.dt, o.object_id))
    assert [(o.dt, o.object_id, o.schema_version) for o in every] == [
        ("2026-01-01", 1, 1),
        ("2026-01-01", 2, 2),
        ("2026-01-01", 3, 3),
        ("2026-01-02", 1, 2),
    ]
    day1 = store.ledger_objects("events", "2026-01-01")
    assert [o.schema_version for o in day1] == [1, 2, 3]
    above = store.ledger_objects("events", "2026-01-01", after=1)  # type: ignore[attr-defined]
    assert [(o.object_id, o.schema_version) for o in above] == [(2, 2), (3, 3)]


def test_objects_keep_the_source_objects_their_rows_came_from(store: LeaseStore) -> None:
    """Each small object's sources (`resources.ledger.provenance`), as the task counted them,
    through the commit and every read; an object committed without them has none."""
    sid = setup(store, "a")
    runs = (("2026/01/01/a.jsonl", 120), ("2026/01/01/b ü.jsonl", 0), ('c"d.jsonl', 80))
    committed = store.commit(
        store.acquire(sid, "a", "w1", T).token,
        [replace(obj("2026-01-01", "a1"), sources=runs), obj("2026-01-01", "a2")],
    )
    assert [o.sources for o in committed.objects] == [runs, ()]
    assert store.ledger_objects("events", "2026-01-01") == list(committed.objects)
    assert positions_of(runs, 'c"d.jsonl') == [(120, 200)]


def test_an_object_item_without_its_schema_version_reads_as_version_1(
    store: LeaseStore, backend: str
) -> None:
    """Objects committed before the ledger kept versions were written before there were
    versions. (SQLite: the column's default; `test_sqlite_ledger_upgrade.py`.)"""
    if backend != "dynamodb":
        pytest.skip("an old SQLite file's rows get the column's default: the upgrade tests")
    sid = setup(store, "a")
    store.commit(store.acquire(sid, "a", "w1", T).token, [obj("2026-01-01", "a1", version=4)])
    store.client.update_item(  # type: ignore[attr-defined]
        TableName=store.table_name,  # type: ignore[attr-defined]
        Key={
            ATTR["sid"]: {"S": "events|2026-01-01|smallObjects"},
            ATTR["key"]: {"S": f"{1:019d}"},
        },
        UpdateExpression="REMOVE schemaVersion",
        ConditionExpression="attribute_exists(schemaVersion)",
    )
    (read,) = store.ledger_objects("events", "2026-01-01")
    assert read.schema_version == 1 and read.object_id == 1
