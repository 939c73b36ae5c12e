"""Archive or delete one work unit's source objects, so that doing it again is harmless.

An object whose size is not the one its unit recorded was uploaded again after it was ingested:
those bytes were never read (an ingested key is not ingested again), so it is kept and logged.
Delete mode deletes each object. Archive mode copies each to `archive_to` under the same key
(relative to the source), then deletes the unit's sources in one batch: a crash between the
copy and the delete leaves both, and the next pass copies again (replacing the copy with the
same bytes) and deletes. An object already gone counts as done — removed by a pass that
stopped before it could count it, or by someone else — whatever the archive holds: clean-up
never recreates a source object, and it deletes a source only after its copy landed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

from resources.ingestion.work_units import UnitObject
from resources.objects.base import ObjectStore
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
    """Of another size than when ingested (uploaded again since): kept."""
    bytes: int = 0


class SourceRemover:
    """Removes source objects the planner said may go, in `mode` (archive or delete)."""

    def __init__(self, mode: str, source: ObjectStore, archive: ObjectStore | None) -> None:
        if mode not in (ARCHIVE, DELETE) or (mode == ARCHIVE and archive is None):
            raise ValueError(f"source clean-up mode {mode!r} needs an archive: {archive}")
        self.mode = mode
        self.source = source
        self.archive = archive

    def remove(self, objects: Sequence[UnitObject]) -> Removed:
        """Archive (copy, then delete) or delete every object of `objects`; returns the counts.
        Idempotent: an object already gone is counted `gone`. Raises `ObjectStoreError` (after
        the S3 retry) and `OSError` locally: what was removed before stays removed, and the
        next pass redoes the rest (the caller's cursor has not moved past the unit)."""
        present: list[str] = []
        size = gone = changed = 0
        for obj in objects:
            now = self.source.size(obj.key)
            if now is not None and obj.size >= 0 and now != obj.size:
                changed += 1  # uploaded again since: those bytes were never ingested
                log.warning(
                    "%s: %s is %d bytes, %d when ingested: uploaded again since, kept (an "
                    "ingested key is never ingested again; put changed data under a new key)",
                    self.source.root_url,
                    obj.key,
                    now,
                    obj.size,
                )
                continue
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
        if self.mode == ARCHIVE:
            return Removed(archived=len(present), gone=gone, changed=changed, bytes=size)
        return Removed(deleted=len(present), gone=gone, changed=changed, bytes=size)
