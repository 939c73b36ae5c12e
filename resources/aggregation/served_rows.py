"""`ServedRows`: under `dedupe: latest` or `on_change: replace`, the rows a rollup of a date
aggregates — what the date's current publication serves (docs/concepts/rollups.md, "When
published rows can leave").

Under `first` (and `none`) a row the table serves stays served, so a rollup adds batches of new
rows to its state. Under `latest` a later record takes its key from a published one, and under
`replace` the earlier content of a rewritten object leaves: a row once counted would have to be
taken out of the aggregates again, which a sum could do but a minimum or a maximum could not
without the group's other rows. The rollup of such a stream is therefore recomputed from the
files a publication serves, once per publication, and set as the state under the
publication's position (`served_position`): the files of a recorded publication never change,
so a replay sets the same values (Storm's transactional rule). The cost is one read of the
rollup's columns of the date's served files per publication: of the order of what the
publication itself reads and writes (the date's key index, 24 bytes a key).
"""

from __future__ import annotations

from resources.ledger.publication import Publication
from resources.objects.base import ObjectStore
from resources.publication.manifest import ManifestEntry, read_spectrum
from resources.stores.base import CoordinationStore


class ServedRows:
    """The files a rollup of a date aggregates: those its current publication serves."""

    def __init__(self, store: CoordinationStore, objects: ObjectStore, table: str) -> None:
        """`objects` is the table's object store, `table` its ledger table."""
        self.store = store
        self.objects = objects
        self.table = table

    def current(self, dt: str) -> Publication | None:
        """The date's current publication (None before the first). Raises the store's
        errors."""
        publications = self.store.publications(self.table, dt)
        return publications[-1] if publications else None

    def files(self, publication: Publication) -> list[ManifestEntry]:
        """The files `publication` serves, from its manifest. Raises `ObjectStoreError`."""
        return read_spectrum(self.objects, publication.location)
