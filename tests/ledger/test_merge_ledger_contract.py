"""The compaction half of the ledger every backend passes: merge jobs scheduled by ingestion
commits, closing, and merge commits that extend the chain in one transaction fenced by the
merge job's lease (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from resources.coordination.errors import PartitionNotOwnedError
from resources.coordination.items import PartitionStatus
from resources.ledger.merge import MergeChainError, MergedObject, MergeRange, chain_problems
from resources.stores.base import CoordinationStore
from tests.support.fakes import FakeClock
from tests.support.merge_ledger import (
    DT,
    INTERVAL,
    TABLE,
    T,
    acquire_job,
    bounds,
    ingest,
    job_sid,
    merge,
    merged,
    obj,
)

pytestmark = pytest.mark.contract


def test_an_ingestion_commit_schedules_the_merge_job_once(
    store: CoordinationStore, clock: FakeClock
) -> None:
    first = store.now_ms()
    ingest(store, obj("a"), obj("a", table="other"), obj("a", dt="2026-01-02"))
    due = first + int(INTERVAL * 1000)
    parts = {(p.table, p.dt): p.merge_due_at_ms for p in store.table_partitions(TABLE)}
    assert parts == {(TABLE, DT): due, (TABLE, "2026-01-02"): due}
    assert [p.merge_due_at_ms for p in store.table_partitions("other")] == [None]
    clock.advance(600)
    ingest(store, obj("b"))  # rides along on the pending job
    ingest(store, obj("c", table="other"), merge_after_s={TABLE: INTERVAL})
    partition = store.table_partition(TABLE, DT)
    assert partition.merge_due_at_ms == due and partition.next_object_id == 3
    assert partition.merged_upper == 0 and partition.unmerged == 2 and not partition.closed
    assert store.table_partition("other", DT).merge_due_at_ms is None
    ingest(store, obj("d", dt="2026-01-03"), merge_after_s={})
    assert store.table_partition(TABLE, "2026-01-03").merge_due_at_ms is None
    assert store.table_partition(TABLE, "2026-01-04") is None


def test_closing_is_idempotent_and_later_objects_are_delayed(
    store: CoordinationStore, clock: FakeClock
) -> None:
    assert store.close_partition(TABLE, DT) is None
    assert store.table_partition(TABLE, DT) is None  # closing creates nothing
    ingest(store, obj("a"), obj("b"))
    closed_at = store.now_ms()
    closed = store.close_partition(TABLE, DT)
    assert closed == store.table_partition(TABLE, DT)
    assert closed.closed and closed.last_live_object_id == 2
    assert closed.merge_due_at_ms == closed_at  # due at once
    clock.advance(600)
    assert store.close_partition(TABLE, DT) == closed  # a closed partition is left as it is
    late = ingest(store, obj("late"))
    assert [(o.object_id, o.delayed) for o in late] == [(3, True)]
    after = store.table_partition(TABLE, DT)
    assert after.last_live_object_id == 2 and after.merge_due_at_ms == closed_at
    assert [o.delayed for o in store.ledger_objects(TABLE, DT)] == [False, False, True]


def test_a_delayed_object_makes_the_job_due_after_the_delayed_interval(
    store: CoordinationStore, clock: FakeClock
) -> None:
    """The commit decides in its transaction: open partition, `merge.interval`; closed (the
    object is delayed), `merge.delayed_interval`; a job due earlier already is kept."""
    delayed_s = 60.0
    after = {TABLE: INTERVAL}
    delayed = {TABLE: delayed_s}
    opened = store.now_ms()
    ingest(store, obj("a"), merge_after_s=after, delayed_merge_after_s=delayed)
    assert store.table_partition(TABLE, DT).merge_due_at_ms == opened + int(INTERVAL * 1000)
    # Merged, closed (due at once), settled by a merge with nothing left: no job pending.
    job = acquire_job(store)
    store.commit_merge(job.token, merge(0, merged(0, 1)))
    store.close_partition(TABLE, DT)
    store.commit_merge(acquire_job(store).token, merge(1, None))
    assert store.table_partition(TABLE, DT).merge_due_at_ms is None
    clock.advance(3600)
    late_at = store.now_ms()
    (late,) = ingest(store, obj("late"), merge_after_s=after, delayed_merge_after_s=delayed)
    assert late.delayed
    due = late_at + int(delayed_s * 1000)
    assert store.table_partition(TABLE, DT).merge_due_at_ms == due
    clock.advance(30)
    ingest(store, obj("later"), merge_after_s=after, delayed_merge_after_s=delayed)
    assert store.table_partition(TABLE, DT).merge_due_at_ms == due  # the earlier one kept
    # A job pending at the open interval when the partition closed... closing made it due at
    # once, and a delayed commit never moves a due time later.
    ingest(store, obj("b", dt="2026-01-02"), merge_after_s=after, delayed_merge_after_s=delayed)
    closed = store.close_partition(TABLE, "2026-01-02")
    ingest(store, obj("c", dt="2026-01-02"), merge_after_s=after, delayed_merge_after_s=delayed)
    assert store.table_partition(TABLE, "2026-01-02").merge_due_at_ms == closed.merge_due_at_ms
    # Without a delayed interval, a delayed object waits the open one (as before).
    clock.advance(3600)
    job = acquire_job(store)
    store.commit_merge(job.token, merge(1, merged(0, 3)))
    assert store.table_partition(TABLE, DT).merge_due_at_ms is None
    at = store.now_ms()
    ingest(store, obj("plain"))
    assert store.table_partition(TABLE, DT).merge_due_at_ms == at + int(INTERVAL * 1000)


def test_a_merge_of_a_closed_partition_leaves_delayed_objects_due_after_the_delayed_interval(
    store: CoordinationStore,
) -> None:
    ingest(store, obj("a"), obj("b"))
    store.close_partition(TABLE, DT)
    job = acquire_job(store)
    ingest(store, obj("late"))  # lands while the merge runs
    at = store.now_ms()
    result = store.commit_merge(job.token, replace(merge(0, merged(0, 2)), delayed_interval_s=45.0))
    assert result.merge_due_at_ms == at + 45_000
    assert store.table_partition(TABLE, DT).merge_due_at_ms == at + 45_000


def test_the_first_merge_writes_the_sentinel_and_its_range(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"), obj("c"))
    job = acquire_job(store)
    now = store.now_ms()
    result = store.commit_merge(job.token, merge(0, merged(0, 3)))
    m = merged(0, 3)
    stored = MergeRange(TABLE, DT, 0, 3, m.url, m.content_length, m.row_count, job.epoch, now)
    assert result.range == stored
    assert result.merge_due_at_ms is None and result.desired_manifest_version == 3
    ranges = store.merge_ranges(TABLE, DT)
    assert ranges == [MergeRange(TABLE, DT, None, 0, None, 0, 0, 0, now), stored]
    assert ranges[0].is_sentinel
    partition = store.table_partition(TABLE, DT)
    assert chain_problems(ranges, partition.next_object_id) == []
    assert partition.desired_manifest_version == partition.merged_upper == 3
    assert partition.merge_due_at_ms is None and partition.unmerged == 0
    released = store.get(job_sid(store), DT)
    assert released.status is PartitionStatus.UNASSIGNED and released.owner is None
    again = store.acquire(job_sid(store), DT, "next-merger", T)
    assert again.epoch == job.epoch + 1


def test_the_open_range_is_rewritten_then_a_new_range_follows(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2)))
    ingest(store, obj("c"), obj("d"))
    job = acquire_job(store)
    rewrite = store.commit_merge(job.token, merge(2, merged(0, 4)))
    assert (rewrite.range.lower, rewrite.range.upper) == (0, 4)
    assert rewrite.range.epoch == job.epoch
    assert bounds(store) == [(None, 0), (0, 4)]
    assert store.merge_ranges(TABLE, DT)[-1] == rewrite.range  # the open range, replaced whole
    assert rewrite.range.url == merged(0, 4).url and rewrite.range.row_count == 40
    ingest(store, obj("e"))
    store.commit_merge(acquire_job(store).token, merge(4, merged(4, 5)))
    assert bounds(store) == [(None, 0), (0, 4), (4, 5)]
    partition = store.table_partition(TABLE, DT)
    assert chain_problems(store.merge_ranges(TABLE, DT), partition.next_object_id) == []
    assert partition.desired_manifest_version == partition.merged_upper == 5


def test_a_merged_range_keeps_its_schema_version_through_a_rewrite(
    store: CoordinationStore,
) -> None:
    """A range records its merged object's version (the newest of its rows'), and a rewrite of
    the open range replaces it with the rewritten object's; the sentinel is version 1."""
    ingest(store, obj("a"), replace(obj("b"), schema_version=2))
    first = store.commit_merge(
        acquire_job(store).token, merge(0, replace(merged(0, 2), schema_version=2))
    )
    assert first.range.schema_version == 2
    assert [r.schema_version for r in store.merge_ranges(TABLE, DT)] == [1, 2]
    ingest(store, replace(obj("c"), schema_version=3))
    rewrite = store.commit_merge(
        acquire_job(store).token, merge(2, replace(merged(0, 3), schema_version=3))
    )
    assert rewrite.range.schema_version == 3
    assert store.merge_ranges(TABLE, DT) == [
        MergeRange(TABLE, DT, None, 0, None, 0, 0, 0, first.range.updated_at_ms),
        rewrite.range,
    ]
    ingest(store, obj("d"))
    store.commit_merge(acquire_job(store).token, merge(3, merged(3, 4)))
    assert [r.schema_version for r in store.merge_ranges(TABLE, DT)] == [1, 3, 1]


def test_a_merge_with_nothing_to_merge_only_settles_the_job(store: CoordinationStore) -> None:
    ingest(store, obj("a"), obj("b"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2)))
    closed = store.close_partition(TABLE, DT)
    assert closed.merge_due_at_ms is not None
    result = store.commit_merge(acquire_job(store).token, merge(2, None))
    assert result.range is None and result.merge_due_at_ms is None
    assert result.desired_manifest_version == 2
    assert store.table_partition(TABLE, DT) == replace(closed, merge_due_at_ms=None)
    assert bounds(store) == [(None, 0), (0, 2)]
    assert store.get(job_sid(store), DT).status is PartitionStatus.UNASSIGNED


def test_a_job_that_merged_nothing_on_a_new_partition_keeps_it_scheduled(
    store: CoordinationStore,
) -> None:
    ingest(store, obj("a"))
    now = store.now_ms()
    result = store.commit_merge(acquire_job(store).token, merge(0, None))
    assert result.range is None and result.desired_manifest_version == -1
    assert result.merge_due_at_ms == now + int(INTERVAL * 1000)  # id 1 is still unmerged
    assert store.table_partition(TABLE, DT).merge_due_at_ms == result.merge_due_at_ms
    assert store.merge_ranges(TABLE, DT) == []


def test_carry_over_makes_the_job_due_at_once(store: CoordinationStore) -> None:
    ingest(store, *(obj(name) for name in "abcd"))
    now = store.now_ms()
    result = store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2), carry_over=True))
    assert result.merge_due_at_ms == now
    partition = store.table_partition(TABLE, DT)
    assert partition.merge_due_at_ms == now and partition.unmerged == 2


def test_objects_committed_while_the_merge_ran_are_never_forgotten(
    store: CoordinationStore, clock: FakeClock
) -> None:
    ingest(store, obj("a"), obj("b"))
    job = acquire_job(store)
    read = store.table_partition(TABLE, DT)  # the merge plans (0, 2] ...
    clock.advance(30)
    ingest(store, obj("while-merging"))  # ... an ingestion commit lands meanwhile ...
    assert store.table_partition(TABLE, DT).merge_due_at_ms == read.merge_due_at_ms
    clock.advance(30)
    now = store.now_ms()
    result = store.commit_merge(job.token, merge(0, merged(0, 2)))  # ... and it commits
    assert result.merge_due_at_ms == now + int(INTERVAL * 1000)
    partition = store.table_partition(TABLE, DT)
    assert partition.merge_due_at_ms == result.merge_due_at_ms and partition.unmerged == 1


def test_a_fenced_merge_commit_writes_nothing(store: CoordinationStore, clock: FakeClock) -> None:
    ingest(store, obj("a"), obj("b"))
    zombie = acquire_job(store, "zombie")
    clock.advance(T + 1)
    successor = acquire_job(store, "successor")
    assert successor.epoch == zombie.epoch + 1
    partition = store.table_partition(TABLE, DT)
    with pytest.raises(PartitionNotOwnedError):
        store.commit_merge(zombie.token, merge(0, merged(0, 2)))
    assert store.merge_ranges(TABLE, DT) == []
    assert store.table_partition(TABLE, DT) == partition
    assert store.get(job_sid(store), DT) == successor
    # The successor merges; the zombie, waking again, is still told it lost the lease (not
    # that the chain moved), and nothing it asks for is written.
    store.commit_merge(successor.token, merge(0, merged(0, 2)))
    ranges, partition = store.merge_ranges(TABLE, DT), store.table_partition(TABLE, DT)
    job = store.get(job_sid(store), DT)
    with pytest.raises(PartitionNotOwnedError):
        store.commit_merge(zombie.token, merge(0, merged(0, 2)))
    assert store.merge_ranges(TABLE, DT) == ranges
    assert store.table_partition(TABLE, DT) == partition
    assert store.get(job_sid(store), DT) == job


@pytest.mark.parametrize(
    ("previous_upper", "m"),
    [
        (0, merged(0, 3)),  # the chain moved on to 2 under the merge
        (2, merged(2, 5)),  # past the last committed id (4)
        (2, merged(2, 2)),  # upper not above lower
        (2, merged(1, 4)),  # neither a new range at 2 nor the open range (0, 2] rewritten
    ],
)
def test_a_merge_that_would_break_the_chain_writes_nothing(
    store: CoordinationStore, previous_upper: int, m: MergedObject
) -> None:
    ingest(store, obj("a"), obj("b"))
    store.commit_merge(acquire_job(store).token, merge(0, merged(0, 2)))
    ingest(store, obj("c"), obj("d"))
    job = acquire_job(store)
    ranges, partition = store.merge_ranges(TABLE, DT), store.table_partition(TABLE, DT)
    with pytest.raises(MergeChainError):
        store.commit_merge(job.token, merge(previous_upper, m))
    assert store.merge_ranges(TABLE, DT) == ranges
    assert store.table_partition(TABLE, DT) == partition
    assert store.get(job_sid(store), DT) == job  # still held: the merge may settle it


def test_the_first_merge_cannot_reach_past_the_committed_ids(store: CoordinationStore) -> None:
    ingest(store, obj("a"))
    job = acquire_job(store)
    with pytest.raises(MergeChainError):
        store.commit_merge(job.token, merge(0, merged(0, 2)))
    assert store.merge_ranges(TABLE, DT) == []
    nowhere = acquire_job(store, dt="2026-02-01")
    with pytest.raises(MergeChainError):  # no partition row at all
        store.commit_merge(nowhere.token, merge(0, merged(0, 1), dt="2026-02-01"))
    settled = store.commit_merge(nowhere.token, merge(0, None, dt="2026-02-01"))
    assert settled.range is None and settled.merge_due_at_ms is None
    assert store.table_partition(TABLE, "2026-02-01") is None  # a merge commit creates none
