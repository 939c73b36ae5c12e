"""Source changes: source objects rewritten in place after a work unit took them.

A producer that writes new content under a key a unit already holds changes the object's
fingerprint (S3's ETag; a local file's mtime and size: `resources/objects/fingerprint.py`).
Discovery sees it (the reconciliation or backstop listing, an S3 event) and records it here:
one record per stream, key and new fingerprint — seeing the same version again finds the
record and changes nothing — with when it was first seen and what became of it (`state`):

- `pending`: not read (`on_change: ignore`); named by `leasehold status`, the run's story and
  the `changed_sources` check until an operator acknowledges it (`leasehold changes ack`);
- `acknowledged`: an operator decided; nothing more happens;
- `appended`: its new content is held by a unit of its own (`on_change: append`), ingested
  exactly once as any unit is;
- `replaced`: its new content is held by a unit of its own that retracts the earlier content's
  rows in the same publication (`on_change: replace`).

A row per changed object, never per record of data. Both stores implement `SourceChanges`
(the shared contract suite tests them).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace

PENDING = "pending"
ACKNOWLEDGED = "acknowledged"
APPENDED = "appended"
REPLACED = "replaced"
STATES = (PENDING, ACKNOWLEDGED, APPENDED, REPLACED)


@dataclass(frozen=True)
class SourceChange:
    """One new version of a source object a unit already held."""

    key: str
    """The object's key in its source."""
    etag: str
    """Its new fingerprint (what identifies the record with the key)."""
    size: int
    """Its size when the change was seen (-1 where unknown)."""
    was_etag: str
    """The fingerprint recorded when it was taken (empty: unknown, sizes told them apart)."""
    was_size: int
    unit: str
    """The key of the unit that held it when the change was seen."""
    seen_ms: int
    """When the change was first seen (store time)."""
    state: str = PENDING

    def with_state(self, state: str) -> SourceChange:
        """The same record in `state`. Raises `ValueError` for a state not in `STATES`."""
        if state not in STATES:
            raise ValueError(f"no source change state {state!r}; one of {', '.join(STATES)}")
        return replace(self, state=state)


class SourceChanges(ABC):
    """Where source changes are kept, beside the lease items: every store implements it.
    Errors are the store errors (`StoreUnavailableError` within the bounded retry,
    `StoreRefusedError` for good)."""

    @abstractmethod
    def record_changes(
        self, source_identifier: str, changes: Sequence[SourceChange]
    ) -> list[SourceChange]:
        """Write each of `changes` whose key and fingerprint have no record yet; leave the
        others as they are (idempotent). Returns the record of each, in order, as stored now
        (an existing one with its own `seen_ms` and `state`). Raises the store errors."""

    @abstractmethod
    def source_changes(self, source_identifier: str, key: str | None = None) -> list[SourceChange]:
        """Every change recorded for the stream (of `key` alone when given), in key order,
        then by when it was seen; strongly consistent. Read-only. Raises the store errors."""

    @abstractmethod
    def set_change_state(self, source_identifier: str, change: SourceChange, state: str) -> bool:
        """Move the record of `change` (its key and fingerprint) to `state`; False when there
        is no such record (nothing written). Raises `ValueError` for a state not in `STATES`,
        and the store errors."""
