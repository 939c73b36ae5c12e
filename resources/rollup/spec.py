"""A rollup as `streams.yaml` declares it, validated against the stream's schema on load.

    rollups:
      per_user:                       # the rollup's name: its table is <stream>_<name>
        group_by: [user_id]           # besides the table partition's date, always a key
        aggregates: {events: count, amount: sum(amount), largest: max(amount)}
        mode: opaque                  # or transactional (the default)

Transactional is right when a batch's rows never change between attempts; opaque when a
replay may see other rows (`state`). Aggregated columns must be numeric: the state holds
numbers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from resources.errors import ConfigError
from resources.rollup.aggregates import Aggregate, Function
from resources.rollup.state import Mode

NUMERIC = ("long", "int", "double")
NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
CALL = re.compile(r"(count|sum|min|max)\s*(?:\(\s*([A-Za-z_][A-Za-z0-9_]*)?\s*\))?")


@dataclass(frozen=True)
class RollupSpec:
    """A rollup as streams.yaml declares it: its name, group_by columns, aggregates and mode."""

    name: str
    group_by: tuple[str, ...]
    aggregates: tuple[Aggregate, ...]
    mode: Mode = Mode.TRANSACTIONAL


def parse_rollups(raw: Any, schema: Mapping[str, str]) -> tuple[RollupSpec, ...]:
    """Every rollup of `raw` (the stream's `rollups` mapping, or None), or a `ConfigError`
    whose field is the path under the stream (`rollups.per_user.group_by`)."""
    if raw is None:
        return ()
    if not isinstance(raw, dict):
        raise ConfigError("rollups", "must map rollup names to their declarations")
    return tuple(_rollup(str(name), body, schema) for name, body in raw.items())


def _rollup(name: str, raw: Any, schema: Mapping[str, str]) -> RollupSpec:
    where = f"rollups.{name}"
    if not NAME.fullmatch(name):
        raise ConfigError(where, "letters, digits and '_', not starting with a digit")
    if not isinstance(raw, dict):
        raise ConfigError(where, "must be a mapping with group_by, aggregates and mode")
    known = ("group_by", "aggregates", "mode")
    for key in raw:
        if key not in known:
            raise ConfigError(f"{where}.{key}", f"unknown field; known: {', '.join(known)}")
    group_by = raw.get("group_by") or []
    if not isinstance(group_by, list) or not all(isinstance(c, str) for c in group_by):
        raise ConfigError(f"{where}.group_by", "must be a list of schema columns")
    for column in group_by:
        if column not in schema:
            raise ConfigError(f"{where}.group_by", f"{column!r} is not a schema column")
    if len(set(group_by)) != len(group_by):
        raise ConfigError(f"{where}.group_by", "names a column twice")
    declared = raw.get("aggregates")
    if not isinstance(declared, dict) or not declared:
        raise ConfigError(f"{where}.aggregates", "must map result names to count, sum(column)…")
    aggregates = tuple(
        _aggregate(f"{where}.aggregates.{out}", str(out), spec, schema, group_by)
        for out, spec in declared.items()
    )
    mode = raw.get("mode", Mode.TRANSACTIONAL.value)
    if mode not in [m.value for m in Mode]:
        raise ConfigError(f"{where}.mode", f"{mode!r} is not one of transactional, opaque")
    return RollupSpec(name, tuple(group_by), aggregates, Mode(mode))


def _aggregate(
    where: str, out: str, spec: Any, schema: Mapping[str, str], group_by: list[str]
) -> Aggregate:
    if not NAME.fullmatch(out):
        raise ConfigError(where, "a result name: letters, digits and '_'")
    if out in group_by:
        raise ConfigError(where, "is a group_by column's name too")
    call = CALL.fullmatch(str(spec).strip())
    if call is None:
        raise ConfigError(where, f"{spec!r} is not count, sum(column), min(column) or max(column)")
    function, column = Function(call.group(1)), call.group(2)
    if column is not None:
        if column not in schema:
            raise ConfigError(where, f"{column!r} is not a schema column")
        if schema[column] not in NUMERIC:
            raise ConfigError(where, f"{column!r} is {schema[column]}, not {', '.join(NUMERIC)}")
    try:
        return Aggregate(out, function, column)
    except ConfigError as exc:
        raise ConfigError(where, exc.reason) from None
