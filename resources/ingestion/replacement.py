"""The commit of a replacement unit (`on_change: replace`): the new content's rows and, in the
same fenced transaction, a retraction marker on every date the replacement touches
(`resources.ledger.retraction_marker`; docs/concepts/keys-and-changes.md).

- The unit replaced must be COMPLETED first: until then it may still commit rows of the
  object, which a marker committed before them would not retract. A replacement that finds it
  unfinished waits (`ReplacementWaitError`: the unit is closed and tried again with backoff).
- The dates the earlier content gave rows to are those its unit's commits wrote to (its
  progress lists them; a unit committed before that list was kept is looked for in every date
  of the table). Each of those dates, and each date of the new content, gets a marker naming
  them all: the publication publishes them together.
- The whole replacement must fit ONE transaction (`fits_one_commit`): its rows and its markers
  are seen together or not at all. One that does not is refused (`ReplacementTooLargeError`,
  the unit is closed and dead-lettered in the end, visibly): a replacement of an object that
  gives rows to more dates than one transaction registers cannot keep its promise.

A marker is a Parquet object of no rows and no columns under the table's `_retractions/`: a
real small object, which merges, checks and garbage collection treat as any other.
"""

from __future__ import annotations

import io
import logging
import uuid
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from resources.coordination.items import PartitionStatus
from resources.errors import LeaseholdError
from resources.ingestion.unit_progress import TABLE_PARTITIONS
from resources.ingestion.work_units import unit_objects
from resources.ledger.model import SmallObject, fits_one_commit
from resources.ledger.retraction_marker import Retraction, marker_key, marker_sources
from resources.objects.base import ObjectStore
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)


class ReplacementWaitError(LeaseholdError):
    """The unit a replacement replaces has not completed yet."""


class ReplacementTooLargeError(LeaseholdError):
    """A replacement's rows and markers do not fit one transaction."""


class ReplacementMarkers:
    """Makes the markers a replacement unit commits with its new content."""

    def __init__(self, store: CoordinationStore, objects: ObjectStore, stream: str, table: str):
        """`objects` is the table's object store."""
        self.store = store
        self.objects = objects
        self.sid = store.source_identifier(stream)
        self.table = table
        self._empty = _empty_parquet()

    def with_markers(
        self, unit: str, replaced: tuple[str, str], objects: Sequence[SmallObject]
    ) -> list[SmallObject]:
        """`objects` (the replacement's new content, table and quarantine) and a marker on
        every date of the replacement, written. Raises `ReplacementWaitError`,
        `ReplacementTooLargeError`, the store and object store errors (nothing committed)."""
        old_unit, key = replaced
        item = self.store.get(self.sid, old_unit)
        if item is None or item.status != PartitionStatus.COMPLETED:
            status = "no such unit" if item is None else item.status.value
            raise ReplacementWaitError(
                f"waits for unit {old_unit!r}, which it replaces, to complete ({status})"
            )
        old_dates = self._dates_of(old_unit, item.progress)
        dates = sorted(old_dates | {o.dt for o in objects if o.table == self.table})
        only = len(unit_objects(old_unit, item.progress)) == 1
        markers = [
            self._marker(
                dt, Retraction(unit, tuple(dates), old_unit if dt in old_dates else None, key, only)
            )
            for dt in dates
        ]
        every = [*objects, *markers]
        if not fits_one_commit(every):
            raise ReplacementTooLargeError(
                f"the replacement of {key!r} touches {len(dates)} dates ({len(every)} objects): "
                "more than one transaction holds, so it cannot retract and add in one commit"
            )
        return every

    def _dates_of(self, unit: str, progress: object) -> set[str]:
        """The dates of the table the unit's commits wrote to."""
        listed = progress.get(TABLE_PARTITIONS) if isinstance(progress, dict) else None
        if listed is not None:
            slots = [str(s).rpartition("|") for s in listed]
            return {dt for table, _, dt in slots if table == self.table}
        log.info("unit %r lists no dates: looking for its rows in every date", unit)
        return {
            tp.dt
            for tp in self.store.table_partitions(self.table)
            if any(
                o.source_partition_key == unit for o in self.store.ledger_objects(self.table, tp.dt)
            )
        }

    def _marker(self, dt: str, retraction: Retraction) -> SmallObject:
        name = marker_key(dt, f"{uuid.uuid4().hex}.parquet")
        url = self.objects.put_bytes(name, self._empty)
        return SmallObject(
            self.table, dt, url, len(self._empty), 0, sources=marker_sources(retraction)
        )


def _empty_parquet() -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.table({}), sink)
    return sink.getvalue()
