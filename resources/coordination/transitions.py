"""The state machine of a lease item, written once, as pure functions.

Every operation on a lease item is a `Transition`: a `Guard` (what must hold of the item as
stored) and the changes to make when it does. No backend decides anything of its own:
- SQLite reads the item inside one `BEGIN IMMEDIATE` transaction, asks `guard.holds(item)` and
  writes `transition.apply(item)`;
- DynamoDB turns the guard into a `ConditionExpression` and the changes into an
  `UpdateExpression` (`resources/stores/dynamodb/codec.py`), so the server applies the same
  decision in one conditional write.
A refused transition is explained by `refusal(transition, current)`, the same way for both.

    UNASSIGNED --acquire--> ASSIGNED --renew--> ASSIGNED (ownership extended, progress saved)
    CLOSED (reOpenAt passed) --acquire--> ASSIGNED           ASSIGNED --give_up--> UNASSIGNED
    ASSIGNED (ownership expired) --acquire--> ASSIGNED (epoch + 1: the old owner is fenced)
    ASSIGNED --close--> CLOSED (reOpenAt, closedCount + 1), or past the maximum:
             --dead_letter--> COMPLETED with deadLetterReason
    ASSIGNED --complete--> COMPLETED (never acquired again)
    COMPLETED with deadLetterReason --redrive--> CLOSED (reOpenAt now, closedCount 0): an
             operator's decision, the one transition no owner makes (`leasehold redrive`)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace
from typing import Any

from resources.coordination.items import (
    NOT_GIVEN,
    LeaseItem,
    LeaseToken,
    PartitionStatus,
    priority_at,
)

KEEP: Any = NOT_GIVEN
"""A change left out: the attribute keeps its stored value."""


@dataclass(frozen=True)
class Guard:
    """What must hold of the stored item for a transition to apply. Absent items never pass."""

    available_at_ms: int | None = None
    """Acquisition: UNASSIGNED, or ASSIGNED with ownership expired before this time, or CLOSED
    with `reOpenAt` at or before it."""
    owned_by: LeaseToken | None = None
    """Owner writes: ASSIGNED to this owner at this epoch (fencing)."""
    closed_below: int | None = None
    """Closing: `closedCount` below this; past it the item is dead-lettered instead."""
    dead_lettered: bool = False
    """Re-driving: COMPLETED with a `deadLetterReason`. Never a plain COMPLETED item: its
    records are in the table, and taking it back would ingest them twice."""

    def holds(self, item: LeaseItem | None) -> bool:
        if item is None:
            return False
        if self.available_at_ms is not None and not item.is_available(self.available_at_ms):
            return False
        if self.owned_by is not None and not owned_by(item, self.owned_by):
            return False
        if self.dead_lettered and not is_dead_letter(item):
            return False
        return self.closed_below is None or item.closed_count < self.closed_below


def owned_by(item: LeaseItem, token: LeaseToken) -> bool:
    return (
        item.status is PartitionStatus.ASSIGNED
        and item.owner == token.owner
        and item.epoch == token.epoch
    )


def is_dead_letter(item: LeaseItem) -> bool:
    return item.status is PartitionStatus.COMPLETED and item.dead_letter_reason is not None


@dataclass(frozen=True)
class Transition:
    """A guard and the changes it allows. `version` always goes up by one; `KEEP` leaves an
    attribute as stored; `expiration_time` None leaves the TTL as it is (no TTL configured)."""

    action: str
    """Data Prepper's name for the write, used in `<action>PartitionUpdateErrors`."""
    guard: Guard
    priority: str
    status: PartitionStatus = KEEP
    owner: str | None = KEEP
    ownership_timeout_ms: int | None = KEEP
    reopen_at_ms: int | None = KEEP
    progress_state: str | None = KEEP
    dead_letter_reason: str | None = KEEP
    closed_count: int = KEEP
    expiration_time: int | None = None
    bump_epoch: bool = False
    bump_closed_count: bool = False

    def apply(self, item: LeaseItem) -> LeaseItem:
        """The item as it is after this transition. Only meaningful if `guard.holds(item)`."""
        changes: dict[str, Any] = {"priority": self.priority, "version": item.version + 1}
        for name in (
            "status",
            "owner",
            "ownership_timeout_ms",
            "reopen_at_ms",
            "progress_state",
            "dead_letter_reason",
            "closed_count",
        ):
            value = getattr(self, name)
            if value is not KEEP:
                changes[name] = value
        if self.expiration_time is not None:
            changes["expiration_time"] = self.expiration_time
        if self.bump_epoch:
            changes["epoch"] = item.epoch + 1
        if self.bump_closed_count:
            changes["closed_count"] = item.closed_count + 1
        return replace(item, **changes)


class Refusal(str, enum.Enum):
    """Why a transition's guard refused the stored item."""

    NOT_FOUND = "not_found"
    UNAVAILABLE = "unavailable"
    NOT_OWNED = "not_owned"
    CLOSED_TOO_OFTEN = "closed_too_often"
    NOT_DEAD_LETTERED = "not_dead_lettered"


def refusal(transition: Transition, current: LeaseItem | None) -> Refusal:
    """Why `transition` did not apply to `current` (the item as stored, None if absent)."""
    guard = transition.guard
    if current is None:
        return Refusal.NOT_FOUND
    if guard.owned_by is not None and not owned_by(current, guard.owned_by):
        return Refusal.NOT_OWNED
    if guard.closed_below is not None and current.closed_count >= guard.closed_below:
        return Refusal.CLOSED_TOO_OFTEN
    if guard.dead_lettered and not is_dead_letter(current):
        return Refusal.NOT_DEAD_LETTERED
    return Refusal.UNAVAILABLE


# -- the transitions ---------------------------------------------------------------------------


def created(
    source_identifier: str,
    partition_key: str,
    *,
    now_ms: int,
    seq: int,
    progress_state: str | None,
    expiration_time: int | None,
) -> LeaseItem:
    """A new UNASSIGNED item; `seq` orders items created in the same millisecond."""
    return LeaseItem(
        source_identifier=source_identifier,
        partition_key=partition_key,
        status=PartitionStatus.UNASSIGNED,
        owner=None,
        progress_state=progress_state,
        ownership_timeout_ms=None,
        reopen_at_ms=None,
        closed_count=0,
        version=1,
        epoch=0,
        priority=priority_at(now_ms, seq),
        expiration_time=expiration_time,
    )


def acquire(owner: str, *, now_ms: int, timeout_ms: int, expiration_time: int | None) -> Transition:
    deadline = now_ms + timeout_ms
    return Transition(
        action="acquire",
        guard=Guard(available_at_ms=now_ms),
        status=PartitionStatus.ASSIGNED,
        priority=priority_at(deadline),
        owner=owner,
        ownership_timeout_ms=deadline,
        reopen_at_ms=None,
        dead_letter_reason=None,
        expiration_time=expiration_time,
        bump_epoch=True,
    )


def renew(
    token: LeaseToken,
    *,
    now_ms: int,
    timeout_ms: int,
    progress_state: str | None = KEEP,
    expiration_time: int | None,
) -> Transition:
    """Still ASSIGNED to the same owner and epoch; ownership (and the TTL) extended."""
    deadline = now_ms + timeout_ms
    return Transition(
        action="saveState",
        guard=Guard(owned_by=token),
        priority=priority_at(deadline),
        ownership_timeout_ms=deadline,
        progress_state=progress_state,
        expiration_time=expiration_time,
    )


def _released(
    action: str,
    token: LeaseToken,
    status: PartitionStatus,
    *,
    priority: str,
    progress_state: str | None,
    expiration_time: int | None,
    **changes: Any,
) -> Transition:
    # An owned item has no `reOpenAt` and no `deadLetterReason` (acquiring removed them).
    values: dict[str, Any] = {"owner": None, "ownership_timeout_ms": None, **changes}
    return Transition(
        action=action,
        guard=Guard(owned_by=token),
        status=status,
        priority=priority,
        progress_state=progress_state,
        expiration_time=expiration_time,
        **values,
    )


def close(
    token: LeaseToken,
    *,
    now_ms: int,
    reopen_after_ms: int,
    max_closed_count: int,
    progress_state: str | None = KEEP,
    expiration_time: int | None,
) -> Transition:
    """CLOSED until `reopen_after_ms` from now, `closedCount` + 1 — while the item has been
    closed fewer than `max_closed_count` times; refused with `CLOSED_TOO_OFTEN` otherwise,
    and the caller dead-letters it. The delay comes in computed (`backoff.reopen_delay_s`,
    random jitter included), so this stays a function of its arguments."""
    reopen = now_ms + reopen_after_ms
    transition = _released(
        "close",
        token,
        PartitionStatus.CLOSED,
        priority=priority_at(reopen),
        progress_state=progress_state,
        expiration_time=expiration_time,
        reopen_at_ms=reopen,
        bump_closed_count=True,
    )
    return replace(transition, guard=Guard(owned_by=token, closed_below=max_closed_count))


def dead_letter(
    token: LeaseToken,
    *,
    now_ms: int,
    reason: str,
    progress_state: str | None = KEEP,
    expiration_time: int | None,
) -> Transition:
    """COMPLETED with `deadLetterReason`: never acquired again, but visible in status and
    checks (a close past the maximum)."""
    return _released(
        "close",
        token,
        PartitionStatus.COMPLETED,
        priority=priority_at(now_ms),
        progress_state=progress_state,
        expiration_time=expiration_time,
        dead_letter_reason=reason,
        bump_closed_count=True,
    )


def give_up(
    token: LeaseToken,
    *,
    now_ms: int,
    progress_state: str | None = KEEP,
    expiration_time: int | None,
) -> Transition:
    """Back to UNASSIGNED, at the end of the creation order, so another owner can take it."""
    return _released(
        "giveUp",
        token,
        PartitionStatus.UNASSIGNED,
        priority=priority_at(now_ms),
        progress_state=progress_state,
        expiration_time=expiration_time,
    )


def complete(
    token: LeaseToken,
    *,
    now_ms: int,
    progress_state: str | None = KEEP,
    expiration_time: int | None,
) -> Transition:
    return _released(
        "complete",
        token,
        PartitionStatus.COMPLETED,
        priority=priority_at(now_ms),
        progress_state=progress_state,
        expiration_time=expiration_time,
    )


def redrive(*, now_ms: int, expiration_time: int | None) -> Transition:
    """A dead letter back to CLOSED, due at once, with its tries counted from zero again —
    only while it is still a dead letter (a second operator, or a redrive repeated, is refused
    instead of resetting a unit that is being retried).

    Why CLOSED with `reOpenAt` now rather than UNASSIGNED: the discovery sensor asks for a
    CLOSED item whose `reOpenAt` passed after a started run covering it was created, whereas
    an UNASSIGNED one is left to such a run, which may have passed its position already.
    The progress state is kept: the objects its earlier attempts committed (`done`, `partial`,
    a large object's `chunk` offset) are not read again; only the rest of the unit is."""
    return Transition(
        action="redrive",
        guard=Guard(dead_lettered=True),
        status=PartitionStatus.CLOSED,
        priority=priority_at(now_ms),
        reopen_at_ms=now_ms,
        closed_count=0,
        dead_letter_reason=None,
        expiration_time=expiration_time,
    )
