"""The merge planner: which small objects one merge takes and into which range; and, simulated
over random sizes, that planning and committing always keep a valid chain that covers every id
once in at most ceil(B/target)+1 files."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.compaction.merge_planner import MergeInputError, MergePlan, MergePlanner
from resources.ledger.merge import (
    MergeCommit,
    MergedObject,
    MergeRange,
    chain_problems,
    check_merge,
    merged_object_name,
)
from resources.ledger.model import RegisteredObject, TablePartition
from resources.stream_sections import MergeSettings
from resources.streams import ColumnSpec, StreamConfig

TABLE, DT = "events", "2026-01-15"


def obj(object_id: int, size: int = 10, rows: int = 1, version: int = 1) -> RegisteredObject:
    return RegisteredObject(
        table=TABLE,
        dt=DT,
        object_id=object_id,
        url=f"file:///lake/events/dt={DT}/small-{object_id}.parquet",
        content_length=size,
        row_count=rows,
        source_identifier="events|partition",
        source_partition_key=f"src-{object_id}",
        epoch=1,
        delayed=False,
        schema_version=version,
    )


def rng(lower: int | None, upper: int, size: int = 0, rows: int = 0) -> MergeRange:
    url = (
        None if lower is None else f"file:///lake/events/merged/{merged_object_name(lower, upper)}"
    )
    return MergeRange(TABLE, DT, lower, upper, url, size, rows, epoch=0, updated_at_ms=0)


SENTINEL = rng(None, 0)


def part(next_object_id: int, merged_upper: int = 0) -> TablePartition:
    return TablePartition(TABLE, DT, next_object_id=next_object_id, merged_upper=merged_upper)


def test_nothing_unmerged_plans_nothing() -> None:
    planner = MergePlanner(10, 1000)
    assert planner.plan(part(1), [], []) is None
    merged = [SENTINEL, rng(0, 3, 30, 3)]
    assert planner.plan(part(4, 3), merged, [obj(i) for i in (1, 2, 3)]) is None


def test_a_first_merge_opens_the_first_range() -> None:
    plan = MergePlanner(10, 1000).plan(part(4), [], [obj(3, rows=5), obj(1), obj(2)])
    assert plan == MergePlan(
        TABLE, DT, previous_upper=0, lower=0, upper=3, rewrite=None,
        objects=(obj(1), obj(2), obj(3, rows=5)), carry_over=False,
    )  # fmt: skip
    assert plan.inputs == [o.url for o in plan.objects]
    assert (plan.input_bytes, plan.input_rows) == (30, 7)


def test_max_objects_and_max_bytes_leave_objects_behind() -> None:
    objects = [obj(i, size=100) for i in range(1, 6)]
    by_count = MergePlanner(2, 10_000).plan(part(6), [], objects)
    assert by_count is not None
    assert (by_count.upper, by_count.carry_over) == (2, True)
    by_bytes = MergePlanner(100, 350).plan(part(6), [], objects)
    assert by_bytes is not None
    assert (by_bytes.upper, by_bytes.input_bytes, by_bytes.carry_over) == (3, 300, True)
    exact = MergePlanner(5, 500).plan(part(6), [], objects)
    assert exact is not None and (exact.upper, exact.carry_over) == (5, False)


def test_an_object_above_the_byte_target_is_still_taken_alone() -> None:
    plan = MergePlanner(10, 50).plan(part(3), [], [obj(1, size=80), obj(2, size=1)])
    assert plan is not None
    assert (plan.upper, plan.input_bytes, plan.carry_over) == (1, 80, True)


def test_an_open_range_under_the_target_is_rewritten_with_a_budget_of_new_objects() -> None:
    ranges = [SENTINEL, rng(0, 4, 400, 40), rng(4, 6, 150, 20)]
    objects = [obj(i, size=100, rows=3) for i in range(1, 12)]
    plan = MergePlanner(100, 400).plan(part(12, 6), ranges, objects)
    assert plan is not None
    # Only the new objects count against the 400-byte budget (the rewritten 150 do not): a
    # backlog moves a full budget per merge however full the open object already is.
    assert (plan.previous_upper, plan.lower, plan.upper) == (6, 4, 10)
    assert plan.rewrite == ranges[-1]
    assert [o.object_id for o in plan.objects] == [7, 8, 9, 10]
    assert plan.carry_over
    assert plan.inputs == [ranges[-1].url, *(objects[i].url for i in range(6, 10))]
    assert (plan.input_bytes, plan.input_rows) == (550, 32)


def test_a_plans_schema_version_is_the_newest_of_its_inputs() -> None:
    planner = MergePlanner(100, 400)
    mixed = [obj(1, version=2), obj(2), obj(3, version=3), obj(4, version=1)]
    plan = planner.plan(part(5), [], mixed)
    assert plan is not None and plan.schema_version == 3
    assert planner.plan(part(3), [], [obj(1), obj(2)]).schema_version == 1  # type: ignore[union-attr]
    open_range = replace(rng(0, 4, 100, 10), schema_version=4)
    rewrite = planner.plan(part(6, 4), [SENTINEL, open_range], [*mixed, obj(5, version=2)])
    assert rewrite is not None and rewrite.rewrite == open_range
    assert rewrite.schema_version == 4  # the rewritten object's rows are inputs too


def test_an_open_range_at_the_target_is_left_alone_and_a_new_range_opens() -> None:
    ranges = [SENTINEL, rng(0, 4, 400, 40)]
    plan = MergePlanner(100, 400).plan(part(6, 4), ranges, [obj(i) for i in range(1, 6)])
    assert plan is not None
    assert (plan.previous_upper, plan.lower, plan.upper, plan.rewrite) == (4, 4, 5, None)
    assert plan.inputs == [obj(5).url]


def test_objects_beyond_the_partition_read_wait_for_the_next_merge() -> None:
    # Object 4 was committed after the partition row (next_object_id=4) was read.
    plan = MergePlanner(10, 1000).plan(part(4), [], [obj(i) for i in range(1, 5)])
    assert plan is not None
    assert (plan.upper, plan.carry_over) == (3, False)


def test_a_gap_in_the_ids_is_a_bug_and_plans_nothing() -> None:
    with pytest.raises(
        MergeInputError, match=r"events dt=2026-01-15: committed small object id 2 "
    ):
        MergePlanner(10, 1000).plan(part(5), [], [obj(1), obj(3), obj(4)])
    with pytest.raises(MergeInputError, match=r"id 4 \(and 1 more\)"):
        MergePlanner(10, 1000).plan(part(6, 3), [SENTINEL, rng(0, 3, 30, 3)], [obj(1)])
    with pytest.raises(MergeInputError, match="id 2 appears twice"):
        MergePlanner(10, 1000).plan(part(3), [], [obj(1), obj(2), obj(2, size=5)])


def test_a_broken_chain_plans_nothing() -> None:
    broken = [SENTINEL, rng(0, 2, 20, 2), rng(3, 4, 10, 1)]
    with pytest.raises(MergeInputError, match="does not start where"):
        MergePlanner(10, 1000).plan(part(6, 4), broken, [obj(i) for i in range(1, 6)])


def test_limits_come_from_the_stream() -> None:
    config = StreamConfig(
        name="events",
        source="file:///nowhere",
        format="jsonl",
        columns=(ColumnSpec("at", "timestamp"),),
        event_time="at",
        table="file:///nowhere/table",
        quarantine="file:///nowhere/quarantine",
        merge=MergeSettings(max_objects=7, max_bytes=4096),
    )
    planner = MergePlanner.for_stream(config)
    assert (planner.max_objects, planner.max_bytes) == (7, 4096)
    with pytest.raises(ValueError):
        MergePlanner(0, 10)


# -- the chain over many merges, simulated ---------------------------------------------------


@dataclass
class SimulatedPartition:
    """A table partition's ledger as the store keeps it: committed objects, the chain and
    the ids each range's merged object holds."""

    objects: list[RegisteredObject] = field(default_factory=list)
    ranges: list[MergeRange] = field(default_factory=list)
    covered: dict[int, frozenset[int]] = field(default_factory=dict)  # upper -> ids

    @property
    def next_object_id(self) -> int:
        return len(self.objects) + 1

    def commit(self, sizes: Sequence[int]) -> None:
        for size in sizes:
            self.objects.append(obj(self.next_object_id, size=size, rows=size % 7 + 1))

    def merge(self, planner: MergePlanner, ratio: float) -> MergePlan | None:
        """Plan, write (the merged object is `ratio` times its input) and commit as a store
        does: `check_merge` first, the open range replaced when rewritten."""
        merged_upper = self.ranges[-1].upper if self.ranges else 0
        partition = part(self.next_object_id, merged_upper)
        plan = planner.plan(partition, self.ranges, self.objects)
        if plan is None:
            return None
        size = max(1, round(plan.input_bytes * ratio))
        merged = MergedObject(plan.lower, plan.upper, f"m-{plan.upper}", size, plan.input_rows)
        commit = MergeCommit(TABLE, DT, plan.previous_upper, merged, plan.carry_over, 60.0)
        rewritten = check_merge(self.ranges, commit, self.next_object_id)
        assert rewritten == plan.rewrite
        ids = frozenset(o.object_id for o in plan.objects)
        if rewritten is not None:
            old = self.covered.pop(rewritten.upper)
            assert not old & ids, "an object merged twice"
            ids |= old
            self.ranges.pop()
        if not self.ranges:
            self.ranges.append(SENTINEL)
        self.ranges.append(
            replace(rng(plan.lower, plan.upper, size, plan.input_rows), url=merged.url)
        )
        self.covered[plan.upper] = ids
        return plan


STEPS = st.lists(
    st.one_of(
        # A commit of objects of these sizes, or a merge whose output is this ratio of its input.
        st.lists(st.integers(1, 400), min_size=1, max_size=12),
        st.floats(0.2, 1.6),
    ),
    max_size=25,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=STEPS,
    max_objects=st.integers(1, 6),
    max_bytes=st.integers(1, 1000),
    final_ratio=st.floats(0.2, 1.6),
)
def test_planning_and_committing_keeps_a_valid_chain_covering_every_id_once(
    steps: list[list[int] | float], max_objects: int, max_bytes: int, final_ratio: float
) -> None:
    planner = MergePlanner(max_objects, max_bytes)
    sim = SimulatedPartition()

    def merge(ratio: float) -> MergePlan | None:
        before = sim.ranges[-1].upper if sim.ranges else 0
        plan = sim.merge(planner, ratio)
        assert chain_problems(sim.ranges, sim.next_object_id) == []
        if plan is not None:
            assert plan.upper > before
            assert plan.carry_over == (plan.upper < sim.next_object_id - 1)
            assert len(plan.objects) <= max_objects
            new_bytes = sum(o.content_length for o in plan.objects)
            assert len(plan.objects) == 1 or new_bytes <= max_bytes
        return plan

    for step in steps:
        if isinstance(step, float):
            merge(step)
        else:
            sim.commit(step)
    # Then merge until nothing is left; each merge takes at least one object, so this ends.
    for _ in range(sim.next_object_id):
        if merge(final_ratio) is None:
            break
    assert planner.plan(part(sim.next_object_id, len(sim.objects)), sim.ranges, sim.objects) is None

    every_id = set(range(1, sim.next_object_id))
    assert sorted(i for ids in sim.covered.values() for i in ids) == sorted(every_id)
    for r in sim.ranges[1:]:
        lower = r.lower or 0
        assert sim.covered[r.upper] == set(range(lower + 1, r.upper + 1))
        assert r.row_count == sum(
            o.row_count for o in sim.objects if lower < o.object_id <= r.upper
        )
    merged = sim.ranges[1:]
    assert all(r.content_length >= max_bytes for r in merged[:-1])
    total = sum(r.content_length for r in merged)
    assert len(merged) <= math.ceil(total / max_bytes) + 1
