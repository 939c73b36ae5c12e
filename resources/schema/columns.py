"""A table column as a schema declares it, and the types a column may have (Spark's names)."""

from __future__ import annotations

from dataclasses import dataclass

TYPES = ("string", "long", "int", "double", "boolean", "timestamp", "date")


@dataclass(frozen=True)
class ColumnSpec:
    """A column of a stream's schema: its name and streams.yaml type."""

    name: str
    type: str
