"""Whether a work unit's rows are in a published version of the table, from the ledger.

A unit's commit record lists the small objects its completing transaction registered, per
table partition (`(table, dt, id)`); a unit committed in several transactions (a large unit,
or one whose earlier attempt committed some objects before it closed) registered others before
it, in the table partitions its progress names (`TABLE_PARTITIONS`). Ids are dense and grow
with every commit of a table partition, so in a partition the record names, the record's
largest id is the unit's largest; in one only the progress names, the unit's objects are read
from the ledger (rare: only such units pay for it). A partition's current publication covers
ids `1..published_upper` (live objects listed one by one, or merged objects through the chain:
`resources/ledger/publication.py`), so the unit's rows are published when, in every
partition, its largest id is at most `published_upper`. A unit that committed no rows to the
table is trivially published; the quarantine's objects are no rows of the table.
"""

from __future__ import annotations

from resources.cleanup.planner import Publication, Verdict
from resources.coordination.items import LeaseItem
from resources.ingestion.unit_progress import TABLE_PARTITIONS
from resources.ledger.model import TablePartition
from resources.stores.base import CoordinationStore


class PublishedRows:
    """Verdicts for one pass over one table: partitions are read once per pass and kept (their
    publication only moves forward, so a pass judging with an older read is merely more
    cautious)."""

    def __init__(self, store: CoordinationStore, table: str) -> None:
        self.store = store
        self.table = table
        self.partitions: dict[str, TablePartition | None] = {}

    def verdict(self, item: LeaseItem) -> Verdict:
        """The unit's `Verdict`: PUBLISHED, WAITING (naming the first partition whose
        publication lags it) or NEVER (a COMPLETED unit without a commit record: nothing shows
        where its rows are). Read-only. Raises the store errors."""
        sid, key = item.source_identifier, item.partition_key
        record = self.store.commit_record(sid, key)
        if record is None:
            return Verdict(Publication.NEVER, "no commit record says where its rows are")
        needed: dict[str, int] = {}
        for table, dt, object_id in record.object_ids:
            if table == self.table:
                needed[dt] = max(needed.get(dt, 0), int(object_id))
        for dt in self._earlier_partitions(item, needed):
            ids = [
                o.object_id
                for o in self.store.ledger_objects(self.table, dt)
                if o.source_identifier == sid and o.source_partition_key == key
            ]
            if ids:
                needed[dt] = max(ids)
        if not needed:
            return Verdict(Publication.PUBLISHED, "committed no rows to the table")
        for dt, object_id in sorted(needed.items()):
            upper = self._published_upper(dt)
            if upper < object_id:
                return Verdict(
                    Publication.WAITING,
                    f"dt={dt}: its object {object_id} is not published yet "
                    f"(published up to {upper})",
                )
        dates = ", ".join(sorted(needed))
        return Verdict(Publication.PUBLISHED, f"rows published (dt={dates})")

    def _earlier_partitions(self, item: LeaseItem, named: dict[str, int]) -> list[str]:
        """The table's dates the unit's progress names and its commit record does not."""
        progress = item.progress if isinstance(item.progress, dict) else {}
        dates = []
        for slot in progress.get(TABLE_PARTITIONS, []):
            table, _, dt = str(slot).rpartition("|")
            if table == self.table and dt not in named:
                dates.append(dt)
        return dates

    def _published_upper(self, dt: str) -> int:
        if dt not in self.partitions:
            self.partitions[dt] = self.store.table_partition(self.table, dt)
        tp = self.partitions[dt]
        if tp is None or tp.current_manifest_version < 0:
            return 0
        return tp.published_upper
