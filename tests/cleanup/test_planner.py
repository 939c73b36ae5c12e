"""The clean-up planner alone: which units' objects may go, and how far the cursor may move."""

from __future__ import annotations

from resources.cleanup.planner import Publication, Verdict, completed_ms, plan_cleanup
from resources.coordination.items import LeaseItem, PartitionStatus, priority_at
from resources.ingestion.work_units import UnitObject, WorkUnit

PUBLISHED = Verdict(Publication.PUBLISHED, "rows published")
WAITING = Verdict(Publication.WAITING, "dt=2026-01-01: its object 3 is not published yet")


def unit(
    key: str,
    at_ms: int,
    objects: int = 2,
    *,
    status: PartitionStatus = PartitionStatus.COMPLETED,
    dead_letter: str | None = None,
) -> LeaseItem:
    listed = tuple(UnitObject(f"{key}/{i}", 10) for i in range(objects))
    return LeaseItem(
        "events|partition", key, status, None, WorkUnit(key, listed).progress_state(),
        None, None, 0, 1, 1, priority_at(at_ms), None, dead_letter,
    )  # fmt: skip


def verdicts(waiting: set[str] = frozenset()):  # type: ignore[no-untyped-def]
    asked: list[str] = []

    def verdict_of(item: LeaseItem) -> Verdict:
        asked.append(item.partition_key)
        return WAITING if item.partition_key in waiting else PUBLISHED

    return verdict_of, asked


def test_published_units_go_whole_and_the_cursor_follows_each() -> None:
    items = [unit("a", 100), unit("b", 200, 3)]
    verdict_of, _ = verdicts()
    plan = plan_cleanup(items, verdict_of, cutoff_ms=1000, limit=100)
    assert [(s.unit, [o.key for o in s.objects], s.cursor) for s in plan.steps] == [
        ("a", ["a/0", "a/1"], priority_at(100)),
        ("b", ["b/0", "b/1", "b/2"], priority_at(200)),
    ]
    assert not plan.stopped and completed_ms(items[1]) == 200


def test_a_dead_letter_is_never_cleaned_and_not_even_judged() -> None:
    items = [unit("a", 100, dead_letter="closed 5 times"), unit("b", 200)]
    verdict_of, asked = verdicts()
    plan = plan_cleanup(items, verdict_of, cutoff_ms=1000, limit=100)
    assert [(s.unit, s.objects, s.cursor) for s in plan.steps][0] == ("a", (), priority_at(100))
    assert "dead letter" in plan.steps[0].why
    assert asked == ["b"]


def test_an_item_no_longer_completed_is_passed_over() -> None:
    items = [unit("a", 100, status=PartitionStatus.CLOSED)]
    plan = plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=100)
    assert plan.steps[0].objects == () and plan.steps[0].cursor == priority_at(100)


def test_unpublished_rows_stop_the_plan_and_the_cursor_there() -> None:
    items = [unit("a", 100), unit("b", 200), unit("c", 300)]
    verdict_of, asked = verdicts({"b"})
    plan = plan_cleanup(items, verdict_of, cutoff_ms=1000, limit=100)
    assert [s.unit for s in plan.steps] == ["a"]
    assert plan.waiting == ("b", WAITING.why)
    assert asked == ["a", "b"]  # c is never judged: later units wait


def test_after_is_respected() -> None:
    items = [unit("a", 100), unit("b", 1000)]
    plan = plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=100)
    assert [s.unit for s in plan.steps] == ["a"]
    assert plan.waiting is not None and "after" in plan.waiting[1]


def test_the_bound_is_in_whole_units() -> None:
    items = [unit("a", 100, 3), unit("b", 200, 3), unit("c", 300, 3)]
    plan = plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=4)
    assert [s.unit for s in plan.steps] == ["a", "b"]  # b is begun under the bound: whole
    assert plan.full and plan.objects == 6
    assert plan.steps[-1].cursor == priority_at(200)


def test_the_cursor_never_splits_a_group_of_equal_priorities() -> None:
    """Units completing in the same millisecond share a priority: the cursor moves past it only
    once every one of them is done, so one still waiting keeps its done siblings before it."""
    items = [unit("a", 100), unit("b", 200), unit("c", 200), unit("d", 300)]
    plan = plan_cleanup(items, verdicts({"c"})[0], cutoff_ms=1000, limit=100)
    assert [(s.unit, s.cursor) for s in plan.steps] == [("a", priority_at(100)), ("b", None)]
    plan = plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=3)
    assert [(s.unit, s.cursor) for s in plan.steps] == [
        ("a", priority_at(100)),
        ("b", None),
        ("c", priority_at(200)),
    ]


def test_the_plan_is_the_same_when_asked_again() -> None:
    items = [unit("a", 100), unit("b", 200)]
    first = plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=100)
    assert plan_cleanup(items, verdicts()[0], cutoff_ms=1000, limit=100) == first
    assert plan_cleanup([], verdicts()[0], cutoff_ms=1000, limit=100).steps == []
