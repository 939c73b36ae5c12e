"""The lease store: the one durable record of who may work on which source partition.

Both backends (SQLite, DynamoDB) implement `LeaseStore` and pass the same contract suite
(`tests/test_lease_store_contract.py`). The item format is Data Prepper's (attribute names in
`ATTR`), extended with `version` (optimistic lock), `epoch` (fencing token, bumped at every
acquisition), `expirationTime` (TTL) and `deadLetterReason`.

Every write by an owner goes through a `LeaseToken` (owner + epoch). The backends make each
such write conditional on both still holding, so a zombie whose lease was taken over can never
write, whatever its local clock believes.
"""

from __future__ import annotations

import enum
import json
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from resources.metrics import CoordinatorMetrics

if TYPE_CHECKING:
    from resources.ledger import (
        CommitRecord,
        CommitResult,
        RegisteredObject,
        SmallObject,
        TablePartition,
    )

Clock = Callable[[], float]
"""Seconds since the epoch. Injected so contract tests can move time without sleeping."""


class PartitionStatus(str, enum.Enum):
    UNASSIGNED = "UNASSIGNED"
    ASSIGNED = "ASSIGNED"
    CLOSED = "CLOSED"
    COMPLETED = "COMPLETED"


class ItemType(str, enum.Enum):
    """The `type` part of `sourceIdentifier`: keeps partitions and global state apart."""

    PARTITION = "partition"
    GLOBAL = "global"


# Data Prepper's attribute names, plus ours. One place, so both backends agree.
ATTR = {
    "sid": "sourceIdentifier",
    "key": "sourcePartitionKey",
    "owner": "partitionOwner",
    "progress": "partitionProgressState",
    "ownership_timeout": "partitionOwnershipTimeout",
    "status": "sourcePartitionStatus",
    "reopen_at": "reOpenAt",
    "closed_count": "closedCount",
    "version": "version",
    "epoch": "epoch",
    "priority": "partitionPriority",
    "status_key": "sourceStatusCombinationKey",
    "expiration": "expirationTime",
    "dead_letter": "deadLetterReason",
}

NOT_GIVEN: Any = object()
"""Sentinel: 'leave progress state as it is' (None would clear it)."""


def to_millis(seconds: float) -> int:
    return int(round(seconds * 1000))


def priority_at(millis: int, seq: int = 0) -> str:
    """Sortable `partitionPriority`.

    As in Data Prepper, the GSI sort key means different things per status: creation order for
    UNASSIGNED, ownership timeout for ASSIGNED, `reOpenAt` for CLOSED. That turns "expired
    ASSIGNED" and "reopened CLOSED" into key-range queries instead of filtered scans.
    """
    return f"{millis:015d}.{seq:06d}"


def status_key(source_identifier: str, status: PartitionStatus) -> str:
    return f"{source_identifier}|{status.value}"


@dataclass(frozen=True)
class LeaseItem:
    source_identifier: str
    partition_key: str
    status: PartitionStatus
    owner: str | None
    progress_state: str | None
    ownership_timeout_ms: int | None
    reopen_at_ms: int | None
    closed_count: int
    version: int
    epoch: int
    priority: str
    expiration_time: int | None
    dead_letter_reason: str | None = None

    @property
    def token(self) -> LeaseToken:
        if self.owner is None or self.status is not PartitionStatus.ASSIGNED:
            raise ValueError(f"{self.partition_key!r} is not owned ({self.status.value})")
        return LeaseToken(self.source_identifier, self.partition_key, self.owner, self.epoch)

    @property
    def progress(self) -> Any:
        return None if self.progress_state is None else json.loads(self.progress_state)

    def is_available(self, now_ms: int) -> bool:
        if self.status is PartitionStatus.UNASSIGNED:
            return True
        if self.status is PartitionStatus.ASSIGNED:
            return self.ownership_timeout_ms is not None and self.ownership_timeout_ms < now_ms
        if self.status is PartitionStatus.CLOSED:
            return self.reopen_at_ms is not None and self.reopen_at_ms <= now_ms
        return False


@dataclass(frozen=True)
class LeaseToken:
    """Proof of ownership that every owner write is fenced on."""

    source_identifier: str
    partition_key: str
    owner: str
    epoch: int


# ---------------------------------------------------------------------------------------------
# Errors. Each names what it is about; the store never swallows one.


class LeaseStoreError(Exception):
    pass


class PartitionNotFoundError(LeaseStoreError):
    def __init__(self, source_identifier: str, partition_key: str) -> None:
        super().__init__(f"no lease item for {source_identifier!r} / {partition_key!r}")
        self.source_identifier = source_identifier
        self.partition_key = partition_key


class PartitionUnavailableError(LeaseStoreError):
    """The named partition exists but cannot be acquired now; `current` says why."""

    def __init__(self, current: LeaseItem) -> None:
        detail = current.status.value
        if current.status is PartitionStatus.ASSIGNED:
            detail += f" to {current.owner} (epoch {current.epoch})"
        super().__init__(f"{current.partition_key!r} is not available: {detail}")
        self.current = current


class PartitionNotOwnedError(LeaseStoreError):
    """A fenced write was refused: the owner or epoch moved on (or the item is gone)."""

    def __init__(self, token: LeaseToken, action: str) -> None:
        super().__init__(
            f"{action} refused for {token.partition_key!r}: {token.owner} no longer holds "
            f"epoch {token.epoch} of it (lease lost or taken over)"
        )
        self.token = token
        self.action = action


class StoreUnavailableError(LeaseStoreError):
    """The store could not be reached (or kept throttling) within the retry bound."""


class StoreConfigError(LeaseStoreError, ValueError):
    """Invalid configuration, detected before any work. `field` names the culprit."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"invalid lease store configuration: {field}: {message}")
        self.field = field


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class StatusSummary:
    """What `leasehold status` prints for one source identifier."""

    source_identifier: str
    counts: dict[str, int]
    oldest_expired: LeaseItem | None
    dead_letters: list[LeaseItem]
    metrics: dict[str, int]


class LeaseStore(ABC):
    """One coordination store. Backends implement the abstract operations; each is a single
    conditional write where the backend allows it (DynamoDB `UpdateItem` with a condition, one
    SQLite `BEGIN IMMEDIATE` transaction)."""

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

    # -- naming --------------------------------------------------------------------------------

    def source_identifier(self, stream: str, item_type: ItemType = ItemType.PARTITION) -> str:
        """`[partition_prefix|]stream|type`, as ARCHITECTURE §4 prescribes."""
        parts = [self.partition_prefix] if self.partition_prefix else []
        return "|".join([*parts, stream, item_type.value])

    def now_ms(self) -> int:
        return to_millis(self.clock())

    def expiration_at(self, now_ms: int) -> int | None:
        """TTL attribute value (epoch seconds, DynamoDB's TTL unit) for a write at `now_ms`."""
        if self.ttl_seconds is None:
            return None
        return int(now_ms // 1000 + self.ttl_seconds)

    # -- lifecycle -----------------------------------------------------------------------------

    def close_store(self) -> None:  # noqa: B027 - optional hook
        """Release connections. Flushes metrics first so nothing counted is lost."""

    # -- partition operations ------------------------------------------------------------------

    @abstractmethod
    def create_partitions(
        self,
        source_identifier: str,
        partition_keys: Sequence[str],
        progress_state: str | None = None,
    ) -> int:
        """Create UNASSIGNED items for keys that have none; idempotent; batched.

        Creation order (the order of `partition_keys`, then call order) is the UNASSIGNED
        acquisition order. Returns how many items were new.
        """

    @abstractmethod
    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None: ...

    @abstractmethod
    def acquire(
        self, source_identifier: str, partition_key: str, owner: str, timeout_s: float
    ) -> LeaseItem:
        """Acquire a named partition, bumping its epoch. Raises `PartitionNotFoundError` or
        `PartitionUnavailableError` (whose `.current` tells e.g. that it is COMPLETED)."""

    @abstractmethod
    def acquire_next(
        self, source_identifier: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        """Acquire the next available partition: ASSIGNED whose ownership expired, then CLOSED
        whose `reOpenAt` passed, then UNASSIGNED in creation order. None if there is none."""

    @abstractmethod
    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        """ASSIGNED items whose ownership expired and CLOSED items whose `reOpenAt` passed,
        oldest first: work a crashed or failed attempt left behind. With `unassigned_for_s`,
        also UNASSIGNED items created or handed back longer ago than that: their run failed
        before it took them (or was never launched), or a stopping run gave them back, and no
        run is coming for them. Bounded by `limit`, so a sensor can ask every tick at constant
        cost. Read-only: the acquisition decides."""

    @abstractmethod
    def renew(
        self, token: LeaseToken, timeout_s: float, progress_state: str | None = NOT_GIVEN
    ) -> LeaseItem:
        """Extend ownership (and the TTL); optionally save progress. Fenced."""

    @abstractmethod
    def close(
        self,
        token: LeaseToken,
        reopen_after_s: float,
        max_closed_count: int,
        reason: str = "",
        progress_state: str | None = NOT_GIVEN,
    ) -> LeaseItem:
        """CLOSED until `reopen_after_s` from now, `closedCount`+1. Past `max_closed_count`
        closes, the item is dead-lettered instead: COMPLETED with `deadLetterReason`, so it is
        never acquired again but stays visible in status and checks. Fenced."""

    @abstractmethod
    def give_up(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        """Back to UNASSIGNED so another owner can take it at once. Fenced."""

    @abstractmethod
    def complete(self, token: LeaseToken, progress_state: str | None = NOT_GIVEN) -> LeaseItem:
        """COMPLETED: never acquired again. Fenced."""

    @abstractmethod
    def iter_items(self, source_identifier: str | None = None) -> Iterator[LeaseItem]:
        """Every item (of one source identifier, or all). For status and checks, not hot paths."""

    @abstractmethod
    def source_identifiers(self) -> list[str]: ...

    # -- ledger: the commit protocol of ARCHITECTURE §5 ---------------------------------------

    @abstractmethod
    def commit(
        self,
        token: LeaseToken,
        objects: Sequence[SmallObject],
        *,
        progress_state: str | None = NOT_GIVEN,
        complete: bool = True,
        timeout_s: float = 60.0,
    ) -> CommitResult:
        """In ONE transaction, conditional on `token` still holding: register `objects` in the
        ledger (dense per-table-partition ids assigned here), save progress, and mark the
        partition COMPLETED with a TTL-free commit record (or, with `complete=False`, keep the
        lease for the next chunk, ownership extended by `timeout_s`). Raises
        `PartitionNotOwnedError` (fenced: nothing written) or `AlreadyCommittedError`."""

    @abstractmethod
    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None: ...

    @abstractmethod
    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        """Committed small objects, by (dt, id): what readers may read, and nothing else."""

    @abstractmethod
    def table_partitions(self, table: str) -> list[TablePartition]: ...

    # -- metrics -------------------------------------------------------------------------------

    @abstractmethod
    def _add_metrics(self, deltas: dict[str, dict[str, int]]) -> None:
        """Atomically add counter deltas: {source_identifier: {metric: delta}}."""

    @abstractmethod
    def read_metrics(self) -> dict[str, dict[str, int]]: ...

    def flush_metrics(self) -> None:
        """Persist counters gathered in this process. Done in batches, not per operation, so
        metrics cost no store call on the per-partition path."""
        deltas = self.metrics.drain()
        if deltas:
            try:
                self._add_metrics(deltas)
            except Exception:
                self.metrics.restore(deltas)
                raise

    # -- global state (the partition supplier's, one node at a time) ---------------------------

    def acquire_global_state(
        self, stream: str, name: str, owner: str, timeout_s: float
    ) -> LeaseItem | None:
        """Lease the global-state item `name`, creating it on first use. None while another
        owner holds it. Its progress state *is* the global state (a JSON object)."""
        sid = self.source_identifier(stream, ItemType.GLOBAL)
        if self.get(sid, name) is None:
            self.create_partitions(sid, [name], progress_state="{}")
        try:
            return self.acquire(sid, name, owner, timeout_s)
        except PartitionUnavailableError:
            return None

    def read_global_state(self, stream: str, name: str) -> dict[str, Any]:
        """Read without a lease: for display. Never act on it without holding the lease."""
        item = self.get(self.source_identifier(stream, ItemType.GLOBAL), name)
        return (
            {} if item is None or item.progress_state is None else json.loads(item.progress_state)
        )

    def update_global_state(
        self, token: LeaseToken, state: dict[str, Any], timeout_s: float
    ) -> LeaseItem:
        return self.renew(token, timeout_s, progress_state=json.dumps(state, sort_keys=True))

    def release_global_state(self, token: LeaseToken) -> LeaseItem:
        return self.give_up(token)

    # -- status --------------------------------------------------------------------------------

    def status(self) -> list[StatusSummary]:
        now = self.now_ms()
        metrics = self.read_metrics()
        summaries = []
        sids = sorted(set(self.source_identifiers()) | set(metrics))
        for sid in sids:
            counts = {s.value: 0 for s in PartitionStatus}
            oldest: LeaseItem | None = None
            dead: list[LeaseItem] = []
            for item in self.iter_items(sid):
                counts[item.status.value] += 1
                if item.dead_letter_reason is not None:
                    dead.append(item)
                if (
                    item.status is PartitionStatus.ASSIGNED
                    and item.ownership_timeout_ms is not None
                    and item.ownership_timeout_ms < now
                    and (oldest is None or item.ownership_timeout_ms < oldest.ownership_timeout_ms)  # type: ignore[operator]
                ):
                    oldest = item
            counts["DEAD_LETTERED"] = len(dead)
            summaries.append(
                StatusSummary(sid, counts, oldest, dead, dict(sorted(metrics.get(sid, {}).items())))
            )
        return summaries
