"""Discovery: turn new source objects into lease items and batches of Dagster partitions.

This is Data Prepper's partition supplier. It runs under the supplier lease (a global-state
item), so one node at a time lists and creates; the cursor it advances lives in that global
state and is mirrored in the Dagster sensor cursor. Work per tick is O(new objects): the lister
starts after the cursor, lease items are created in batches, and a tick with nothing new costs
a constant number of store calls.

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


@dataclass(frozen=True)
class ListedObject:
    key: str
    """The source partition key (what the lease item is keyed by)."""


@dataclass(frozen=True)
class DiscoveryResult:
    source_keys: list[str]
    """Source keys listed after the cursor, in listing order (all new to this supplier)."""
    created: int
    """Lease items that did not exist yet (a re-listed key is not re-created)."""
    cursor: str | None
    skipped_reason: str | None = None


Lister = Callable[[str | None, int], tuple[list[str], str | None]]
"""(start_after, limit) -> (keys in order strictly after start_after, new cursor)."""


class Discovery:
    def __init__(
        self,
        store: LeaseStore,
        stream: str,
        lister: Lister,
        owner: str,
        timeout_s: float = 60.0,
        max_objects_per_tick: int = 20_000,
    ) -> None:
        self.store = store
        self.stream = stream
        self.lister = lister
        self.owner = owner
        self.timeout_s = timeout_s
        self.max_objects_per_tick = max_objects_per_tick

    def discover(self, sensor_cursor: str | None) -> DiscoveryResult:
        """List after `sensor_cursor` and create lease items for what is new.

        The Dagster sensor cursor, not the store's, is where listing starts: the daemon stores
        it together with the partitions and runs the tick asked for, so a tick that died after
        updating the store but before Dagster kept its results is simply listed again (lease
        creation is idempotent; the run key dedups the runs).
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
            keys, cursor = self.lister(sensor_cursor, self.max_objects_per_tick)
            caught_up = len(keys) < self.max_objects_per_tick
            created = 0
            state = dict(supplier.progress or {})
            if keys:
                sid = self.store.source_identifier(self.stream)
                created = self.store.create_partitions(sid, keys)
                state.update(cursor=cursor, listed=int(state.get("listed", 0)) + len(keys))
            if caught_up:
                # Only after the lease items exist: a reader seeing the new caught-up time
                # also sees every item it vouches for (pending until ingested).
                state[CAUGHT_UP_MS] = max(started_ms, int(state.get(CAUGHT_UP_MS, 0)))
            if keys:
                self.store.update_global_state(supplier.token, state, self.timeout_s)
            elif caught_up:  # nothing new: saved by the release, no extra write
                release_with = state
            return DiscoveryResult(keys, created, cursor if keys else sensor_cursor)
        finally:
            self.store.release_global_state(supplier.token, release_with)
