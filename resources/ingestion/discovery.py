"""Discovery: turn new source objects into lease items and batches of Dagster partitions.

This is Data Prepper's partition supplier. It runs under the supplier lease (a global-state
item), so one node at a time lists and creates; the cursor it advances lives in that global
state and is mirrored in the Dagster sensor cursor. Work per tick is O(new objects): the lister
starts after the cursor, lease items are created in batches, and a tick with nothing new costs
a constant number of store calls.

Listing after a cursor never sees an object whose key sorts before it (a late file in
yesterday's folder): `reconciliation.py` lists the whole source again, slowly, for those. Runs
are planned in `run_planner.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from resources.coordination.lease_store import LeaseStore

SUPPLIER_STATE = "discovery"


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
        try:
            keys, cursor = self.lister(sensor_cursor, self.max_objects_per_tick)
            created = 0
            if keys:
                sid = self.store.source_identifier(self.stream)
                created = self.store.create_partitions(sid, keys)
                state = dict(supplier.progress or {})
                state.update(cursor=cursor, listed=int(state.get("listed", 0)) + len(keys))
                self.store.update_global_state(supplier.token, state, self.timeout_s)
            return DiscoveryResult(keys, created, cursor if keys else sensor_cursor)
        finally:
            self.store.release_global_state(supplier.token)
