"""What a rollup computes per key, and how partial results combine.

A batch's rows are aggregated per key in parallel (Spark) into partial results; the state
holds the running result. Combining must be associative and have an identity, so that a key's
result is the same however its rows were split into batches: count and sum add (identity 0),
min and max keep the extreme (identity: no value yet). Count distinct is left out: exact only
with the set of values kept per key, which is not a small item.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

from resources.errors import ConfigError

Number = int | float
Value = tuple[Number | None, ...]
"""One result per aggregate of the rollup, in its order; None: min or max of no row yet."""


class Function(str, Enum):
    """An aggregate function a rollup may use."""

    COUNT = "count"
    SUM = "sum"
    MIN = "min"
    MAX = "max"


@dataclass(frozen=True)
class Aggregate:
    """`function` of `column` (none for count: it counts rows), named `name` in the table."""

    name: str
    function: Function
    column: str | None = None

    def __post_init__(self) -> None:
        if (self.column is None) != (self.function is Function.COUNT):
            needs = "takes no column" if self.function is Function.COUNT else "needs a column"
            raise ConfigError(self.name, f"{self.function.value} {needs}")


def identity(aggregates: Sequence[Aggregate]) -> Value:
    """The result of no rows: what combining with changes nothing."""
    return tuple(0 if a.function in (Function.COUNT, Function.SUM) else None for a in aggregates)


def combine(aggregates: Sequence[Aggregate], left: Value, right: Value) -> Value:
    """The result of the rows of both."""
    if not len(aggregates) == len(left) == len(right):
        raise ValueError(f"{len(aggregates)} aggregates, values of {len(left)} and {len(right)}")
    return tuple(
        _combine(a.function, x, y) for a, x, y in zip(aggregates, left, right, strict=True)
    )


def of_rows(aggregates: Sequence[Aggregate], rows: Sequence[dict[str, Number]]) -> Value:
    """The result of `rows` (each a column -> value mapping): the reference a batch's partial
    result and a from-scratch recomputation must equal."""
    result = identity(aggregates)
    for row in rows:
        one = tuple(1 if a.function is Function.COUNT else row[a.column or ""] for a in aggregates)
        result = combine(aggregates, result, one)
    return result


def _combine(function: Function, x: Number | None, y: Number | None) -> Number | None:
    if function in (Function.COUNT, Function.SUM):
        return (x or 0) + (y or 0)
    if x is None or y is None:
        return y if x is None else x
    return min(x, y) if function is Function.MIN else max(x, y)
