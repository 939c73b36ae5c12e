"""Work units whose objects are claimed: how notifications discovery (and its backstop pass)
create units so that an object is never in two, whatever order its events come in and wherever
a tick dies.

An object is held when it has a claim (`resources/coordination/object_claims.py`). A claim is
written only after the unit it names exists, from that unit's own object list, so a claim always
names a unit holding the object. The other way round — a unit whose claims a dead tick never
wrote — is closed by an intent in the supplier's global state: before creating units a round
records their keys (`CLAIMING`); the next tick, under the same supplier lease, first claims the
objects of every unit recorded there that exists, then forgets them. So whenever anyone asks
"is this object held?", every unit created before has its claims.

Units from listing (created before a stream moved to notifications) have no claims: an index
pass (`index_step`) claims their objects, a bounded number of items per tick, before the first
message is read. Runs under the supplier lease; the caller saves the state it is handed.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from resources.coordination.items import LeaseToken
from resources.coordination.object_claims import ObjectClaim
from resources.coordination.supplier import SUPPLIER_STATE
from resources.ingestion.work_units import Listed, WorkUnit, plan_units, unit_of
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)

CLAIMING = "claiming"
"""Supplier-state field: keys of units being created whose objects may not be claimed yet."""
INDEXED = "claims_indexed"
"""Supplier-state field: true once every unit created by listing has its claims."""
INDEX_AFTER = "claims_index_after"
"""Supplier-state field: the unit key the index pass reached."""
MAX_ROUND_UNITS = 500
"""Units one round creates at most: the intent stays far below DynamoDB's 400 KB item."""
LAST_KEY = "\U0010ffff"


@dataclass
class ClaimedUnits:
    """Creates claimed work units for one stream under its supplier lease (`token`), keeping the
    crash intent in `state` (the supplier's global state, saved here between steps)."""

    store: CoordinationStore
    stream: str
    token: LeaseToken
    state: dict[str, Any]
    timeout_s: float
    unit_max_objects: int
    unit_max_bytes: int
    created: list[str] = field(default_factory=list)
    """Keys of the units this object created or recovered."""

    @property
    def sid(self) -> str:
        return self.store.source_identifier(self.stream)

    def finish_pending(self) -> list[str]:
        """Claim the objects of the units a dead tick recorded as being created (those that
        exist) and forget the intent; returns their keys. Saves the state if it changed."""
        pending = list(self.state.get(CLAIMING) or [])
        if not pending:
            return []
        found = []
        for key in pending:
            item = self.store.get(self.sid, key)
            if item is not None:
                self._claim(unit_of(item))
                found.append(key)
        self.state[CLAIMING] = []
        self._save()
        self.created += found
        return found

    def held(self, keys: Sequence[str]) -> dict[str, ObjectClaim]:
        """The claims of those of `keys` a unit holds."""
        return self.store.object_claims(self.sid, keys)

    def create(self, objects: Iterable[Listed]) -> list[WorkUnit]:
        """Cut `objects` (key, size and maybe etag; none held, distinct) into units in key order
        and create them, claimed, in rounds of at most `MAX_ROUND_UNITS`. Returns the units."""
        units = plan_units(sorted(objects), self.unit_max_objects, self.unit_max_bytes)
        for start in range(0, len(units), MAX_ROUND_UNITS):
            batch = units[start : start + MAX_ROUND_UNITS]
            keys = [u.key for u in batch]
            self.state[CLAIMING] = keys
            self._save()
            absent = set(self.store.missing_keys(self.sid, keys))
            self.store.create_partitions(
                self.sid, keys, progress_states=[u.progress_state() for u in batch]
            )
            for unit in batch:
                self._claim(unit if unit.key in absent else self._stored(unit))
            self.state[CLAIMING] = []
            self.created += keys
        return units

    def _stored(self, unit: WorkUnit) -> WorkUnit:
        """A planned unit whose key had an item already (made by hand, or by a listing the
        index pass had not reached): that item's own objects are what it holds; the planned
        ones it lacks stay unheld for the next message or the backstop pass."""
        item = self.store.get(self.sid, unit.key)
        stored = unit_of(item) if item is not None else unit
        lacking = {o.key for o in unit.objects} - {o.key for o in stored.objects}
        if lacking:
            log.warning(
                "%s: unit %r existed already without %d of the objects planned for it; they "
                "stay unheld until an event or the backstop pass finds them again",
                self.stream,
                unit.key,
                len(lacking),
            )
        return stored

    def index_step(self, limit: int) -> bool:
        """Claim the objects of up to `limit` units in key order from where the index pass
        reached; True once every unit is indexed (then recorded in the state)."""
        if self.state.get(INDEXED):
            return True
        after = self.state.get(INDEX_AFTER)
        seen = 0
        for item in self.store.items_between(self.sid, after, LAST_KEY):
            self._claim(unit_of(item))
            after = item.partition_key
            seen += 1
            if seen >= limit:
                break
        done = seen < limit
        self.state.update({INDEX_AFTER: None if done else after, INDEXED: done})
        self._save()
        return done

    def _claim(self, unit: WorkUnit) -> None:
        self.store.claim_objects(
            self.sid, [ObjectClaim(o.key, unit.key, o.size, o.etag) for o in unit.objects]
        )

    def _save(self) -> None:
        self.store.update_global_state(self.token, self.state, self.timeout_s)


def forget_index(store: CoordinationStore, stream: str, owner: str, timeout_s: float) -> bool:
    """A stream discovering by listing again: units it makes now have no claims, so a later
    move back to notifications must index them first. Clears the index's progress (one read
    when there is none); False if another node holds the supplier lease (the next tick tries
    again). Raises the store errors."""
    if not store.read_global_state(stream, SUPPLIER_STATE).get(INDEXED):
        return True
    supplier = store.acquire_global_state(stream, SUPPLIER_STATE, owner, timeout_s)
    if supplier is None:
        return False
    state = dict(supplier.progress or {})
    state.update({INDEXED: False, INDEX_AFTER: None})
    store.release_global_state(supplier.token, state)
    return True
