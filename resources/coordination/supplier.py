"""The partition supplier's global state, as others read it: where discovery is and whether it
has caught up with its source.

Discovery (`resources/ingestion/discovery.py`) writes it under the supplier lease; compaction
reads it to decide when a table partition may close, and may not import ingestion (its
sibling), so the names both agree on live here, below both.
"""

from __future__ import annotations

from resources.coordination.lease_store import LeaseStore

SUPPLIER_STATE = "discovery"
"""The global-state item discovery keeps its cursor and progress in."""

EVENT_COUNTS = "event_counts"
"""Notifications discovery's totals since it began, by what became of each event (objects,
duplicates, outside the source, re-uploaded changed, ...): `leasehold status` shows them."""

CAUGHT_UP_MS = "caught_up_ms"
"""When (epoch ms) the latest discovery tick that reached the end of the listing started
listing: every object that landed before then has a lease item (reconciliation aside, which
finds objects landing behind the cursor)."""


def caught_up_ms(store: LeaseStore, stream: str) -> int | None:
    """The stream's `CAUGHT_UP_MS`, None while discovery never reached the end of its listing.
    Read without the supplier lease: it only ever moves forward, so a stale read is merely
    older (closing waits a little longer), never wrong."""
    value = store.read_global_state(stream, SUPPLIER_STATE).get(CAUGHT_UP_MS)
    return None if value is None else int(value)


def record_caught_up(
    store: LeaseStore, stream: str, owner: str, timeout_s: float, at_ms: int
) -> bool:
    """Move the stream's `CAUGHT_UP_MS` forward to `at_ms` under the supplier lease (a pass that
    is the discovery, for keys that are not ordered, ends outside discovery's tick); False when
    another node holds the lease (the next pass records it). Raises the store errors."""
    supplier = store.acquire_global_state(stream, SUPPLIER_STATE, owner, timeout_s)
    if supplier is None:
        return False
    state = dict(supplier.progress or {})
    state[CAUGHT_UP_MS] = max(at_ms, int(state.get(CAUGHT_UP_MS, 0)))
    store.release_global_state(supplier.token, state)
    return True
