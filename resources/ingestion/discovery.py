"""Discovery: turn new source objects into work units (lease items) and Dagster partitions.

This is Data Prepper's partition supplier. It runs under the supplier lease (a global-state
item), so one node at a time lists and creates; the cursor it advances lives in that global
state and is mirrored in the Dagster sensor cursor. Work per tick is O(new objects): the lister
starts after the cursor, consecutive objects are cut into work units (`work_units`: up to
`partition.max_objects` and `partition.max_bytes` each), their lease items are created in
batches, and a tick with nothing new costs a constant number of store calls.

A tick whose listing returned fewer keys than it asked for reached the end of the source: it
records when it *started* listing as `caught_up_ms` (every object that landed before then is
now leased), which is what lets a table partition close (`resources/compaction/closing.py`):
not before its stream has caught up, so a backfill does not close its dates at once and land
most of their data as "delayed".

Listing after a cursor never sees an object whose key sorts before it (a late file in
yesterday's folder): `reconciliation.py` lists the whole source again, slowly, for those. Runs
are planned in `run_planner.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from resources.coordination.lease_store import LeaseStore
from resources.coordination.supplier import CAUGHT_UP_MS, SUPPLIER_STATE
from resources.ingestion.work_units import UnitCoverage, plan_units


@dataclass(frozen=True)
class ListedObject:
    """A source object as discovery listed it: key, size and fingerprint."""

    key: str
    """The object's key in its source (a work unit is keyed by its first object's)."""
    size: int
    etag: str = ""
    """Its fingerprint (`resources/objects/fingerprint.py`); empty where the lister gives none."""


@dataclass(frozen=True)
class DiscoveryResult:
    """What one discovery step made: the work units cut, the lease items created, the cursor
    reached."""

    source_keys: list[str]
    """Work units cut from what was listed after the cursor, by key, in listing order (all new
    to this supplier)."""
    created: int
    """Lease items that did not exist yet (a re-listed key is not re-created)."""
    cursor: str | None
    skipped_reason: str | None = None
    listed: int = 0
    """Objects listed (the units hold them all)."""


Lister = Callable[[str | None, int], tuple[list[ListedObject], str | None]]
"""(start_after, limit) -> (objects in key order strictly after start_after, new cursor)."""


class Discovery:
    """Lists a stream's source after its cursor and turns the new objects into work units (lease
    items), one node at a time."""

    def __init__(
        self,
        store: LeaseStore,
        stream: str,
        lister: Lister,
        owner: str,
        timeout_s: float = 60.0,
        max_objects_per_tick: int = 20_000,
        unit_max_objects: int = 1,
        unit_max_bytes: int = 2**62,
    ) -> None:
        self.store = store
        self.stream = stream
        self.lister = lister
        self.owner = owner
        self.timeout_s = timeout_s
        self.max_objects_per_tick = max_objects_per_tick
        self.unit_max_objects = unit_max_objects
        self.unit_max_bytes = unit_max_bytes

    def discover(self, sensor_cursor: str | None) -> DiscoveryResult:
        """List after `sensor_cursor` and create lease items for what is new.

        The Dagster sensor cursor, not the store's, is where listing starts: the daemon stores
        it together with the partitions and runs the tick asked for, so a tick that died after
        updating the store but before Dagster kept its results is simply listed again: units
        are cut only from objects no unit holds, so none is in two, and the units found are
        returned again with the new ones (the run key dedups the runs).
        """
        supplier = self.store.acquire_global_state(
            self.stream, SUPPLIER_STATE, self.owner, self.timeout_s
        )
        if supplier is None:
            return DiscoveryResult([], 0, sensor_cursor, "another node is running discovery")
        release_with: dict[str, object] | None = None
        try:
            # Taken before listing: an object landing while we list may or may not be listed.
            started_ms = self.store.now_ms()
            listed, cursor = self.lister(sensor_cursor, self.max_objects_per_tick)
            caught_up = len(listed) < self.max_objects_per_tick
            sid = self.store.source_identifier(self.stream)
            # A tick repeated after one that died having created its units re-lists what those
            # hold (and maybe objects that landed in between): cut only what no unit holds, or
            # an object would be in two units. One key-range read: the units after the cursor.
            coverage = UnitCoverage(self.store, sid, after=sensor_cursor)
            free = set(coverage.uncovered([o.key for o in listed]))
            units = plan_units(
                ((o.key, o.size, o.etag) for o in listed if o.key in free),
                self.unit_max_objects,
                self.unit_max_bytes,
            )
            created = 0
            state = dict(supplier.progress or {})
            if listed:
                created = self.store.create_partitions(
                    sid,
                    [u.key for u in units],
                    progress_states=[u.progress_state() for u in units],
                )
                state.update(cursor=cursor, listed=int(state.get("listed", 0)) + len(listed))
            if caught_up:
                # Only after the lease items exist: a reader seeing the new caught-up time
                # also sees every item it vouches for (pending until ingested).
                state[CAUGHT_UP_MS] = max(started_ms, int(state.get(CAUGHT_UP_MS, 0)))
            if listed:
                self.store.update_global_state(supplier.token, state, self.timeout_s)
            elif caught_up:  # nothing new: saved by the release, no extra write
                release_with = state
            return DiscoveryResult(
                sorted({*coverage.read, *(u.key for u in units)}),
                created,
                cursor if listed else sensor_cursor,
                None,
                len(listed),
            )
        finally:
            self.store.release_global_state(supplier.token, release_with)
