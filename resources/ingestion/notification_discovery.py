"""Discovery by S3 event notifications: a tick costs the messages that arrived, never the bucket.

Under the supplier lease (one node at a time), a tick
1. claims the objects of units a dead tick created without claiming them, and (once, for a
   stream that moved from listing) indexes the units listing made (`claimed_units.py`);
2. receives up to `max_messages` messages (hidden from other receivers for `visibility_s`),
   parses each (`resources/notifications/s3_events.py`: S3, SNS-wrapped, EventBridge), keeps per
   key the latest event (S3's sequencer), and drops — counting each — events for another bucket
   or a key outside the stream's prefix, objects whose latest event is their removal (the queue
   gets `ObjectRemoved` events too), messages that are no S3 event (logged with their id), and
   objects already held (a duplicate or redelivered event; one whose ETag differs from its
   claim's — or, a fingerprint unknown, its size — was rewritten in place: recorded, then ignored
   or ingested as a new version as the stream's `on_change` says, `source_changes.py`). The
   event's size and ETag are the unit's (an event without them costs a HEAD): no request per
   object to S3, so discovering 10⁶ objects
   costs 2·10⁵ SQS calls, not 10⁶ more. An object deleted after its event was handled (its
   removal event in a later tick) is in a unit already: its read finds it missing, retries and
   dead-letters it, visibly — the same as any source object deleted before it was read;
3. creates claimed work units of the rest and only then deletes the messages: a crash before
   leaves them to be received again once their visibility times out, and the units made already
   hold their objects, so nothing is ingested twice;
4. runs one bounded step of the backstop pass — the whole source listed, objects without a claim
   made units, changed ones recorded — every `backstop_interval` (S3 delivers events at least
   once, but a queue can lose them: purged, expired, or a notification configuration briefly
   missing).
A tick whose last receive found the queue empty records when it started as `caught_up_ms`.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

from resources.coordination.items import to_millis
from resources.coordination.object_claims import ObjectClaim
from resources.coordination.supplier import CAUGHT_UP_MS, EVENT_COUNTS, SUPPLIER_STATE
from resources.ingestion.claimed_units import ClaimedUnits
from resources.ingestion.discovery import DiscoveryResult, ListedObject, Lister
from resources.ingestion.reconciliation import ReconcileState, ReconcileStep
from resources.ingestion.source_changes import ChangeHandler, claim_version, detect_change
from resources.key_settings import IGNORE
from resources.notifications.queue import EventQueue, QueueMessage
from resources.notifications.s3_events import EventMessageError, ObjectEvent, parse_message
from resources.objects.base import ObjectInfo, ObjectStore
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)

HEAD_THREADS = 16
"""HEAD requests in flight at once: S3 answers each in ~10-20 ms; a tick of 20,000 events
checks them in seconds."""


@dataclass(frozen=True)
class SourceLocation:
    """Where the stream's objects are: the bucket and key prefix events are matched against,
    and the store that HEADs and lists them (keys relative to the prefix)."""

    bucket: str
    prefix: str
    store: ObjectStore
    lister: Lister

    def relative(self, event: ObjectEvent) -> str | None:
        """The event's key as the stream lists it, None if outside the stream's source."""
        if event.bucket != self.bucket or event.key.endswith("/"):
            return None
        if not self.prefix:
            return event.key
        head = self.prefix + "/"
        return event.key[len(head) :] if event.key.startswith(head) else None


@dataclass(frozen=True)
class NotificationStep:
    """What a notifications tick did: discovery's result and the backstop pass's step."""

    found: DiscoveryResult
    backstop: ReconcileStep
    counts: Counter[str]


class NotificationDiscovery:
    """Receives a stream's S3 events and turns the objects they name into claimed work units."""

    def __init__(
        self,
        store: CoordinationStore,
        stream: str,
        queue: EventQueue,
        source: SourceLocation,
        owner: str,
        *,
        timeout_s: float = 60.0,
        max_messages: int = 20_000,
        visibility_s: int = 300,
        backstop_interval_s: float = 86400.0,
        unit_max_objects: int = 1,
        unit_max_bytes: int = 2**62,
        on_change: str = IGNORE,
    ) -> None:
        self.store = store
        self.changes = ChangeHandler(store, stream, on_change, claims=True)
        self.stream = stream
        self.queue = queue
        self.source = source
        self.owner = owner
        self.timeout_s = timeout_s
        self.max_messages = max_messages
        self.visibility_s = visibility_s
        self.backstop_interval_ms = to_millis(backstop_interval_s)
        self.unit_max_objects = unit_max_objects
        self.unit_max_bytes = unit_max_bytes

    def discover(self, backstop: ReconcileState) -> NotificationStep:
        """One tick (see the module's docstring). Raises the store's and the queue's errors
        (`QueueError`); messages not deleted come back after their visibility timeout."""
        idle = ReconcileStep([], 0, backstop)
        supplier = self.store.acquire_global_state(
            self.stream, SUPPLIER_STATE, self.owner, self.timeout_s
        )
        if supplier is None:
            skipped = DiscoveryResult([], 0, None, "another node is running discovery")
            return NotificationStep(skipped, idle, Counter())
        state = dict(supplier.progress or {})
        units = ClaimedUnits(
            self.store,
            self.stream,
            supplier.token,
            state,
            self.timeout_s,
            self.unit_max_objects,
            self.unit_max_bytes,
        )
        try:
            started_ms = self.store.now_ms()
            units.finish_pending()
            counts: Counter[str] = Counter()
            drained = False
            if units.index_step(max(10, self.max_messages // self.unit_max_objects)):
                drained = self._messages(units, counts)
                step = self._backstop(units, backstop)
            else:
                step, counts["ticks indexing units listing made (messages wait)"] = idle, 1
            if drained:
                state[CAUGHT_UP_MS] = max(started_ms, int(state.get(CAUGHT_UP_MS, 0)))
            state[EVENT_COUNTS] = dict(Counter(state.get(EVENT_COUNTS) or {}) + counts)
            found = DiscoveryResult(
                units.created, len(units.created), None, None, counts["objects"] + step.listed
            )
            return NotificationStep(found, step, counts)
        finally:
            self.store.release_global_state(supplier.token, state)

    def _messages(self, units: ClaimedUnits, counts: Counter[str]) -> bool:
        """Receive, make units (and record changes), delete; True if the queue was drained."""
        messages, drained = self.queue.receive(self.max_messages, self.visibility_s)
        counts["messages"] = len(messages)
        latest = self._latest_events(messages, counts)
        created = {key: e for key, e in latest.items() if e.created}
        counts["removed"] += len(latest) - len(created)
        heads = self._heads([k for k, e in created.items() if e.size < 0 or not e.etag])
        counts["deleted since"] += sum(1 for info in heads.values() if info is None)
        present = [_seen(k, e, heads) for k, e in created.items() if heads.get(k, e) is not None]
        held = units.held([o.key for o in present])
        changed = self._changes(units, [o for o in present if o.key in held], held)
        counts["changed"] += changed
        counts["duplicates"] += len(held) - changed
        new = [(o.key, o.size, o.etag) for o in present if o.key not in held]
        units.create(new)
        counts["objects"] += len(new)
        counts["refused deletes"] += self.queue.delete(messages)
        return drained

    def _changes(
        self,
        units: ClaimedUnits,
        seen: Sequence[ListedObject],
        held: Mapping[str, ObjectClaim],
    ) -> int:
        """Record the held objects of `seen` whose fingerprint is not their claim's (and, under
        `on_change: append`, make units of their new versions); returns how many changed."""
        now = self.store.now_ms()
        changes = [
            change
            for o in seen
            if (change := detect_change(o, [claim_version(held[o.key])], now)) is not None
        ]
        units.created += self.changes.handle(changes)
        return len(changes)

    def _latest_events(
        self, messages: Sequence[QueueMessage], counts: Counter[str]
    ) -> dict[str, ObjectEvent]:
        """Per key of the stream's source, its latest event among `messages`."""
        latest: dict[str, ObjectEvent] = {}
        for message in messages:
            try:
                events = parse_message(message.body)
            except EventMessageError as exc:
                counts["not S3 events"] += 1
                log.warning(
                    "%s: message %s on the queue is not an S3 event (%s); deleted: %.200s",
                    self.stream,
                    message.message_id,
                    exc,
                    message.body,
                )
                continue
            for event in events:
                key = self.source.relative(event)
                if key is None:
                    counts["outside the source"] += 1
                    continue
                seen = latest.get(key)
                if seen is not None:
                    counts["repeated in the batch"] += 1
                if seen is None or event.later_than(seen):
                    latest[key] = replace(event, key=key)
        return latest

    def _heads(self, keys: list[str]) -> dict[str, ObjectInfo | None]:
        """Each key's size and fingerprint now (a HEAD each, in parallel), for events that do
        not say them; None where it is gone."""
        if not keys:
            return {}
        with ThreadPoolExecutor(min(HEAD_THREADS, len(keys))) as pool:
            return dict(zip(keys, pool.map(self.source.store.info, keys), strict=True))

    def _backstop(self, units: ClaimedUnits, state: ReconcileState) -> ReconcileStep:
        """One page of the backstop pass when one is due or in progress."""
        now = self.store.now_ms()
        if not state.in_pass:
            if now < state.last_finished_ms + self.backstop_interval_ms:
                return ReconcileStep([], 0, state)
            state = ReconcileState(None, state.last_finished_ms, in_pass=True)
        page, _ = self.source.lister(state.after, self.max_messages)
        held = units.held([o.key for o in page])
        changed = self._changes(units, [o for o in page if o.key in held], held)
        made = units.create((o.key, o.size, o.etag) for o in page if o.key not in held)
        created = [u.key for u in made]
        if made:
            log.info(
                "%s: the backstop pass found %d objects no event announced",
                self.stream,
                sum(len(u.objects) for u in made),
            )
        if len(page) < self.max_messages:
            return ReconcileStep(created, len(page), ReconcileState(None, now), True, changed)
        return ReconcileStep(created, len(page), replace(state, after=page[-1].key), False, changed)


def _seen(key: str, event: ObjectEvent, heads: Mapping[str, ObjectInfo | None]) -> ListedObject:
    """The object an event names: its size and ETag from the event, or from the HEAD made
    when the event lacks them."""
    head = heads.get(key)
    if head is None:
        return ListedObject(key, event.size, event.etag)
    return ListedObject(key, head.size, head.etag)
