"""The lease item: Data Prepper's item format, extended, and the token every owner write is
fenced on.

Attribute names are Data Prepper's (`ATTR`), extended with `version` (optimistic lock), `epoch`
(fencing token, bumped at every acquisition), `expirationTime` (TTL) and `deadLetterReason`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

Clock = Callable[[], float]
"""Seconds since the epoch. Injected so contract tests can move time without sleeping."""


class PartitionStatus(str, enum.Enum):
    """A lease item's state: UNASSIGNED, ASSIGNED (to an owner), CLOSED (until its reopen time) or
    COMPLETED."""

    UNASSIGNED = "UNASSIGNED"
    ASSIGNED = "ASSIGNED"
    CLOSED = "CLOSED"
    COMPLETED = "COMPLETED"


class ItemType(str, enum.Enum):
    """The `type` part of `sourceIdentifier`: keeps partitions and global state apart."""

    PARTITION = "partition"
    GLOBAL = "global"
    MERGE_JOB = "mergeJob"
    """A table partition's running merge job (key = dt): the lease is its heartbeat."""
    ROLLUP_JOB = "rollupJob"
    """A rollup of a table partition (key = dt): its lease fences the state's writers, and its
    progress says which batch the state is at."""
    KEYS_JOB = "keysJob"
    """A table's key index under `dedupe.scope: table` (key = the table): its lease serialises
    the table's publications, fencing each record."""


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


def iso_utc(millis: int | None) -> str:
    """A time attribute (epoch milliseconds) as people read it: `2027-01-15T08:00:00Z`, "-"
    when absent. One rendering for status output and log messages, so they can be compared."""
    if millis is None:
        return "-"
    return datetime.fromtimestamp(millis / 1000, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def priority_at(millis: int, seq: int = 0) -> str:
    """Sortable `partitionPriority`.

    As in Data Prepper, the GSI sort key means different things per status: creation order for
    UNASSIGNED, ownership timeout for ASSIGNED, `reOpenAt` for CLOSED. That turns "expired
    ASSIGNED" and "reopened CLOSED" into key-range queries instead of filtered scans.
    """
    return f"{millis:015d}.{seq:06d}"


def whole_priority_groups(page: list[LeaseItem], limit: int) -> list[LeaseItem]:
    """A page read by priority, fit to carry a cursor: a full page (`limit` items) gives back
    its last group of equal priorities, since a next read starting strictly after that priority
    would skip the group's unread members (units completing in the same millisecond share a
    priority). A page that is one group is kept whole: there is nothing before it to stop at."""
    if len(page) < limit or page[0].priority == page[-1].priority:
        return page
    return [item for item in page if item.priority != page[-1].priority]


def status_key(source_identifier: str, status: PartitionStatus) -> str:
    return f"{source_identifier}|{status.value}"


@dataclass(frozen=True)
class LeaseItem:
    """One lease item as stored: a source partition's status, owner, epoch, progress and timers."""

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
            # A caller's bug, not a condition to handle: deliberately no LeaseholdError, so it
            # keeps its traceback (a lost lease is `PartitionNotOwnedError` from the store).
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
