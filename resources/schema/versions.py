"""Schema versions: version n+1 is version n plus columns, never anything else.

A stream's first version is the `schema` of streams.yaml. A version after it is recorded when a
run finds fields the latest version does not hold (`schema_evolution: add`, or `rescue`'s
`_rescued` column) or when streams.yaml declares a column the store does not hold yet. The store
writes versions with a condition on the slot being empty (`SchemaRegistry`), so writers racing
for the same version number are ordered: the loser reads again and `next_version` decides anew,
on top of the winner's columns. Asking for columns some version already holds (a retry of a run
that died after recording its version) returns that version: recording is idempotent.

A column keeps the type of the version that added it; a request for a held name with another
type changes nothing (`conflicts` names it: its values are quarantined or rescued by the reader).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.schema.columns import ColumnSpec


@dataclass(frozen=True)
class SchemaOrigin:
    """Where a version's new columns were first seen: a work unit's object (and the line of its
    first record holding one), or `streams.yaml`."""

    unit: str | None = None
    object_key: str | None = None
    line: int | None = None
    config: bool = False

    def describe(self) -> str:
        if self.config:
            return "streams.yaml"
        where = self.object_key or "?"
        if self.line is not None:
            where += f" line {self.line}"
        return f"{where} (work unit {self.unit})" if self.unit else where

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "object": self.object_key,
            "line": self.line,
            "config": self.config,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SchemaOrigin:
        return cls(raw.get("unit"), raw.get("object"), raw.get("line"), bool(raw.get("config")))


CONFIG_ORIGIN = SchemaOrigin(config=True)


@dataclass(frozen=True)
class SchemaVersion:
    """One version of a stream's schema: every column it holds, in order, and what it added."""

    version: int
    columns: tuple[ColumnSpec, ...]
    added: tuple[str, ...]
    origin: SchemaOrigin = field(default_factory=SchemaOrigin)
    created_at_ms: int = 0

    @property
    def names(self) -> list[str]:
        return [c.name for c in self.columns]

    def holds(self, columns: Sequence[ColumnSpec]) -> bool:
        """Every one of `columns` is a column of this version (by name)."""
        names = set(self.names)
        return all(c.name in names for c in columns)

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "columns": [[c.name, c.type] for c in self.columns],
            "added": list(self.added),
            "origin": self.origin.to_json(),
            "created_at_ms": self.created_at_ms,
        }

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> SchemaVersion:
        return cls(
            version=int(raw["version"]),
            columns=tuple(ColumnSpec(str(n), str(t)) for n, t in raw["columns"]),
            added=tuple(raw.get("added", ())),
            origin=SchemaOrigin.from_json(raw.get("origin") or {}),
            created_at_ms=int(raw.get("created_at_ms", 0)),
        )


def version_holding(history: Sequence[SchemaVersion], columns: Sequence[ColumnSpec]) -> int | None:
    """The first version holding every one of `columns` by name, or None."""
    for version in history:
        if version.holds(columns):
            return version.version
    return None


def conflicts(latest: SchemaVersion, columns: Sequence[ColumnSpec]) -> list[tuple[str, str, str]]:
    """(name, type held, type asked for) of each of `columns` the version holds with another
    type: never retyped, so the values that asked are quarantined or rescued."""
    held = {c.name: c.type for c in latest.columns}
    return [(c.name, held[c.name], c.type) for c in columns if held.get(c.name, c.type) != c.type]


def next_version(
    history: Sequence[SchemaVersion],
    columns: Sequence[ColumnSpec],
    origin: SchemaOrigin,
    now_ms: int,
) -> SchemaVersion | None:
    """The version to write so that the schema holds `columns`: None when a version holds them
    already (`version_holding`), else the latest plus the missing ones, in the order asked (the
    first version, when `history` is empty, is `columns` themselves)."""
    if not history:
        names = [c.name for c in columns]
        if len(set(names)) != len(names):
            raise ValueError(f"a column is named twice in {names}")
        return SchemaVersion(1, tuple(columns), tuple(names), origin, now_ms)
    if version_holding(history, columns) is not None:
        return None
    latest = history[-1]
    held = set(latest.names)
    new: list[ColumnSpec] = []
    for c in columns:
        if c.name not in held:
            held.add(c.name)
            new.append(c)
    return SchemaVersion(
        latest.version + 1,
        latest.columns + tuple(new),
        tuple(c.name for c in new),
        origin,
        now_ms,
    )
