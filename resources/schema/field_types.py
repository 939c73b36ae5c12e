"""The column type of a field a stream's schema does not hold yet, from its values.

JSON: the value's own type — a boolean is `boolean`, an integer `long` (one beyond a long makes
it `double`), any other number `double`, a string `string`, a nested object or array `string`
(kept as its JSON text, as Spark's reader gives it); integers and other numbers together widen to
`double`, anything else mixed is `string`; a field only ever null is `string`. CSV holds text
only: a new CSV column is `string` (Auto Loader's choice too: a guess from digits would turn a
later `N/A` into a quarantined record).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

LONG_MAX = 2**63 - 1


def json_value_type(value: Any) -> str | None:
    """The type one JSON value asks for; None for null (it says nothing)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "long" if -LONG_MAX - 1 <= value <= LONG_MAX else "double"
    if isinstance(value, float):
        return "double"
    return "string"  # str, or nested (dict, list): JSON text


def widen(a: str | None, b: str | None) -> str | None:
    """The type holding values of both types (None: no value seen yet)."""
    if a is None or a == b:
        return b
    if b is None:
        return a
    if {a, b} == {"long", "double"}:
        return "double"
    return "string"


def field_type(values: Iterable[Any]) -> str:
    """The type of a new JSON field holding `values` (every value seen, not a sample)."""
    typ: str | None = None
    for value in values:
        typ = widen(typ, json_value_type(value))
        if typ == "string":
            break
    return typ or "string"
