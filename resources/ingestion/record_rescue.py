"""`schema_evolution: rescue` for `record_parser`: each line as today's rescue read
(`read_plan.rescue_parse`) takes it, in plain Python.

That read parses a line into a map of name -> variant (an array line: one per element, an
array holding anything but objects being one malformed record), takes each declared column's
value cast from its variant (`try_variant_get`) and keeps in `_rescued`, as JSON text, the
fields the schema does not hold and the values that do not cast. A variant keeps a JSON number
as an integer, else as a decimal when written without exponent in at most 38 digits (its
trailing zeros dropped), else as a double; `_rescued` and a string column show them so (a
double as Java prints it), a nested value as compact JSON with its object's names sorted.
Every line but an empty or all-spaces one is a record; a line that is not valid UTF-8 is
rejected as such whatever it holds.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal
from typing import Any

import numpy as np

from resources.ingestion.record_lines import (
    INVALID_UTF8,
    MALFORMED,
    Lines,
    Nested,
    Number,
    Piece,
    parsed_records,
    typed_table,
)
from resources.ingestion.record_values import (
    CASTS,
    INT_MAX,
    INT_MIN,
    LONG_MAX,
    LONG_MIN,
)
from resources.schema.modes import RESCUED
from resources.streams import StreamConfig


def _first_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's names and values, the first of a repeated name kept."""
    out: dict[str, Any] = {}
    for name, value in pairs:
        out.setdefault(name, value)
    return out


_INTEGER = re.compile(r"-?[0-9]+").fullmatch
_PLAIN_DECIMAL = re.compile(r"-?[0-9]*\.?[0-9]*").fullmatch
MAX_DIGITS = 38
_NESTED = json.JSONDecoder(
    parse_float=Number, parse_int=Number, parse_constant=Number, object_pairs_hook=_first_pairs
)


class Variant:
    """A JSON value as Spark's variant holds it: `kind` integer, decimal, double, string,
    boolean, object or array; `value` the Python value (objects: name -> Variant in source
    order, arrays: a list)."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: str, value: Any) -> None:
        self.kind, self.value = kind, value


def variant(value: Any) -> Variant | None:
    """The variant of a value `record_lines` parsed (None: JSON null)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return Variant("boolean", value)
    if isinstance(value, Number):
        return _number(value)
    if isinstance(value, Nested):
        return _nested(_NESTED.decode(value))
    return Variant("string", value)


def _nested(value: Any) -> Variant | None:
    if isinstance(value, dict):
        return Variant("object", {k: _nested(v) for k, v in value.items()})
    if isinstance(value, list):
        return Variant("array", [_nested(v) for v in value])
    return variant(value)


def _number(text: str) -> Variant:
    if _INTEGER(text):
        number = int(text)
        if LONG_MIN <= number <= LONG_MAX:
            return Variant("integer", number)
        if len(text.lstrip("-")) <= MAX_DIGITS:
            return Variant("decimal", Decimal(text))
    elif _PLAIN_DECIMAL(text):
        exact = Decimal(text)
        # A finite Decimal's exponent is an int (typeshed allows the 'n'/'N'/'F' of NaN, Infinity).
        if len(exact.as_tuple().digits) <= MAX_DIGITS and -exact.as_tuple().exponent <= MAX_DIGITS:  # type: ignore[operator]
            return Variant("decimal", exact)
    return Variant("double", float(text.replace("Infinity", "inf")))


def java_double(x: float) -> str:
    """Java's `Double.toString` (shortest digits, as Python's repr finds them)."""
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    if x == 0:
        return "-0.0" if math.copysign(1, x) < 0 else "0.0"
    if 1e-3 <= abs(x) < 1e7:
        text = repr(x)
        return text if "e" not in text else format(Decimal(text), "f")
    sign, digits, exponent = Decimal(repr(x)).as_tuple()
    shown = "".join(map(str, digits)).rstrip("0") or "0"
    power = len(digits) + int(exponent) - 1
    return f"{'-' if sign else ''}{shown[0]}.{shown[1:] or '0'}E{power}"


def _plain(d: Decimal) -> str:
    """A decimal as the variant shows it: trailing zeros dropped, never an exponent."""
    text = format(d.normalize(), "f")
    return text


def variant_json(v: Variant | None) -> str:
    """`to_json` of a variant (a non-finite double as a JSON string, as Spark writes it)."""
    if v is None:
        return "null"
    if v.kind == "boolean":
        return "true" if v.value else "false"
    if v.kind == "integer":
        return str(v.value)
    if v.kind == "decimal":
        return _plain(v.value)
    if v.kind == "double":
        shown = java_double(v.value)
        return shown if math.isfinite(v.value) else json.dumps(shown)
    if v.kind == "string":
        return json.dumps(v.value, ensure_ascii=False)
    if v.kind == "array":
        return "[" + ",".join(variant_json(e) for e in v.value) + "]"
    return (
        "{"
        + ",".join(
            f"{json.dumps(k, ensure_ascii=False)}:{variant_json(v.value[k])}"
            for k in sorted(v.value)
        )
        + "}"
    )


def _numeric(v: Variant) -> Any:
    return float(v.value) if v.kind == "decimal" else v.value


def cast_variant(v: Variant, type_name: str) -> Any:
    """`try_variant_get(v, '$', type_name)`: the value, or None when it does not cast."""
    kind = v.kind
    if kind in ("object", "array"):
        return variant_json(v) if type_name == "string" else None
    if kind == "string":
        return CASTS[type_name](v.value)
    if type_name == "string":
        if kind == "double":
            return java_double(v.value)
        return variant_json(v)
    if kind == "boolean":
        if type_name in ("long", "int"):
            return int(v.value)
        return {"double": float(v.value), "boolean": v.value}.get(type_name)
    return _cast_number(v, type_name)


def _cast_number(v: Variant, type_name: str) -> Any:
    number = v.value
    if type_name == "double":
        return float(number)
    if type_name == "boolean":
        return number != 0
    if type_name in ("long", "int"):
        if isinstance(number, float) and not math.isfinite(number):
            return None
        whole = int(number)
        low, high = (LONG_MIN, LONG_MAX) if type_name == "long" else (INT_MIN, INT_MAX)
        return whole if low <= whole <= high else None
    if type_name == "timestamp":
        if isinstance(number, float) and not math.isfinite(number):
            return None
        micros = int(Decimal(number) * 1_000_000) if v.kind != "integer" else number * 1_000_000
        return micros if LONG_MIN <= micros <= LONG_MAX else None
    return None


def rescue_pieces(lines: Lines, config: StreamConfig) -> list[Piece]:
    """Every line's records as today's rescue read gives them (module docstring)."""
    specs = [(c.name, c.type) for c in config.columns if c.name != RESCUED]
    known = {name for name, _ in specs}
    names = config.column_names
    values: list[list[Any]] = [[] for _ in names]
    rows: list[int] = []
    piece = Piece(typed_table([[] for _ in names], config), np.zeros(0, np.int64))
    for i in range(lines.count):
        raw = lines.raw(i)
        if not raw.strip(b" "):
            continue
        text = ("\ufeff" if lines.bom and i == 0 else "") + lines.text(i)
        if not lines.line_valid(i):
            records = parsed_records(lines.text(i), first_wins=True)
            piece.bad.extend([(i, INVALID_UTF8, text)] * max(len(records or []), 1))
            continue
        records = parsed_records(raw.decode("utf-8"), first_wins=True)
        if not records:
            piece.bad.append((i, MALFORMED, text))
            continue
        for record in records:
            row = _rescued_row(record, specs, known)
            rows.append(i)
            for column, value in zip(values, [row.get(n) for n in names], strict=True):
                column.append(value)
    piece.table = typed_table(values, config)
    piece.line_index = np.array(rows, dtype=np.int64)
    return [piece]


def _rescued_row(
    record: dict[str, Any], specs: list[tuple[str, str]], known: set[str]
) -> dict[str, Any]:
    """A record's column values and its `_rescued` JSON (or None)."""
    row: dict[str, Any] = {}
    failed = set()
    for name, typ in specs:
        v = variant(record.get(name))
        row[name] = None if v is None else cast_variant(v, typ)
        if v is not None and row[name] is None:
            failed.add(name)
    kept = [
        (name, variant(value))
        for name, value in record.items()
        if (name not in known and value is not None) or name in failed
    ]
    if kept:
        row[RESCUED] = (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{variant_json(v)}" for k, v in kept)
            + "}"
        )
    return row
