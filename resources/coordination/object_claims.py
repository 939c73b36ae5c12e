"""Object claims: which work unit holds a source object, by the object's key.

Discovery by listing finds an object's unit by walking the lease items beside the listing in key
order (`resources/ingestion/work_units.py`). Discovery by notifications cannot: events come in
any order, a unit holds objects from anywhere in the key space, and a redelivered event must be
recognised by its key alone. A claim is that index: one record per object (key, the unit holding
it, its size and fingerprint — a claim written before fingerprints has none: sizes are
compared), written after the unit's lease item exists and never expired by a TTL — so a claim
always names a unit that holds the object (`resources/ingestion/claimed_units.py` keeps that
true across crashes).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectClaim:
    """A source object held by a work unit."""

    key: str
    """The object's key in its source (as listed)."""
    unit: str
    """The key of the work unit (lease item) holding it."""
    size: int
    """Its size when it was claimed (-1 where unknown)."""
    etag: str = ""
    """Its fingerprint when it was claimed (`resources/objects/fingerprint.py`); empty where
    unknown (a claim written before fingerprints, or an event without one)."""


class ObjectClaims(ABC):
    """Where claims are kept, beside the lease items: every store implements it (the shared
    contract suite tests both). Errors are the store errors (`StoreUnavailableError` within the
    bounded retry, `StoreRefusedError` for good)."""

    @abstractmethod
    def claim_objects(self, source_identifier: str, claims: Sequence[ObjectClaim]) -> None:
        """Write `claims` (distinct keys), replacing any claim of the same key; batched (a
        failing batch leaves the ones before written: writing the same claims again is
        harmless). No TTL ever applies. Raises the store errors."""

    @abstractmethod
    def object_claims(self, source_identifier: str, keys: Sequence[str]) -> dict[str, ObjectClaim]:
        """The claims of those of `keys` that have one, strongly consistent (a claim written
        before this call began is in it), read by key in batches: O(len(keys)). Read-only.
        Raises the store errors."""
