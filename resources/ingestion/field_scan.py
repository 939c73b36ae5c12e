"""What an object holds outside its stream's schema (`ObjectFields`: each field's records,
type and first line, as `record_parser` finds them while it parses), and how an Arrow type
read from JSON names its `streams.yaml` type (`arrow_json_type`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa


@dataclass
class FieldSeen:
    """A field outside the schema, as one object holds it."""

    records: int = 0
    """Records holding a non-null value for it."""
    type: str | None = None
    """The type its values ask for (`resources.schema.field_types`)."""
    first_line: int = 0
    """The object's line of the first record holding it (1-based)."""
    example: Any = None


@dataclass
class ObjectFields:
    """The fields outside the schema one object (or chunk) holds, by name."""

    fields: dict[str, FieldSeen] = field(default_factory=dict)
    records_with_unknown: int = 0


def arrow_json_type(t: pa.DataType) -> str | None:
    """The column type of a field pyarrow inferred as `t` (its JSON values' kind)."""
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_integer(t):
        return "long"
    if pa.types.is_floating(t):
        return "double"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_timestamp(t):
        return "string"  # a timestamp here is a JSON string pyarrow recognised
    if pa.types.is_struct(t) or pa.types.is_list(t) or pa.types.is_large_list(t):
        return "string"  # nested: kept as its JSON text
    return None
