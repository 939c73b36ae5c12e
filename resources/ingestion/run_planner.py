"""Which range runs to request: new partitions and work left behind, many partitions per run.

A Dagster run costs seconds to launch and one SparkSession, so partitions are requested in
ranges (docs/architecture.md). A range is **positional** — whatever keys lie between its two ends
in the dynamic partitions' insertion order — and carries its expected count, so the asset can
refuse a range that changed under it. New partitions are added together and so are contiguous.
Work left behind (a crashed run's expired leases, handed-back or never-taken partitions,
reopened CLOSED items) is scattered: it is covered by windows over the current insertion order
that may include partitions already complete — each costs the asset one refused acquisition
(milliseconds) and no Dagster event — but never a partition without a lease item (added by
hand, with no source object): that would fail every range that crossed it.

Pure: no Dagster, no store. The sensor gives it the partition order and what is due.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from resources.errors import ConfigError


@dataclass(frozen=True)
class RunPlan:
    """One range run to request: its first and last partition, how many it covers, its run key."""

    first: str
    last: str
    count: int
    run_key: str
    retry: bool = False
    """Work left behind (not partitions added for this run)."""


def _checked(max_partitions_per_run: int) -> int:
    if max_partitions_per_run < 1:
        raise ConfigError(
            "max_partitions_per_run", f"must be at least 1 (got {max_partitions_per_run})"
        )
    return max_partitions_per_run


def plan_runs(
    stream: str, partition_keys: Sequence[str], max_partitions_per_run: int
) -> list[RunPlan]:
    """New partitions, added together in this order: contiguous ranges of at most
    `max_partitions_per_run` keys."""
    size = _checked(max_partitions_per_run)
    plans = []
    for start in range(0, len(partition_keys), size):
        chunk = partition_keys[start : start + size]
        plans.append(
            RunPlan(
                chunk[0], chunk[-1], len(chunk), f"{stream}:{chunk[0]}:{chunk[-1]}:{len(chunk)}"
            )
        )
    return plans


def plan_retry_runs(
    stream: str,
    order: Sequence[str],
    due: Iterable[str],
    *,
    max_partitions_per_run: int,
    max_runs: int,
    unleased: Collection[str] = (),
    fingerprint: str = "",
) -> list[RunPlan]:
    """Cover the partitions in `due` with as few ranges over `order` (the dynamic partitions
    in insertion order) as the run size allows.

    Greedy from the first due position: a window spans at most `max_partitions_per_run`
    positions and ends at its last due partition, so it never carries complete partitions
    past the work. A window never crosses a key in `unleased`. At most `max_runs` plans: the
    rest is due again at the next tick. `fingerprint` (what the due items looked like) goes
    into the run keys, so the same work is not requested twice while nothing changed.
    """
    size = _checked(max_partitions_per_run)
    position = {key: i for i, key in enumerate(order)}
    due_positions = sorted({position[k] for k in due if k in position})
    blocked = sorted(position[k] for k in unleased if k in position)
    plans: list[RunPlan] = []
    i = 0
    while i < len(due_positions) and len(plans) < max_runs:
        start = due_positions[i]
        # The first blocked position after `start` bounds this window.
        stop = start + size
        for b in blocked:
            if b > start:
                stop = min(stop, b)
                break
        end = start
        while i < len(due_positions) and due_positions[i] < stop:
            end = due_positions[i]
            i += 1
        first, last, count = order[start], order[end], end - start + 1
        digest = hashlib.sha1(f"{fingerprint}|{first}|{last}|{count}".encode()).hexdigest()[:16]
        plans.append(RunPlan(first, last, count, f"{stream}:retry:{digest}", retry=True))
    return plans
