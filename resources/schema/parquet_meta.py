"""The schema version a Parquet object was written with, in its key-value metadata.

Every small object and every merged object carries it, so a reader that opens the object alone
knows which version's columns it holds; an object written before versions existed has none and
is version 1.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEMA_VERSION_KEY = b"leasehold.schema_version"


def version_metadata(version: int) -> dict[bytes, bytes]:
    """The key-value metadata that records `version`."""
    return {SCHEMA_VERSION_KEY: str(int(version)).encode()}


def read_version(schema_or_metadata: Any) -> int:
    """The version recorded in a pyarrow schema (or its `metadata` mapping); 1 when absent."""
    metadata: Mapping[bytes, bytes] | None = getattr(
        schema_or_metadata, "metadata", schema_or_metadata
    )
    raw = (metadata or {}).get(SCHEMA_VERSION_KEY)
    return int(raw) if raw else 1
