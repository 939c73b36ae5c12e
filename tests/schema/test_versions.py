"""The schema version rule and the field types of new fields, without a store."""

from __future__ import annotations

import pytest

from resources.schema.columns import ColumnSpec
from resources.schema.field_types import field_type, widen
from resources.schema.versions import (
    CONFIG_ORIGIN,
    SchemaOrigin,
    SchemaVersion,
    conflicts,
    next_version,
    version_holding,
)

V1 = [ColumnSpec("id", "string"), ColumnSpec("ts", "timestamp")]


def test_first_version_is_the_columns_asked_for() -> None:
    v1 = next_version([], V1, CONFIG_ORIGIN, 5)
    assert v1 == SchemaVersion(1, tuple(V1), ("id", "ts"), CONFIG_ORIGIN, 5)


def test_next_version_appends_only_what_is_missing_in_the_order_asked() -> None:
    v1 = next_version([], V1, CONFIG_ORIGIN, 0)
    origin = SchemaOrigin("unit-1", "a.jsonl", 7)
    asked = [ColumnSpec("zeta", "long"), ColumnSpec("id", "string"), ColumnSpec("alpha", "double")]
    v2 = next_version([v1], asked, origin, 9)
    assert v2 is not None
    assert v2.version == 2 and v2.added == ("zeta", "alpha") and v2.origin == origin
    assert v2.names == ["id", "ts", "zeta", "alpha"]


def test_asking_again_for_held_columns_returns_nothing_to_write() -> None:
    v1 = next_version([], V1, CONFIG_ORIGIN, 0)
    v2 = next_version([v1], [ColumnSpec("x", "long")], SchemaOrigin(), 0)
    assert next_version([v1, v2], [ColumnSpec("x", "long")], SchemaOrigin(), 0) is None
    assert version_holding([v1, v2], [ColumnSpec("x", "long")]) == 2
    assert version_holding([v1, v2], [ColumnSpec("id", "string")]) == 1


def test_a_held_name_with_another_type_is_a_conflict_never_a_retype() -> None:
    v1 = next_version([], V1, CONFIG_ORIGIN, 0)
    assert next_version([v1], [ColumnSpec("id", "long")], SchemaOrigin(), 0) is None
    assert conflicts(v1, [ColumnSpec("id", "long")]) == [("id", "string", "long")]


def test_version_round_trips_through_json() -> None:
    v = SchemaVersion(3, tuple(V1), ("ts",), SchemaOrigin("u", "k", 2), 11)
    assert SchemaVersion.from_json(v.to_json()) == v


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([1, 2], "long"),
        ([1, 2.5], "double"),
        ([2**63], "double"),
        ([True, None], "boolean"),
        ([True, 1], "string"),
        (["a", 1], "string"),
        ([{"os": "ios"}], "string"),
        ([[1, 2]], "string"),
        ([None], "string"),
        (["2026-01-01T00:00:00Z"], "string"),
    ],
)
def test_field_type_is_what_the_values_are(values: list[object], expected: str) -> None:
    assert field_type(values) == expected


def test_widen_is_symmetric() -> None:
    types = [None, "long", "double", "string", "boolean"]
    for a in types:
        for b in types:
            assert widen(a, b) == widen(b, a)
