"""Archive or delete one work unit's source objects, so that doing it again is harmless.

An object whose fingerprint is not the one its unit recorded (S3's ETag, a local file's mtime
and size: `resources/objects/fingerprint.py`; the size where the unit recorded no fingerprint)
was rewritten after it was ingested: those bytes were never read by this unit, so it is kept,
logged and reported (`Removed.kept`) — whatever its size. Under `on_change: append` or `replace`
its new content is a unit of its own, which removes it once that unit's rows are published. The
fingerprint is read just before the object is copied or deleted: a rewrite in the instant
between is not seen. Delete mode deletes each object. Archive mode copies each to `archive_to`
under the same key (relative to the source), then deletes the unit's sources in one batch: a
crash between the copy and the delete leaves both, and the next pass copies again (replacing the
copy with the same bytes) and deletes. An object already gone counts as done — removed by a pass
that stopped before it could count it, or by someone else — whatever the archive holds: clean-up
never recreates a source object, and it deletes a source only after its copy landed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from resources.ingestion.work_units import UnitObject
from resources.objects.base import ObjectInfo, ObjectStore
from resources.objects.fingerprint import same_content
from resources.source_settings import ARCHIVE, DELETE

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Removed:
    """What removing one unit's objects did."""

    archived: int = 0
    deleted: int = 0
    gone: int = 0
    """Already absent from the source: done, not counted again."""
    changed: int = 0
    """Of another fingerprint than when ingested (rewritten since): kept."""
    bytes: int = 0
    kept: tuple[str, ...] = ()
    """The keys of the changed objects kept (reported by the pass)."""

    def __add__(self, other: Removed) -> Removed:
        """The counts of both. Raises nothing."""
        return Removed(
            self.archived + other.archived,
            self.deleted + other.deleted,
            self.gone + other.gone,
            self.changed + other.changed,
            self.bytes + other.bytes,
            self.kept + other.kept,
        )


class SourceRemover:
    """Removes source objects the planner said may go, in `mode` (archive or delete)."""

    def __init__(self, mode: str, source: ObjectStore, archive: ObjectStore | None) -> None:
        if mode not in (ARCHIVE, DELETE) or (mode == ARCHIVE and archive is None):
            raise ValueError(f"source clean-up mode {mode!r} needs an archive: {archive}")
        self.mode = mode
        self.source = source
        self.archive = archive

    def remove(self, objects: Sequence[UnitObject]) -> Removed:
        """Archive (copy, then delete) or delete every object of `objects` still holding the
        content ingested; returns the counts, and the changed objects kept. Idempotent: an
        object already gone is counted `gone`. Raises `ObjectStoreError` (after
        the S3 retry) and `OSError` locally: what was removed before stays removed, and the
        next pass redoes the rest (the caller's cursor has not moved past the unit)."""
        present: list[str] = []
        size = gone = 0
        kept: list[str] = []
        for obj in objects:
            info = self.source.info(obj.key)
            if info is not None and not same_content(obj.etag, obj.size, info.etag, info.size):
                kept.append(obj.key)  # rewritten since: those bytes were never ingested
                self._changed(obj, info)
                continue
            now = None if info is None else info.size
            if now is not None and self.mode == ARCHIVE:
                assert self.archive is not None
                now = self.source.copy_to(obj.key, self.archive, obj.key)
            if now is None:
                gone += 1
                continue
            present.append(obj.key)
            size += now
        self.source.delete_many(present)
        if gone:
            log.info(
                "%s: %d of %d objects were already gone", self.source.root_url, gone, len(objects)
            )
        changed, done = len(kept), tuple(kept)
        if self.mode == ARCHIVE:
            return Removed(len(present), 0, gone, changed, size, done)
        return Removed(0, len(present), gone, changed, size, done)

    def _changed(self, obj: UnitObject, info: ObjectInfo) -> None:
        log.warning(
            "%s: %s changed since it was ingested (fingerprint %s, %d bytes; %s, %d when "
            "ingested): kept, never archived or deleted (see leasehold changes ls)",
            self.source.root_url,
            obj.key,
            info.etag or "unknown",
            info.size,
            obj.etag or "unknown",
            obj.size,
        )
