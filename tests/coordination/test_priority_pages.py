"""Pages read by priority end between groups of equal priorities, so a cursor skips none."""

from __future__ import annotations

from resources.coordination.items import LeaseItem, PartitionStatus, whole_priority_groups


def item(key: str, priority: str) -> LeaseItem:
    return LeaseItem(
        source_identifier="s|partition",
        partition_key=key,
        status=PartitionStatus.COMPLETED,
        owner=None,
        progress_state=None,
        ownership_timeout_ms=None,
        reopen_at_ms=None,
        closed_count=0,
        version=1,
        epoch=1,
        priority=priority,
        expiration_time=None,
    )


def test_a_full_page_gives_back_its_last_group_of_equal_priorities() -> None:
    page = [item("a", "1"), item("b", "2"), item("c", "3"), item("d", "3")]
    assert [i.partition_key for i in whole_priority_groups(page, 4)] == ["a", "b"]


def test_a_short_page_or_a_single_group_is_kept_whole() -> None:
    page = [item("a", "1"), item("b", "2"), item("c", "2")]
    assert whole_priority_groups(page, 4) == page  # the end of what there is
    same = [item(k, "7") for k in "abcd"]
    assert whole_priority_groups(same, 4) == same  # nothing before the group to stop at
    assert whole_priority_groups([], 4) == []
