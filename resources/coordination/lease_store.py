"""The `LeaseStore` interface: the one durable record of who may work on which source partition.

Both backends (`resources/stores/sqlite`, `resources/stores/dynamodb`) implement it and pass the
same contract suite (`tests/coordination/test_lease_store_contract.py`). Every write by an owner
goes through a `LeaseToken` (owner + epoch); the backends make each such write conditional on
both still holding, so a zombie whose lease was taken over can never write, whatever its local
clock believes.
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

from resources.coordination import metrics as m
from resources.coordination import transitions
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.errors import (
    PartitionNotFoundError,
    PartitionNotOwnedError,
    PartitionUnavailableError,
    StoreUnavailableError,
)
from resources.coordination.global_state import GlobalStateLeases
from resources.coordination.items import (
    NOT_GIVEN,
    Clock,
    ItemType,
    LeaseItem,
    LeaseToken,
    to_millis,
)
from resources.coordination.metrics import CoordinatorMetrics
from resources.coordination.status import StoreStatus
from resources.coordination.transitions import Refusal, Transition


class LeaseStore(GlobalStateLeases, StoreStatus, ABC):
    """One coordination store. The operations, their metrics and the decisions are here; a
    backend provides `_apply` (one conditional write: DynamoDB `UpdateItem` with a condition,
    one SQLite `BEGIN IMMEDIATE` transaction) and the reads.

    Errors, as each method's "Raises" names them. "The store errors" are the two every call
    that reads or writes the store may raise, both `LeaseStoreError`s naming the store and the
    operation: `StoreUnavailableError` (not reached, or throttled, within the bounded retry;
    a write may or may not have landed, so a caller retries by reading again) and
    `StoreRefusedError` (refused in a way no retry changes: access denied, a table or file
    that is not there or not a lease store, a store opened read-only). A fenced write (through
    a `LeaseToken`) raises `PartitionNotOwnedError` when the token no longer holds — the
    lease expired and was taken over, or the item is gone — and then wrote nothing. Reads
    never write; `get` and the key reads are strongly consistent, the status-index reads
    (DynamoDB's GSI) may lag the items."""

    backend: str = "abstract"

    def __init__(
        self,
        *,
        partition_prefix: str | None = None,
        ttl_seconds: float | None = None,
        clock: Clock = time.time,
    ) -> None:
        self.partition_prefix = partition_prefix
        self.ttl_seconds = ttl_seconds
        self.clock = clock
        self.metrics = CoordinatorMetrics()
        self._seq = 0
        self._seq_lock = threading.Lock()

    # -- naming --------------------------------------------------------------------------------

    def source_identifier(self, stream: str, item_type: ItemType = ItemType.PARTITION) -> str:
        """`[partition_prefix|]stream|type`, as docs/architecture.md prescribes. Pure: reads
        nothing, raises nothing."""
        parts = [self.partition_prefix] if self.partition_prefix else []
        return "|".join([*parts, stream, item_type.value])

    def now_ms(self) -> int:
        """The store's clock (`clock`) now, in epoch milliseconds: what writes stamp and
        guards compare against. Raises nothing."""
        return to_millis(self.clock())

    def expiration_at(self, now_ms: int) -> int | None:
        """TTL attribute value (epoch seconds, DynamoDB's TTL unit) for a write at `now_ms`;
        None when no TTL is configured. Raises nothing."""
        if self.ttl_seconds is None:
            return None
        return int(now_ms // 1000 + self.ttl_seconds)

    # -- lifecycle -----------------------------------------------------------------------------

    def close_store(self) -> None:  # noqa: B027 - optional hook
        """Release connections. A backend flushes metrics first (`flush_metrics`) so nothing
        counted is lost: that flush raises the store errors when the store cannot be written
        (the counts stay in this process). The base does nothing and raises nothing."""

    # -- what a backend provides ---------------------------------------------------------------
    # The state machine is `resources.coordination.transitions`; a backend only stores items,
    # applies a transition's decision as one conditional write, and finds candidates.

    @abstractmethod
    def _insert_absent(self, items: Sequence[LeaseItem]) -> int:
        """Insert the items that do not exist yet (batched); how many were new."""

    @abstractmethod
    def _apply(
        self, source_identifier: str, partition_key: str, transition: Transition
    ) -> tuple[LeaseItem | None, LeaseItem | None]:
        """Apply `transition` if its guard holds of the stored item, in one conditional write:
        `(new item, None)`, or `(None, the item as stored, None if absent)` when refused."""

    @abstractmethod
    def _available(self, source_identifier: str, now_ms: int) -> Iterator[LeaseItem]:
        """Candidates for `acquire_next` in acquisition order (may be stale: the guard of the
        acquisition decides)."""

    @abstractmethod
    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None:
        """The item of (`source_identifier`, `partition_key`) as stored, with its progress,
        strongly consistent; None if there is none. Read-only. Raises the store errors."""

    @abstractmethod
    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        """ASSIGNED items whose ownership expired and CLOSED items whose `reOpenAt` passed,
        oldest first: work a crashed or failed attempt left behind. With `unassigned_for_s`,
        also UNASSIGNED items created or handed back longer ago than that: their run failed
        before it took them (or was never launched), or a stopping run gave them back, and no
        run is coming for them. Bounded by `limit`, so a sensor can ask every tick at constant
        cost. Read-only: the acquisition decides. Raises the store errors."""

    @abstractmethod
    def pending_partitions(self, source_identifier: str, limit: int) -> list[LeaseItem]:
        """Up to `limit` items still to be worked on: UNASSIGNED (creation order), then
        ASSIGNED, then CLOSED (by `reOpenAt`) — never COMPLETED, so never a dead letter. What
        closing asks (has the stream's ingestion caught up?), so it reads by status, one index
        range per status and stopping at `limit`: O(pending items), however many completed
        ones history holds. The order puts the items that are pending whatever their details
        first, so a caller deciding "anything pending?" usually reads one. Read-only; an
        index may lag the items (DynamoDB's GSI). Raises the store errors."""

    @abstractmethod
    def missing_keys(self, source_identifier: str, partition_keys: Sequence[str]) -> list[str]:
        """The keys of `partition_keys` with no lease item, in input order, each once.

        Reads by key in batches — O(len(partition_keys)), never a scan of the source
        identifier — because its callers hold a listing, not the store's contents: discovery
        asking which objects behind its cursor it never leased, and the completeness check
        asking it of every source object. Read-only. Raises the store errors."""

    @abstractmethod
    def items_between(
        self, source_identifier: str, after: str | None, upto: str
    ) -> Iterator[LeaseItem]:
        """Items whose partition key is > `after` (None: from the first) and <= `upto`, in key
        order (code point order, which is UTF-8 byte order: the order listings come in).

        A key range of the table's range key — never a scan — so a caller walking a listing
        page by page can walk the lease items beside it and read each item once per pass:
        how a listed object is found inside a work unit whose key is another object's.
        Read-only. Raises the store errors (while iterating: it reads page by page)."""

    @abstractmethod
    def completed_between(
        self, source_identifier: str, after: str | None, before_ms: int, limit: int
    ) -> list[LeaseItem]:
        """COMPLETED items whose `partitionPriority` (their completion time) is after `after`
        (a priority; None: from the first) and before `before_ms`, oldest first, at most
        `limit`: one range of the status index (DynamoDB's GSI may lag; callers only tidy up
        with it). A caller keeping the last priority it saw reads each item once, ever: how
        retention takes old work units out of Dagster at a cost that grows with new work.
        Read-only. Raises the store errors."""

    @abstractmethod
    def iter_items(
        self, source_identifier: str | None = None, *, progress: bool = True
    ) -> Iterator[LeaseItem]:
        """Every item (of one source identifier, or all). For status and full audits, not hot
        paths. With `progress=False` the items come without their progress state (None): a
        work unit's lists its objects (~40 KB for 1,000 keys), so reading every item's
        status costs O(units) small reads, not O(objects) bytes. Read-only. Raises the store
        errors."""

    @abstractmethod
    def source_identifiers(self) -> list[str]:
        """Each source identifier that has at least one item, once. Reads every item (for
        status, not hot paths). Read-only. Raises the store errors."""

    # -- partition operations ------------------------------------------------------------------

    def create_partitions(
        self,
        source_identifier: str,
        partition_keys: Sequence[str],
        progress_state: str | None = None,
        progress_states: Sequence[str | None] | None = None,
    ) -> int:
        """Create UNASSIGNED items for keys that have none; idempotent; batched.

        Creation order (the order of `partition_keys`, then call order) is the UNASSIGNED
        acquisition order. `progress_states`, one per key, gives each item its own initial
        progress (a work unit's objects); else every item gets `progress_state`. Returns how
        many items were new (an existing item is left as it is, whatever its status).

        Raises `ValueError` when `progress_states` does not hold one state per key, and the
        store errors: batches written before a failing one stay, and calling again with the
        same keys creates the rest.
        """
        if progress_states is None:
            progress_states = [progress_state] * len(partition_keys)
        if len(progress_states) != len(partition_keys):
            raise ValueError("one progress state per partition key")
        initial = dict(zip(partition_keys, progress_states, strict=True))
        keys = list(initial)
        if not keys:
            return 0
        now = self.now_ms()
        with self._seq_lock:
            base, self._seq = self._seq, self._seq + len(keys)
        items = [
            transitions.created(
                source_identifier,
                key,
                now_ms=now,
                seq=base + i,
                progress_state=initial[key],
                expiration_time=self.expiration_at(now),
            )
            for i, key in enumerate(keys)
        ]
        created = self._insert_absent(items)
        self.metrics.incr(source_identifier, m.PARTITIONS_CREATED, created)
        return created

    def acquire(
        self, source_identifier: str, partition_key: str, owner: str, timeout_s: float
    ) -> LeaseItem:
        """Acquire a named partition, bumping its epoch: returns the item as written, ASSIGNED
        to `owner` until now + `timeout_s`. One conditional write, which only one of racing
        owners wins. Raises `PartitionNotFoundError` (no such item),
        `PartitionUnavailableError` (whose `.current` tells e.g. that it is COMPLETED, or held
        by another owner), and the store errors."""
        item, current = self._apply(
            source_identifier, partition_key, self._acquisition(owner, timeout_s, self.now_ms())
        )
        if item is not None:
            self.metrics.incr(source_identifier, m.PARTITIONS_ACQUIRED)
            return item
        if current is None:
            self.metrics.incr(source_identifier, m.PARTITION_NOT_FOUND)
            raise PartitionNotFoundError(source_identifier, partition_key)
        raise PartitionUnavailableError(current)

    def acquire_next(
        self, source_identifier: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        """Acquire the next available partition: ASSIGNED whose ownership expired, then CLOSED
        whose `reOpenAt` passed, then UNASSIGNED in creation order; returns it as written,
        as `acquire` does. None if there is none. A candidate another owner takes first is
        skipped, not an error. Raises the store errors."""
        now = self.now_ms()
        transition = self._acquisition(owner, timeout_s, now)
        for candidate in self._available(source_identifier, now):
            item, _ = self._apply(source_identifier, candidate.partition_key, transition)
            if item is not None:  # else another owner took it first: try the next one
                self.metrics.incr(source_identifier, m.PARTITIONS_ACQUIRED)
                return item
        self.metrics.incr(source_identifier, m.NO_PARTITIONS_ACQUIRED)
        return None

    def _acquisition(self, owner: str, timeout_s: float, now: int) -> Transition:
        return transitions.acquire(
            owner,
            now_ms=now,
            timeout_ms=to_millis(timeout_s),
            expiration_time=self.expiration_at(now),
        )

    def renew(
        self, token: LeaseToken, timeout_s: float, progress_state: str | None = NOT_GIVEN
    ) -> LeaseItem:
        """Extend ownership to now + `timeout_s` (and the TTL); save `progress_state` unless
        it is `NOT_GIVEN`. Fenced: returns the item as written. Raises
        `PartitionNotOwnedError` when `token` no longer holds (nothing written: stop the
        work), and the store errors."""
        return self._owner_write(token, self.renewal(token, timeout_s, progress_state))

    def renewal(
        self, token: LeaseToken, timeout_s: float, progress_state: str | None
    ) -> Transition:
        """The renew transition (`renew`'s write), for a backend transaction that renews the
        lease beside its own writes (a commit that does not complete, a rollup batch). Only
        builds it: reads nothing, raises nothing."""
        now = self.now_ms()
        return transitions.renew(
            token,
            now_ms=now,
            timeout_ms=to_millis(timeout_s),
            progress_state=progress_state,
            expiration_time=self.expiration_at(now),
        )

    def close(
        self,
        token: LeaseToken,
        backoff: ReopenBackoff,
        max_closed_count: int,
        reason: str = "",
        progress_state: str | None = NOT_GIVEN,
    ) -> LeaseItem:
        """CLOSED, `closedCount`+1, until `backoff` says for that many closes. Past
        `max_closed_count` closes, the item is dead-lettered instead: COMPLETED with
        `deadLetterReason`, so it is never acquired again but stays visible in status and
        checks. Fenced.

        The delay depends on the stored `closedCount`, which the token does not carry, so the
        item is read first. The read only sizes the delay; the fenced write still decides. It
        cannot be stale where it matters: only a close changes `closedCount`, and a close ends
        ownership, so while `token` holds the count stays as read. Closes are rare (an
        unreadable object), so the extra read costs nothing on the per-partition path.

        Returns the item as written (CLOSED, or COMPLETED as a dead letter). Raises
        `PartitionNotOwnedError` when `token` no longer holds (nothing written), and the store
        errors."""
        now = self.now_ms()
        current = self.get(token.source_identifier, token.partition_key)
        closes = (0 if current is None else current.closed_count) + 1
        closing = transitions.close(
            token,
            now_ms=now,
            reopen_after_ms=to_millis(backoff.delay_s(closes)),
            max_closed_count=max_closed_count,
            progress_state=progress_state,
            expiration_time=self.expiration_at(now),
        )
        item, current = self._fenced_apply(token, closing)
        if item is None:
            if transitions.refusal(closing, current) is not Refusal.CLOSED_TOO_OFTEN:
                raise self._refused(token, closing, current)
            assert current is not None  # closed too often: an item that exists, read back
            item = self._owner_write(
                token,
                transitions.dead_letter(
                    token,
                    now_ms=now,
                    reason=reason or f"closed {current.closed_count + 1} times",
                    progress_state=progress_state,
                    expiration_time=self.expiration_at(now),
                ),
            )
        self.metrics.incr(token.source_identifier, m.PARTITIONS_CLOSED)
        return item

    def give_up(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        """Back to UNASSIGNED so another owner can take it at once; saves `progress_state`
        unless it is `NOT_GIVEN`. Fenced: returns the item as written. Raises
        `PartitionNotOwnedError` when `token` no longer holds, and the store errors."""
        return self._owner_write(token, self.giving_up(token, progress_state))

    def giving_up(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> Transition:
        """The give-up transition, for a backend transaction that ends a lease with it (a merge
        commit hands its job lease back this way). Only builds it: reads nothing, raises
        nothing."""
        now = self.now_ms()
        return transitions.give_up(
            token,
            now_ms=now,
            progress_state=progress_state,
            expiration_time=self.expiration_at(now),
        )

    def complete(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        """COMPLETED: never acquired again; saves `progress_state` unless it is `NOT_GIVEN`.
        Fenced: returns the item as written. Raises `PartitionNotOwnedError` when `token` no
        longer holds, and the store errors."""
        item = self._owner_write(token, self.completion(token, progress_state))
        self.metrics.incr(token.source_identifier, m.PARTITIONS_COMPLETED)
        return item

    def completion(self, token: LeaseToken, progress_state: str | None) -> Transition:
        """The complete transition, for a backend transaction that ends a lease with it (a
        commit that completes its unit). Only builds it: reads nothing, raises nothing."""
        now = self.now_ms()
        return transitions.complete(
            token,
            now_ms=now,
            progress_state=progress_state,
            expiration_time=self.expiration_at(now),
        )

    # -- dead letters: an operator's way back ---------------------------------------------------

    def dead_letters(self, source_identifier: str) -> list[LeaseItem]:
        """The dead-lettered items of one source identifier, in key order, without their
        progress. Reads every item without its progress, as `status` does (O(units) small
        reads): dead letters are COMPLETED, and the status index does not tell them apart.
        Read-only. Raises the store errors."""
        found = [
            item
            for item in self.iter_items(source_identifier, progress=False)
            if transitions.is_dead_letter(item)
        ]
        return sorted(found, key=lambda item: item.partition_key)

    def redrive(self, source_identifier: str, partition_key: str) -> LeaseItem:
        """Put a dead letter back to be retried: CLOSED, due now, `closedCount` 0, its reason
        removed, its progress kept (objects already committed are not read again). One
        conditional write that applies only while the item is still a dead letter, so it can
        never take back a unit that completed, or one another operator re-drove and a run
        holds. Returns the item as written. Raises `PartitionNotFoundError`, or
        `PartitionUnavailableError` (its `.current` says what the item is instead) when it is
        not a dead letter, and the store errors."""
        now = self.now_ms()
        item, current = self._apply(
            source_identifier,
            partition_key,
            transitions.redrive(now_ms=now, expiration_time=self.expiration_at(now)),
        )
        if item is not None:
            self.metrics.incr(source_identifier, m.PARTITIONS_REDRIVEN)
            return item
        if current is None:
            self.metrics.incr(source_identifier, m.PARTITION_NOT_FOUND)
            raise PartitionNotFoundError(source_identifier, partition_key)
        raise PartitionUnavailableError(current)

    # -- fenced writes and their metrics -------------------------------------------------------

    def _fenced_apply(
        self, token: LeaseToken, transition: Transition
    ) -> tuple[LeaseItem | None, LeaseItem | None]:
        try:
            return self._apply(token.source_identifier, token.partition_key, transition)
        except StoreUnavailableError:
            self.metrics.incr(token.source_identifier, m.update_errors(transition.action))
            raise

    def _owner_write(self, token: LeaseToken, transition: Transition) -> LeaseItem:
        item, current = self._fenced_apply(token, transition)
        if item is None:
            raise self._refused(token, transition, current)
        return item

    def _refused(
        self, token: LeaseToken, transition: Transition, current: LeaseItem | None
    ) -> PartitionNotOwnedError:
        """Count a refused owner write and say so: the lease was lost or taken over."""
        sid = token.source_identifier
        self.metrics.incr(sid, m.update_errors(transition.action))
        self.metrics.incr(sid, m.PARTITION_NOT_FOUND if current is None else m.PARTITION_NOT_OWNED)
        return PartitionNotOwnedError(token, transition.action)

    # -- metrics -------------------------------------------------------------------------------

    @abstractmethod
    def _add_metrics(self, deltas: dict[str, dict[str, int]]) -> None:
        """Atomically add counter deltas: {source_identifier: {metric: delta}}."""

    @abstractmethod
    def read_metrics(self) -> dict[str, dict[str, int]]:
        """The persisted counters, {source_identifier: {metric: count}}: what every process's
        `flush_metrics` added up (not this process's unflushed counts). Read-only. Raises the
        store errors."""

    def flush_metrics(self) -> None:
        """Persist counters gathered in this process. Done in batches, not per operation, so
        metrics cost no store call on the per-partition path. Raises the store errors; the
        counts are put back first, so a later flush still adds them."""
        deltas = self.metrics.drain()
        if deltas:
            try:
                self._add_metrics(deltas)
            except Exception:
                self.metrics.restore(deltas)
                raise
