"""What discovery does with a source object rewritten in place: detect, record, then ignore,
append or replace (the stream's `on_change`; `resources/coordination/source_changes.py` keeps the
records).

An object is changed when a unit holds its key and no version a unit holds has its
fingerprint (`resources/objects/fingerprint.py`: ETags when both are known, whatever the
sizes; else sizes). Listing discovery's reconciliation pass asks the units read beside the
listing (`UnitCoverage.held`); notifications discovery asks the object's claim. Every change
is recorded once per key and fingerprint, whatever `on_change` says, so none is silent:

- `ignore`: the record stays `pending` — named by `leasehold status`, the run's story and the
  `changed_sources` check — until an operator acknowledges it (`leasehold changes ack`);
- `append`: a unit of its own holds the new version (`version_unit_key`: the same key for the
  same version, so creating it again is harmless), claimed for a stream on notifications,
  then the record is `appended`. A crash between those steps leaves the record `pending`:
  the next sighting (the next pass, the redelivered event) does the rest, creating nothing
  twice. A `pending` change of a stream switched to `append` is appended at its next sighting.
- `replace`: the same, and the new unit names the unit it replaces (the one holding the last
  version: `WorkUnit.replaces`); its commit retracts that unit's rows of the object
  (`resources.ingestion.replacement`), then the record is `replaced`.

The new unit reads the object as it is when the run reads it: should it be rewritten again
in between, those newer bytes are read, and the next sighting records that newer version as a
change again (read once more, never lost; dedupe resolves the overlap).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

from resources.coordination.object_claims import ObjectClaim
from resources.coordination.source_changes import APPENDED, PENDING, REPLACED, SourceChange
from resources.ingestion.discovery import ListedObject
from resources.ingestion.work_units import HeldVersion, UnitObject, WorkUnit, version_unit_key
from resources.key_settings import APPEND, REPLACE
from resources.objects.fingerprint import same_content
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)


def claim_version(claim: ObjectClaim) -> HeldVersion:
    """The version an object claim records. Raises nothing."""
    return HeldVersion(claim.unit, UnitObject(claim.key, claim.size, claim.etag))


def detect_change(
    seen: ListedObject, versions: Sequence[HeldVersion], now_ms: int
) -> SourceChange | None:
    """The change `seen` is, None when a held version has its content (or none is held).
    Compared with the last version held (the latest unit); an object seen without a
    fingerprint is recorded under `size-<n>`. Pure; raises nothing."""
    if not versions or any(
        same_content(v.held.etag, v.held.size, seen.etag, seen.size) for v in versions
    ):
        return None
    last = versions[-1]
    etag = seen.etag or f"size-{seen.size}"
    return SourceChange(
        seen.key, etag, seen.size, last.held.etag, last.held.size, last.unit, now_ms
    )


class ChangeHandler:
    """Records one stream's changed objects and, under `on_change: append` or `replace`, makes
    each new version a unit of its own (claimed when `claims`: the stream discovers by
    notifications)."""

    def __init__(
        self, store: CoordinationStore, stream: str, on_change: str, *, claims: bool = False
    ) -> None:
        self.store = store
        self.stream = stream
        self.sid = store.source_identifier(stream)
        self.on_change = on_change
        self.claims = claims

    def handle(self, changes: Iterable[SourceChange]) -> list[str]:
        """Record `changes` (idempotently; a new one is logged as a warning) and, appending or
        replacing, make a unit of each still `pending`. Returns the keys of the units made (or
        found made by an attempt that died before recording it). Raises the store errors: what
        was done stays done, the next sighting does the rest."""
        changes = list(changes)
        if not changes:
            return []
        stored = self.store.record_changes(self.sid, changes)
        for seen, record in zip(changes, stored, strict=True):
            if record == seen:
                self._warn(record)
        if self.on_change not in (APPEND, REPLACE):
            return []
        return [self._append(c) for c in stored if c.state == PENDING]

    def _warn(self, change: SourceChange) -> None:
        what = (
            "its new content is ingested as a new version"
            if self.on_change == APPEND
            else "its earlier rows are retracted and its new content ingested, in one publication"
            if self.on_change == REPLACE
            else "not read again (on_change: ignore); see leasehold changes ls "
            f"{self.stream}, clear with leasehold changes ack {self.stream} {change.key!r}"
        )
        log.warning(
            "%s: %r changed since unit %r took it (fingerprint %s, %d bytes; was %s, %d): %s",
            self.stream,
            change.key,
            change.unit,
            change.etag,
            change.size,
            change.was_etag or "unknown",
            change.was_size,
            what,
        )

    def _append(self, change: SourceChange) -> str:
        """The new version's unit created (and claimed), then the record `appended` (or
        `replaced`: the unit replaces the one that held the last version)."""
        replacing = self.on_change == REPLACE
        unit = WorkUnit(
            version_unit_key(change.key, change.etag),
            (UnitObject(change.key, change.size, change.etag),),
            replaces=change.unit if replacing else None,
        )
        self.store.create_partitions(self.sid, [unit.key], progress_states=[unit.progress_state()])
        if self.claims:
            self.store.claim_objects(
                self.sid, [ObjectClaim(change.key, unit.key, change.size, change.etag)]
            )
        self.store.set_change_state(self.sid, change, REPLACED if replacing else APPENDED)
        return unit.key
