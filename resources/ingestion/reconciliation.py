"""Reconciliation listing: find source objects that discovery's cursor has already passed.

Discovery lists only after its cursor, which is what keeps a tick O(new objects). An object
whose key sorts before the cursor — a late file in yesterday's folder, an upload that finished
after its neighbours were listed — is never seen that way. Reconciliation lists the source again
from the beginning up to the cursor, at most `max_objects` keys per tick (resumable: its own
cursor is kept with discovery's), walks the lease items beside the listing in key order
(`work_units.UnitCoverage`: one key-range read per page, no write for objects a unit holds)
and cuts the objects no unit holds into work units of their own, as discovery would. A pass
that reaches the cursor ends; the next one starts `interval_s` later. An object a unit holds
whose fingerprint is none the units record was rewritten in place: it is recorded, and ignored
or appended as the stream's `on_change` says (`source_changes.py`).

The trade-off is listing cost against delay. A pass costs one LIST request per 1,000 objects
(S3) plus one key-range read of the lease items per page: for a million objects in units of
1,000, 1,000 LISTs and ~1,000 item reads (about $0.005 of LIST requests on S3) — per pass. A
late object waits at most one interval plus one pass. With S3 event notifications (an SQS
queue of `ObjectCreated` events) discovery would learn of every object, late or not, within
seconds and reconciliation would only guard against lost events, so its interval could grow
to a day.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from resources.coordination.items import to_millis
from resources.ingestion.discovery import ListedObject, Lister
from resources.ingestion.source_changes import ChangeHandler, detect_change
from resources.ingestion.work_units import UnitCoverage, plan_units
from resources.key_settings import IGNORE
from resources.stores.base import CoordinationStore


@dataclass(frozen=True)
class ReconcileState:
    """Where the reconciliation pass stands, kept with discovery's state between ticks."""

    after: str | None = None
    """Where the pass in progress continues (None: at the beginning of the source)."""
    last_finished_ms: int = 0
    """When the last pass ended: the next starts `interval_s` later — the interval configured
    now, so shortening it takes effect at once. A pass in progress continues at every tick."""
    in_pass: bool = False
    covering: tuple[str, ...] = ()
    """Units read so far in this pass that hold objects past `after` (`UnitCoverage`)."""
    started_ms: int = 0
    """When the pass in progress started: once it ends, every object that landed before then
    has a unit (what a stream whose keys are not ordered counts as caught up)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "after": self.after,
            "last_finished_ms": self.last_finished_ms,
            "in_pass": self.in_pass,
            "covering": list(self.covering),
            "started_ms": self.started_ms,
        }

    @classmethod
    def from_json(cls, value: dict[str, Any] | None) -> ReconcileState:
        value = value or {}
        return cls(
            value.get("after"),
            int(value.get("last_finished_ms", 0)),
            bool(value.get("in_pass")),
            tuple(value.get("covering") or ()),
            int(value.get("started_ms", 0)),
        )


@dataclass(frozen=True)
class ReconcileStep:
    """What one reconciliation tick did: units created, objects listed, the state to keep."""

    created: list[str]
    """Work units cut this tick from listed objects no unit held; their items now exist."""
    listed: int
    state: ReconcileState
    finished_pass: bool = False
    changed: int = 0
    """Held objects seen with another fingerprint than their units record (`source_changes`)."""


class Reconciliation:
    """Lists the source again behind discovery's cursor, a bounded step per tick, and makes units of
    objects no unit holds."""

    def __init__(
        self,
        store: CoordinationStore,
        stream: str,
        lister: Lister,
        *,
        interval_s: float,
        max_objects: int,
        unit_max_objects: int = 1,
        unit_max_bytes: int = 2**62,
        whole_source: bool = False,
        on_change: str = IGNORE,
    ) -> None:
        self.whole_source = whole_source
        """Keys not ordered (`discovery.ordered_keys: false`): the pass lists the whole source,
        not only what lies behind discovery's cursor (there is none), and is the discovery."""
        self.store = store
        self.changes = ChangeHandler(store, stream, on_change)
        self.sid = store.source_identifier(stream)
        self.lister = lister
        self.interval_ms = to_millis(interval_s)
        self.max_objects = max_objects
        self.unit_max_objects = unit_max_objects
        self.unit_max_bytes = unit_max_bytes

    def step(self, state: ReconcileState, discovery_cursor: str | None) -> ReconcileStep:
        """One bounded step of the pass in progress (or of a new one, if it is due): units
        made of objects no unit holds and of new versions (`on_change: append`), changes
        recorded. Raises the store's and the lister's errors; the step is then redone."""
        now = self.store.now_ms()
        if not state.in_pass:
            if now < state.last_finished_ms + self.interval_ms:
                return ReconcileStep([], 0, state)
            state = ReconcileState(None, state.last_finished_ms, in_pass=True, started_ms=now)
        listed = []
        # Nothing listed yet: nothing lies before the cursor (unless the pass is the discovery).
        done = discovery_cursor is None and not self.whole_source
        if not done:
            page, _ = self.lister(state.after, self.max_objects)
            upto = None if self.whole_source else discovery_cursor
            listed = [o for o in page if upto is None or o.key <= upto]
            done = len(page) < self.max_objects or len(listed) < len(page)
        coverage = UnitCoverage(self.store, self.sid, state.after, state.covering)
        created, changed = self._units(listed, coverage, now)
        if done:
            finished = ReconcileState(None, now, started_ms=state.started_ms)
            return ReconcileStep(created, len(listed), finished, True, changed)
        return ReconcileStep(
            created,
            len(listed),
            replace(state, after=listed[-1].key, covering=tuple(coverage.covering)),
            changed=changed,
        )

    def _units(
        self, listed: list[ListedObject], coverage: UnitCoverage, now: int
    ) -> tuple[list[str], int]:
        """(the units made of this page's unheld objects and new versions, the changes seen)."""
        if not listed:
            return [], 0
        free = set(coverage.uncovered([o.key for o in listed]))
        units = plan_units(
            ((o.key, o.size, o.etag) for o in listed if o.key in free),
            self.unit_max_objects,
            self.unit_max_bytes,
        )
        self.store.create_partitions(
            self.sid,
            [u.key for u in units],
            progress_states=[u.progress_state() for u in units],
        )
        changes = [
            change
            for o in listed
            if o.key not in free
            and (change := detect_change(o, coverage.held.get(o.key, ()), now)) is not None
        ]
        return [u.key for u in units] + self.changes.handle(changes), len(changes)
