"""Which source objects may go now: the pure half of source clean-up.

A source object may be archived or deleted only when its work unit is COMPLETED — not a dead
letter, never one still CLOSED, ASSIGNED or UNASSIGNED — its rows are in a published version
of the table (`resources/cleanup/published.py` decides; a unit that committed no rows is
trivially published), and `source_cleanup.after` has passed since the unit completed.

Units are taken in completion order (their `partitionPriority`) after a cursor. The cursor may
move past a unit only once all its objects are done, and past a priority only once every unit
of that priority is (units completing in the same millisecond share one): a crash leaves it
before any unit not finished, and the next pass redoes that unit (objects already gone count as
done). A unit whose rows are not published yet stops the plan there: later units wait, so the
cursor never passes an object that may still be needed. A pass is bounded by objects, in
whole units (a unit is never split, so a pass removes at most the bound plus one unit, and
a priority group is finished once begun).

Pure: no store, no object store. `plan_cleanup` is given the items and a verdict function.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from resources.coordination.items import LeaseItem, PartitionStatus
from resources.ingestion.work_units import UnitObject, unit_of


class Publication(enum.Enum):
    """Where a unit's rows are, as far as clean-up is concerned."""

    PUBLISHED = "published"
    """Every row it committed is in the table's current publication (or it committed none)."""
    WAITING = "waiting"
    """Some rows are not published yet: the unit, and every later one, waits."""
    NEVER = "never"
    """Its rows can never be shown published (no commit record): kept for good, passed over."""


@dataclass(frozen=True)
class Verdict:
    """A unit's `Publication`, and why, in words for `--dry-run` and the logs."""

    publication: Publication
    why: str


@dataclass(frozen=True)
class Step:
    """One unit of a plan: its objects to remove (none for a unit passed over), why, and the
    cursor to save once it is done (None: leave the cursor where it is)."""

    unit: str
    priority: str
    objects: tuple[UnitObject, ...]
    why: str
    cursor: str | None = None

    @property
    def removes(self) -> bool:
        return bool(self.objects)


@dataclass
class CleanupPlan:
    """What one page of completed units allows, in order."""

    steps: list[Step] = field(default_factory=list)
    waiting: tuple[str, str] | None = None
    """(unit, why) of the unit that stopped the plan: its rows are not published yet."""
    full: bool = False
    """The object bound was reached: the pass stops here."""

    @property
    def objects(self) -> int:
        return sum(len(s.objects) for s in self.steps)

    @property
    def stopped(self) -> bool:
        return self.waiting is not None or self.full


def completed_ms(item: LeaseItem) -> int:
    """When a COMPLETED item completed: its priority's milliseconds (`priority_at`)."""
    return int(item.priority.split(".", 1)[0])


def plan_cleanup(
    items: Sequence[LeaseItem],
    verdict_of: Callable[[LeaseItem], Verdict],
    *,
    cutoff_ms: int,
    limit: int,
) -> CleanupPlan:
    """The steps `items` (completed units after the cursor, in priority order, whole priority
    groups, each as read strongly consistent) allow: each unit due — COMPLETED, no dead letter,
    completed before `cutoff_ms` (now minus `after`), rows published — with its objects, until
    a unit whose rows wait (`waiting`) or `limit` objects are planned (`full`, at the end of a
    priority group). A dead letter, a unit no longer COMPLETED (a dead letter re-driven since:
    it completes again later, with a new priority) and one whose rows can never be shown
    published are passed over: steps without objects. `verdict_of` is asked only of units
    otherwise due. Pure; raises what `verdict_of` raises."""
    plan = CleanupPlan()
    stop = len(items)
    for i, item in enumerate(items):
        if plan.objects >= limit and item.priority != items[i - 1].priority:
            plan.full, stop = True, i
            break
        step, waiting = _step(item, verdict_of, cutoff_ms)
        if waiting is not None:
            plan.waiting, stop = (item.partition_key, waiting), i
            break
        assert step is not None
        plan.steps.append(step)
    blocked = {item.priority for item in items[stop:]}
    for i, step in enumerate(plan.steps):
        last_of_group = i + 1 == len(plan.steps) or plan.steps[i + 1].priority != step.priority
        if last_of_group and step.priority not in blocked:
            plan.steps[i] = Step(step.unit, step.priority, step.objects, step.why, step.priority)
    return plan


def _step(
    item: LeaseItem, verdict_of: Callable[[LeaseItem], Verdict], cutoff_ms: int
) -> tuple[Step | None, str | None]:
    """The unit's step, or why it waits."""
    key, priority = item.partition_key, item.priority
    if item.status is not PartitionStatus.COMPLETED:
        return Step(key, priority, (), f"{item.status.value}, no longer completed: kept"), None
    if item.dead_letter_reason is not None:
        return Step(key, priority, (), "dead letter: never cleaned up"), None
    if completed_ms(item) >= cutoff_ms:
        return None, "completed too recently (source_cleanup.after has not passed)"
    verdict = verdict_of(item)
    if verdict.publication is Publication.WAITING:
        return None, verdict.why
    if verdict.publication is Publication.NEVER:
        return Step(key, priority, (), f"kept: {verdict.why}"), None
    return Step(key, priority, unit_of(item).objects, verdict.why), None
