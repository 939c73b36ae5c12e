"""Batches of a table partition's committed small objects, and the order their results commit.

A batch is a range of the partition's small-object ids, `(after, upto]`: the ids are assigned
inside the visibility commit, so which rows a range holds, and the order of ranges, are given.
Its transaction id is `upto`. Spark may compute many batches' partial results at once; the
state takes them strictly in txid order (`StrictOrder`), and when one batch's commit fails, the
batches after it that were computed meanwhile are dropped and computed again after it: they
were computed to follow a state that did not happen (Storm's rule, so nothing is skipped and
nothing is applied out of order).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from typing import Generic, TypeVar

R = TypeVar("R")


@dataclass(frozen=True, order=True)
class Batch:
    """Small objects `after` < id <= `upto` of table partition `dt`."""

    dt: str
    after: int
    upto: int

    @property
    def txid(self) -> int:
        return self.upto


def plan_batches(
    dt: str, committed_ids: Sequence[int], after: int, max_objects: int
) -> list[Batch]:
    """The ids above `after` (the last txid the state holds for `dt`), in batches of at most
    `max_objects` ids, in order. Each batch ends on a committed id, so its txid names one."""
    if max_objects < 1:
        raise ValueError(f"max_objects must be positive, got {max_objects}")
    ids = sorted(i for i in committed_ids if i > after)
    batches, start = [], after
    for n in range(max_objects - 1, len(ids), max_objects):
        batches.append(Batch(dt, start, ids[n]))
        start = ids[n]
    if ids and start != ids[-1]:
        batches.append(Batch(dt, start, ids[-1]))
    return batches


class StrictOrder(Generic[R]):
    """The batches of one table partition, planned in order, whose results arrive in any order.

    A computation starts under the current `generation` and hands it back with its result.
    `computed` returns what may commit now: the next batch's result and every result after it
    that is already there, in order. `failed` is told that a batch's commit failed: it and every
    batch after it must be computed again, returned in order; their results, and those of
    computations of them still in flight (an older generation), are dropped, and nothing after
    them commits before they do."""

    def __init__(self, batches: Sequence[Batch]) -> None:
        self._order = sorted(batches)
        if any(a.dt != b.dt or a.upto != b.after for a, b in pairwise(self._order)):
            raise ValueError(f"batches are not one contiguous chain of one partition: {batches}")
        self._position = {b: i for i, b in enumerate(self._order)}
        self._next = 0  # index of the next batch to commit
        self._results: dict[int, R] = {}
        self.generation = 0
        self._valid_from = [0] * len(self._order)  # the oldest generation a result may have

    def computed(self, batch: Batch, result: R, generation: int) -> list[tuple[Batch, R]]:
        index = self._index(batch)
        if index < self._next or generation < self._valid_from[index]:
            return []  # committed already, or abandoned: never applied twice or out of turn
        self._results[index] = result
        ready: list[tuple[Batch, R]] = []
        while self._next + len(ready) in self._results:
            n = self._next + len(ready)
            ready.append((self._order[n], self._results.pop(n)))
        self._next += len(ready)
        return ready

    def failed(self, batch: Batch) -> list[Batch]:
        """`batch`'s commit failed (it was handed out by `computed` and not committed): compute
        it and everything after it again, under the new generation."""
        index = self._index(batch)
        self.generation += 1
        self._next = min(self._next, index)
        for n in range(index, len(self._order)):
            self._valid_from[n] = self.generation
            self._results.pop(n, None)
        return self._order[index:]

    @property
    def done(self) -> bool:
        return self._next == len(self._order)

    def _index(self, batch: Batch) -> int:
        if batch not in self._position:
            raise ValueError(f"{batch} is not one of the planned batches")
        return self._position[batch]
