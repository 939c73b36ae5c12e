"""Rollups of a stream whose published rows can leave (`dedupe: latest`, `on_change: replace`)
are recomputed from what each publication serves, on both backends: a later record moving its
key to another group, a replacement taking an object's earlier content out of its dates, a
group whose last row left (its key removed), the switch to merged objects — after each, the
state, the rollup's table and the `rollups_exact` check agree with the rows an engine reads."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from resources.aggregation import checks
from resources.aggregation.partials import ArrowPartials
from resources.aggregation.rollup_table import RollupTable, rollup_table_name
from resources.aggregation.runner import RollupRunner, due_dates
from resources.aggregation.served_rows import ServedRows
from resources.coordination.items import ItemType
from resources.coordination.lease import LeaseTiming
from resources.key_settings import DATE, FIRST, LATEST, DedupeSettings
from resources.objects.local import LocalObjectStore
from resources.publication.reader import read_partition
from resources.rollup.cursor import RollupCursor, rollup_id, served_position
from resources.rollup.spec import RollupSpec, parse_rollups
from tests.publication.conftest import DT, World, commit_keyed, commit_replacement, content
from tests.support.merge_child import TABLE

D2 = "2027-01-16"
Totals = dict[str, tuple[int, float, float, float]]
"""user -> (count, sum, max, min) of amount."""


def per_user(world: World) -> RollupSpec:
    aggregates = {"n": "count", "s": "sum(amount)", "top": "max(amount)", "low": "min(amount)"}
    return parse_rollups(
        {"per_user": {"group_by": ["user_id"], "aggregates": aggregates}},
        {c.name: c.type for c in world.config.columns},
    )[0]


def runner(world: World, spec: RollupSpec, tmp_path: Path) -> RollupRunner:
    table = RollupTable(
        world.config, spec, world.store, world.target,
        LocalObjectStore(tmp_path / "events_per_user"), safety_delay_s=60.0, clock_ms=lambda: 0,
    )  # fmt: skip
    return RollupRunner(
        world.store, world.objects, TABLE, spec, lambda _: ArrowPartials(world.config.columns),
        owner="test", timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
        work_dir=tmp_path / "scratch", publish_to=table,
        served_rows=ServedRows(world.store, world.objects, TABLE),
    )  # fmt: skip


def served_totals(world: World, dt: str) -> Totals:
    """What an engine computes from the rows it reads of `dt`."""
    rows = read_partition(world.target, TABLE, dt)
    by_user: dict[str, list[float]] = {}
    for user, amount in zip(
        rows.column("user_id").to_pylist(), rows.column("amount").to_pylist(), strict=True
    ):
        by_user.setdefault(f'["{user}"]', []).append(amount)
    return {u: (len(a), sum(a), max(a), min(a)) for u, a in by_user.items()}


def state(world: World, spec: RollupSpec, dt: str) -> Totals:
    states = world.store.rollup_states(rollup_id(TABLE, spec), dt)
    return {k: tuple(s.value) for k, s in states.items()}  # type: ignore[misc]


def cursor(world: World, spec: RollupSpec, dt: str) -> RollupCursor:
    sid = world.store.source_identifier(rollup_id(TABLE, spec), ItemType.ROLLUP_JOB)
    item = world.store.get(sid, dt)
    return RollupCursor.of(None if item is None else item.progress)


def assert_agrees(world: World, spec: RollupSpec, dt: str, want: Totals) -> None:
    """The state is `want`, what an engine computes, at the date's current publication; the
    rollup's table serves it, and the check passes."""
    assert state(world, spec, dt) == served_totals(world, dt) == want
    current = world.current(dt)
    at = cursor(world, spec, dt)
    assert (at.upto, at.seq, at.pending) == (current.upper, current.seq, None)
    rows = read_partition(world.target, rollup_table_name(world.config, spec), dt)
    table = {f'["{r["user_id"]}"]': (r["n"], r["s"], r["top"], r["low"]) for r in rows.to_pylist()}
    assert table == want
    partition = world.target.partition(rollup_table_name(world.config, spec), dt)
    assert partition is not None
    assert partition.seq == served_position(current.upper, current.seq)
    outcomes = checks.run_all(world.config, world.store, world.objects, world.target, full=True)
    (outcome,) = outcomes
    assert outcome.passed and "equal a full recomputation" in outcome.summary, outcome


def test_under_latest_a_key_moving_to_another_group_leaves_the_first_and_an_empty_one_goes(
    world: World, tmp_path: Path
) -> None:
    world.config = replace(world.config, dedupe=DedupeSettings(LATEST, "amount", DATE))
    spec = per_user(world)
    world.config = replace(world.config, rollups=(spec,))
    rolls = runner(world, spec, tmp_path)
    commit_keyed(world, DT, "one", ["a", "b", "c"], ["u0", "u0", "u1"], [1.0, 2.0, 3.0])
    assert rolls.run([DT])[0].outcome == "up to date"  # nothing published: nothing to count
    assert world.publish().ok
    assert due_dates(world.store, TABLE, [spec], served=True) == [DT]
    assert rolls.run([DT])[0].outcome == "rolled up"
    assert_agrees(world, spec, DT, {'["u0"]': (2, 3.0, 2.0, 1.0), '["u1"]': (1, 3.0, 3.0, 3.0)})
    assert due_dates(world.store, TABLE, [spec], served=True) == []

    # a and c come again, greater: they leave u0 and u1 for u2; u1 has no row left.
    commit_keyed(world, DT, "two", ["a", "c"], ["u2", "u2"], [9.0, 10.0])
    assert rolls.run([DT])[0].outcome == "up to date"  # committed, not published
    assert world.publish().ok
    rolls.run([DT])
    assert_agrees(world, spec, DT, {'["u0"]': (1, 2.0, 2.0, 2.0), '["u2"]': (2, 19.0, 10.0, 9.0)})

    # The switch to merged objects is a publication too: recomputed, the same.
    world.merge()
    world.close()
    assert world.publish().switched_now
    assert due_dates(world.store, TABLE, [spec], served=True) == [DT]
    rolls.run([DT])
    assert_agrees(world, spec, DT, {'["u0"]': (1, 2.0, 2.0, 2.0), '["u2"]': (2, 19.0, 10.0, 9.0)})


@pytest.mark.parametrize("mode", [FIRST, LATEST])
def test_a_replacement_takes_the_earlier_contents_rows_out_of_every_date_it_touched(
    world: World, tmp_path: Path, mode: str
) -> None:
    order_by = "amount" if mode == LATEST else None
    dedupe = DedupeSettings(mode, order_by, DATE)
    world.config = replace(world.config, dedupe=dedupe, on_change="replace")
    spec = per_user(world)
    world.config = replace(world.config, rollups=(spec,))
    rolls = runner(world, spec, tmp_path)
    old = (("f.jsonl", 3),)
    commit_keyed(world, DT, "old", ["x", "y", "z"], ["u0", "u0", "u1"], [1.0, 2.0, 4.0], old)
    commit_keyed(world, DT, "other", ["q"], ["u0"], [8.0])
    assert world.publish().ok
    rolls.run([DT])
    assert_agrees(world, spec, DT, {'["u0"]': (3, 11.0, 8.0, 1.0), '["u1"]': (1, 4.0, 4.0, 4.0)})

    # f.jsonl rewritten: y and w, on the next day; x, y and z leave DT.
    commit_replacement(world, content(world, D2, "new", ["y", "w"], ["u1", "u2"]), DT)
    assert [o.ok for o in world.publisher().publish([DT, D2])] == [True, True]
    assert due_dates(world.store, TABLE, [spec], served=True) == [DT, D2]
    assert [o.outcome for o in rolls.run([DT, D2])] == ["rolled up", "rolled up"]
    assert_agrees(world, spec, DT, {'["u0"]': (1, 8.0, 8.0, 8.0)})
    assert_agrees(world, spec, D2, {'["u1"]': (1, 1.0, 1.0, 1.0), '["u2"]': (1, 1.0, 1.0, 1.0)})
