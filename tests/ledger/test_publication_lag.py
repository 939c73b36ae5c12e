"""The pure rule of the `publication_lag` check: by when a committed id must be in its
partition's published version (open: one publication tick plus a margin; a delayed object: its
merge, `merge.delayed_interval` after its commit or at once while the live ids are not merged,
plus a margin), and that an unknown commit time is reported, never judged late. Times are
plain numbers: no clock runs."""

from __future__ import annotations

from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.publication_lag import (
    MERGE_MARGIN_MS,
    PUBLISH_MARGIN_MS,
    is_behind,
    partition_lag,
    unpublished_ids,
)

TABLE, DT = "events", "2027-01-15"
DELAYED_MS = 5 * 60 * 1000  # merge.delayed_interval's default, PT5M
T0 = 1_800_000_000_000


def obj(object_id: int, committed_at_ms: int | None, delayed: bool = False) -> RegisteredObject:
    return RegisteredObject(
        TABLE, DT, object_id, f"s{object_id}", 10, 1, "src", f"k{object_id}", 1, delayed,
        committed_at_ms=committed_at_ms,
    )  # fmt: skip


def open_partition(committed: int, published: int) -> TablePartition:
    return TablePartition(
        TABLE, DT, next_object_id=committed + 1,
        current_manifest_version=0 if published else -1, published_upper=published,
        publication_seq=1 if published else 0,
    )  # fmt: skip


def closed_switched(committed: int, last_live: int, merged: int) -> TablePartition:
    """Closed at `last_live`, switched and published up to its chain's end `merged`."""
    return TablePartition(
        TABLE, DT, next_object_id=committed + 1, last_live_object_id=last_live,
        current_manifest_version=merged, desired_manifest_version=merged, switched=True,
        merged_upper=merged, published_upper=merged, publication_seq=2,
    )  # fmt: skip


def test_a_published_partition_is_not_behind() -> None:
    tp = open_partition(committed=3, published=3)
    assert not is_behind(tp) and unpublished_ids(tp) == range(4, 4)
    lag = partition_lag(tp, [obj(i, T0) for i in (1, 2, 3)], T0 + 10**9, DELAYED_MS)
    assert not lag.late and lag.unpublished == 0 and lag.unknown == 0


def test_an_open_partition_within_a_publication_tick_and_margin_passes() -> None:
    tp = open_partition(committed=4, published=2)
    assert is_behind(tp) and unpublished_ids(tp) == range(3, 5)
    objects = [obj(i, T0 + i) for i in (1, 2, 3, 4)]
    lag = partition_lag(tp, objects, T0 + 3 + PUBLISH_MARGIN_MS, DELAYED_MS)
    assert not lag.late and lag.unpublished == 2


def test_an_open_partition_behind_too_long_fails() -> None:
    tp = open_partition(committed=4, published=2)
    objects = [obj(i, T0 + i * 1000) for i in (1, 2, 3, 4)]
    now = T0 + 3000 + PUBLISH_MARGIN_MS + 1
    lag = partition_lag(tp, objects, now, DELAYED_MS)
    assert lag.late and (lag.overdue, lag.most_overdue_id, lag.delayed) == (1, 3, False)
    assert lag.waited_ms == PUBLISH_MARGIN_MS + 1 and lag.allowed_ms == PUBLISH_MARGIN_MS
    assert lag.describe() == (
        f"{TABLE} dt={DT}: ids 3..4 unpublished (published up to 2), 1 past their deadline: "
        "object 3 was committed 300 s ago, allowed 300 s"
    )


def test_a_never_published_partition_counts_from_its_first_id() -> None:
    tp = open_partition(committed=2, published=0)
    lag = partition_lag(tp, [obj(1, T0), obj(2, T0)], T0 + PUBLISH_MARGIN_MS + 1, DELAYED_MS)
    assert unpublished_ids(tp) == range(1, 3) and lag.overdue == 2


def test_delayed_rows_of_a_closed_partition_wait_for_their_merge_interval() -> None:
    """Switched at 10 (its live ids are merged): a delayed object's merge is due
    `merge.delayed_interval` after its commit, then the merge and publication ticks."""
    tp = closed_switched(committed=12, last_live=8, merged=10)
    objects = [obj(i, T0 - 10**9) for i in range(1, 11)] + [obj(11, T0, True), obj(12, T0, True)]
    within = partition_lag(tp, objects, T0 + DELAYED_MS + MERGE_MARGIN_MS, DELAYED_MS)
    assert not within.late and within.unpublished == 2

    late = partition_lag(tp, objects, T0 + DELAYED_MS + MERGE_MARGIN_MS + 1, DELAYED_MS)
    assert late.late and (late.overdue, late.most_overdue_id, late.delayed) == (2, 11, True)
    assert late.allowed_ms == DELAYED_MS + MERGE_MARGIN_MS
    assert late.describe().endswith("(it waits for a merge)")
    # A longer delayed interval (a stream setting) allows longer.
    assert not partition_lag(
        tp, objects, T0 + DELAYED_MS + MERGE_MARGIN_MS + 1, 2 * DELAYED_MS
    ).late


def test_a_closed_partition_whose_live_ids_are_unmerged_has_its_merge_due_now() -> None:
    """Closed at 4 and never merged: closing made the merge due at once, and a delayed commit
    keeps the earlier due time, so a delayed object gets the margin only."""
    tp = TablePartition(
        TABLE, DT, next_object_id=6, last_live_object_id=4, current_manifest_version=0,
        published_upper=4, publication_seq=1,
    )  # fmt: skip
    objects = [obj(i, T0 - 10**9) for i in range(1, 5)] + [obj(5, T0, True)]
    assert not partition_lag(tp, objects, T0 + MERGE_MARGIN_MS, DELAYED_MS).late
    lag = partition_lag(tp, objects, T0 + MERGE_MARGIN_MS + 1, DELAYED_MS)
    assert lag.late and lag.most_overdue_id == 5 and lag.allowed_ms == MERGE_MARGIN_MS


def test_a_live_id_a_closed_partition_never_published_gets_the_publication_margin() -> None:
    """Live ids (up to `last_live_object_id`) are publishable at once, closed or not."""
    tp = TablePartition(
        TABLE, DT, next_object_id=4, last_live_object_id=3, current_manifest_version=0,
        published_upper=1, publication_seq=1,
    )  # fmt: skip
    objects = [obj(1, T0), obj(2, T0), obj(3, T0)]
    lag = partition_lag(tp, objects, T0 + PUBLISH_MARGIN_MS + 1, DELAYED_MS)
    assert (lag.overdue, lag.most_overdue_id, lag.delayed) == (2, 2, False)


def test_unknown_commit_times_are_reported_never_late() -> None:
    """An object item without its commit time, or not returned by the read: counted as
    unknown, and the partition is judged on the ids whose time is known."""
    tp = open_partition(committed=4, published=1)
    objects = [obj(1, T0), obj(2, None), obj(3, None)]  # 4: not in the read
    lag = partition_lag(tp, objects, T0 + 10**9, DELAYED_MS)
    assert not lag.late and lag.unknown == 3 and lag.unpublished == 3
    assert lag.describe() == (
        f"{TABLE} dt={DT}: ids 2..4 unpublished (published up to 1), 3 with an unknown commit time"
    )
    # A known time among them is still judged.
    lag = partition_lag(tp, [*objects, obj(4, T0)], T0 + 10**9, DELAYED_MS)
    assert lag.late and (lag.overdue, lag.unknown, lag.most_overdue_id) == (1, 2, 4)


def test_objects_committed_after_the_row_was_read_are_ignored() -> None:
    """Objects are read after the row: an id past the row's `next_object_id` is newer than
    what is judged."""
    tp = open_partition(committed=2, published=2)
    lag = partition_lag(tp, [obj(1, T0), obj(2, T0), obj(3, T0)], T0 + 10**9, DELAYED_MS)
    assert not lag.late and lag.unpublished == 0
