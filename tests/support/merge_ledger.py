"""Helpers the merge ledger's suites share: ingesting small objects, the merge job's lease, and
merge commits of one table partition."""

from __future__ import annotations

from resources.coordination.items import ItemType, LeaseItem
from resources.ledger.merge import MergeCommit, MergedObject, merged_object_name
from resources.ledger.model import RegisteredObject, SmallObject
from resources.stores.base import CoordinationStore

T = 60.0
INTERVAL = 3600.0
TABLE = "events"
DT = "2026-01-01"


def obj(name: str, dt: str = DT, table: str = TABLE) -> SmallObject:
    return SmallObject(table, dt, f"file:///lake/{table}/dt={dt}/{name}.parquet", 1000, 10)


def ingest(
    store: CoordinationStore,
    *objects: SmallObject,
    merge_after_s: dict[str, float] | None = None,
    delayed_merge_after_s: dict[str, float] | None = None,
) -> list[RegisteredObject]:
    """One source partition (named after its first object) committed with `objects`."""
    sid = store.source_identifier("source")
    key = objects[0].url
    store.create_partitions(sid, [key])
    lease = store.acquire(sid, key, "ingester", T)
    after = {TABLE: INTERVAL} if merge_after_s is None else merge_after_s
    result = store.commit(
        lease.token, objects, merge_after_s=after, delayed_merge_after_s=delayed_merge_after_s
    )
    return list(result.objects)


def job_sid(store: CoordinationStore) -> str:
    return store.source_identifier(TABLE, ItemType.MERGE_JOB)


def acquire_job(store: CoordinationStore, owner: str = "merger", dt: str = DT) -> LeaseItem:
    store.create_partitions(job_sid(store), [dt])
    return store.acquire(job_sid(store), dt, owner, T)


def merged(lower: int, upper: int) -> MergedObject:
    name = merged_object_name(lower, upper)
    return MergedObject(
        lower, upper, f"file:///lake/{TABLE}/merged/dt={DT}/1-abc/{name}", 100 * upper, 10 * upper
    )


def merge(
    previous_upper: int, m: MergedObject | None, *, carry_over: bool = False, dt: str = DT
) -> MergeCommit:
    return MergeCommit(TABLE, dt, previous_upper, m, carry_over, INTERVAL)


def bounds(store: CoordinationStore) -> list[tuple[int | None, int]]:
    return [(r.lower, r.upper) for r in store.merge_ranges(TABLE, DT)]
