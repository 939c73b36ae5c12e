"""The schema version a table object was written with, as its Parquet key-value metadata.

Every table object (a small object the reader writes, a merged object a merge writes) carries
`leasehold.schema_version`: the stream's schema version whose columns it was written with, an
integer as text. An object without the key was written before versions existed: version 1.
What reads it from a file (the merge, the checks) takes the number from here, so the key and
its encoding are written down once. The ledger keeps each small object's version beside it too
(`SmallObject.schema_version`): `leasehold table ls` shows that, reading no footer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from resources.errors import LeaseholdError

SCHEMA_VERSION_KEY = b"leasehold.schema_version"
"""The Parquet key-value metadata key holding an object's schema version (text digits)."""

FIRST_VERSION = 1


class SchemaVersionMetadataError(LeaseholdError, ValueError):
    """An object's `leasehold.schema_version` is not a version number (not written by us)."""


def version_metadata(version: int) -> dict[bytes, bytes]:
    """The key-value metadata saying an object holds `version`'s columns: merge it into the
    Arrow schema's metadata before writing (`schema.with_metadata({**old, **this})`).
    Raises `ValueError` for a version below 1 (versions count from 1)."""
    # Checked beyond the annotation (mypy calls it redundant): a version also comes from
    # files and run config.
    if isinstance(version, bool) or not isinstance(version, int) or version < FIRST_VERSION:  # type: ignore[redundant-expr]
        raise ValueError(f"a schema version is an integer from 1, not {version!r}")
    return {SCHEMA_VERSION_KEY: str(version).encode("ascii")}


def read_version(schema_or_metadata: Any) -> int:
    """The schema version an object was written with, from what describes it: an Arrow schema
    (`pq.read_schema`, `ParquetFile.schema_arrow`), a Parquet footer (`pq.read_metadata`,
    `ObjectStore.parquet_metadata`) or their key-value metadata itself (bytes or text keys;
    None when there is none). 1 when the key is absent (an object written before versions).
    Raises `SchemaVersionMetadataError` when the key holds anything but a version number."""
    metadata = getattr(schema_or_metadata, "metadata", schema_or_metadata)
    if metadata is None:
        return FIRST_VERSION
    if not isinstance(metadata, Mapping):
        raise TypeError(f"no key-value metadata in {type(schema_or_metadata).__name__}")
    raw = metadata.get(SCHEMA_VERSION_KEY)
    if raw is None:
        raw = metadata.get(SCHEMA_VERSION_KEY.decode("ascii"))
    if raw is None:
        return FIRST_VERSION
    text = raw.decode("ascii", "replace") if isinstance(raw, bytes) else str(raw)
    if not (text.isascii() and text.isdigit()) or int(text) < FIRST_VERSION:
        raise SchemaVersionMetadataError(
            f"{SCHEMA_VERSION_KEY.decode()} is {text!r}, not a schema version (1, 2, ...)"
        )
    return int(text)
