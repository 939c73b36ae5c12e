"""Work units: what one lease item (and one Dagster partition) stands for (docs/architecture.md).

A unit is up to `partition.max_objects` consecutive objects of one discovery listing holding at
most `partition.max_bytes` together; an object bigger than that is a unit on its own. One
partition per object cost a lease, a Dagster partition and two Dagster events per object, and
Dagster's partitions do not scale past ~10⁵ per asset; a unit of many objects costs them once.

A unit's key is its first object's key: readable in the UI, and `max_objects: 1` gives exactly
one object per partition, keyed as before. Its objects are kept, with their sizes and
fingerprints, in its lease item's progress state (`{"unit": [[key, size, etag], ...]}`) from
the moment it is created — the list is what a run reads, what `UnitCoverage` consults to know
an object is taken and what clean-up compares the object with before removing it — so the list
is bounded (`MAX_UNIT_KEY_BYTES`, keys and fingerprints) to keep the item far below DynamoDB's
400 KB. An item written before fingerprints lists `[key, size]`: its fingerprints are unknown
(sizes are compared instead). A new version of an object rewritten in place
(`on_change: append` or `replace`) is a unit of its own, keyed `version_unit_key(key, etag)`; one
that replaces the earlier version also names the unit it replaces (`REPLACES`).

Pure: no store writes here, no Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from resources.coordination.items import LeaseItem
from resources.coordination.lease_store import LeaseStore

UNIT = "unit"
"""The progress-state field holding a unit's objects."""
DONE = "done"
"""The progress-state field holding the objects an earlier attempt already committed (a unit
closed for a retry after one of its objects could not be read commits the others first)."""
REPLACES = "replaces"
"""The progress-state field of a unit holding a new version of an object that replaces the
earlier one (`on_change: replace`): `[the unit it replaces, the object's key]`."""

MAX_UNIT_KEY_BYTES = 96 * 1024
"""Key bytes one unit lists at most: its item, rewritten by every commit, stays under a
quarter of DynamoDB's item limit whatever the keys' length."""


@dataclass(frozen=True)
class UnitObject:
    """One source object of a work unit: key and size."""

    key: str
    size: int
    """Bytes, as listed; -1 where unknown (an item written before units had sizes)."""
    etag: str = ""
    """Its fingerprint as listed (`resources/objects/fingerprint.py`); empty where unknown (an
    item written before units had fingerprints)."""

    def entry(self) -> list[str | int]:
        """How the unit's progress lists it: `[key, size, etag]`, `[key, size]` when the
        fingerprint is unknown."""
        return [self.key, self.size, self.etag] if self.etag else [self.key, self.size]


@dataclass(frozen=True)
class WorkUnit:
    """A work unit: the source objects one lease item holds, keyed by its first object's key."""

    key: str
    objects: tuple[UnitObject, ...]
    replaces: str | None = None
    """The key of the unit whose rows of this unit's one object it retracts (`on_change:
    replace`); None for any other unit."""

    @property
    def size(self) -> int:
        return sum(max(o.size, 0) for o in self.objects)

    def progress_state(self) -> str:
        state: dict[str, Any] = {UNIT: [o.entry() for o in self.objects]}
        if self.replaces is not None:
            state[REPLACES] = [self.replaces, self.objects[0].key]
        return json.dumps(state)


Listed = tuple[str, int] | tuple[str, int, str]
"""A listed object: (key, size) or (key, size, etag)."""

VERSION_MARK = "@etag:"
"""Between an object's key and its new fingerprint in the key of a unit holding a new version
of it: no fingerprint contains it, so two versions' keys never collide, nor do they collide
with an original unit's (keyed by its first object's key) unless an object is named exactly
`<key>@etag:<fingerprint>`."""


def version_unit_key(key: str, etag: str) -> str:
    """The key of the unit holding the version `etag` of the object `key` (`on_change:
    append`): the same for the same version, so creating it again is harmless."""
    return f"{key}{VERSION_MARK}{etag}"


@dataclass(frozen=True)
class HeldVersion:
    """A version of an object a unit holds: the unit's key and the object as it recorded it."""

    unit: str
    held: UnitObject


def plan_units(
    listed: Iterable[Listed],
    max_objects: int,
    max_bytes: int,
    max_key_bytes: int = MAX_UNIT_KEY_BYTES,
) -> list[WorkUnit]:
    """Cut a listing (key, size and maybe etag, in listing order) into units of consecutive
    objects.

    A unit ends before the object that would take it past `max_objects`, `max_bytes` or
    `max_key_bytes` (keys and fingerprints); an object bigger than `max_bytes` is always a unit
    of its own."""
    units: list[WorkUnit] = []
    current: list[UnitObject] = []
    size = key_bytes = 0
    for entry in listed:
        obj = UnitObject(*entry)
        key, obj_size = obj.key, obj.size
        obj_key_bytes = len(key.encode()) + len(obj.etag)
        if current and (
            len(current) >= max_objects
            or size + max(obj_size, 0) > max_bytes
            or key_bytes + obj_key_bytes > max_key_bytes
        ):
            units.append(WorkUnit(current[0].key, tuple(current)))
            current, size, key_bytes = [], 0, 0
        current.append(obj)
        size += max(obj_size, 0)
        key_bytes += obj_key_bytes
    if current:
        units.append(WorkUnit(current[0].key, tuple(current)))
    return units


def unit_of(item: LeaseItem) -> WorkUnit:
    """The unit an item stands for. An item without a unit list (created before work units,
    or by hand) is the one object its key names."""
    return WorkUnit(item.partition_key, unit_objects(item.partition_key, item.progress))


def unit_objects(key: str, progress: Any) -> tuple[UnitObject, ...]:
    listed = progress.get(UNIT) if isinstance(progress, dict) else None
    if not listed:
        return (UnitObject(key, -1),)
    return tuple(
        UnitObject(str(entry[0]), int(entry[1]), str(entry[2]) if len(entry) > 2 else "")
        for entry in listed
    )


def replaced_by(progress: Any) -> tuple[str, str] | None:
    """(the unit replaced, the object's key) of a replacement unit's progress; else None."""
    entry = progress.get(REPLACES) if isinstance(progress, dict) else None
    return (str(entry[0]), str(entry[1])) if entry else None


def done_objects(progress: Any) -> set[str]:
    return set(progress.get(DONE, [])) if isinstance(progress, dict) else set()


class UnitCoverage:
    """Which listed objects no work unit holds, walking the listing and the lease items in key
    order together — the two are in the same order, so each item is read once per pass.

    A listed object is held by the item keyed by it, or by a unit whose key sorts before it and
    whose objects list it; such a unit was read in this page or an earlier one (or is carried
    across pages, and ticks, as `covering`). Deleted objects don't matter: a unit is found by
    its key range, whether or not its first object is still there. State (`after`, `covering`)
    is plain strings so a caller can keep it in a sensor cursor.

    Units may interleave (discovery repeating a tick that died after creating its units, with
    objects that landed in between, cuts those around the units that exist), so every unit
    reaching past a page is carried, not just one.
    """

    def __init__(
        self,
        store: LeaseStore,
        source_identifier: str,
        after: str | None = None,
        covering: Sequence[str] = (),
    ) -> None:
        self.store = store
        self.sid = source_identifier
        self.after = after
        self.covering = list(covering)
        self.read: list[str] = []
        """The keys of the items the last page read in its key range."""
        self.held: dict[str, list[HeldVersion]] = {}
        """The last page's held objects by key, as the units read list them (several where a
        unit holds a new version of an object: `version_unit_key`)."""

    def uncovered(self, keys: Sequence[str]) -> list[str]:
        """The keys of this page (in order, after the previous page's) no unit holds."""
        if not keys:
            return []
        last = keys[-1]
        held: set[str] = set()
        spans: list[WorkUnit] = []
        for key in self.covering:
            item = self.store.get(self.sid, key)
            if item is not None:
                spans.append(unit_of(item))
        self.read = []
        for item in self.store.items_between(self.sid, self.after, last):
            self.read.append(item.partition_key)
            held.add(item.partition_key)
            spans.append(unit_of(item))
        # Units of new versions of the page's last object sort after it, past the range.
        versions = last + VERSION_MARK
        for item in self.store.items_between(self.sid, last, versions + "\U0010ffff"):
            if item.partition_key.startswith(versions):
                spans.append(unit_of(item))
        self.held = {}
        for unit in spans:
            held.update(o.key for o in unit.objects)
            for o in unit.objects:
                self.held.setdefault(o.key, []).append(HeldVersion(unit.key, o))
        # Only a unit listing an object past this page can hold objects of the next one.
        self.covering = [u.key for u in spans if u.objects[-1].key > last]
        self.after = last
        return [k for k in keys if k not in held]
