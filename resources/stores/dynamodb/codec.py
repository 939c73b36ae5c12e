"""How lease items and transitions look in DynamoDB: attribute values, the item codec, and a
`Transition` turned into one conditional `UpdateItem` (its guard into a ConditionExpression,
its changes into an UpdateExpression). The decision itself is `resources.coordination.transitions`.
"""

from __future__ import annotations

import re
from typing import Any

from resources.coordination.items import (
    ATTR,
    NOT_GIVEN,
    LeaseItem,
    LeaseToken,
    PartitionStatus,
    status_key,
)
from resources.coordination.transitions import KEEP, Guard, Transition

# Attribute name placeholders: every expression uses `#short` names for Data Prepper's names.
NAMES = {f"#{short}": name for short, name in ATTR.items()}


def names(*expressions: str) -> dict[str, str]:
    """Exactly the `#name` placeholders used (DynamoDB rejects unused ones)."""
    used = {t for e in expressions for t in re.findall(r"#\w+", e)}
    return {k: v for k, v in NAMES.items() if k in used}


def s(value: str) -> dict[str, str]:
    return {"S": value}


def n(value: int) -> dict[str, str]:
    return {"N": str(value)}


def key(sid: str, partition_key: str) -> dict[str, dict[str, str]]:
    return {ATTR["sid"]: s(sid), ATTR["key"]: s(partition_key)}


def item_from(raw: dict[str, Any]) -> LeaseItem:
    def text(name: str) -> str | None:
        value = raw.get(ATTR[name])
        return None if value is None else value["S"]

    def number(name: str) -> int | None:
        value = raw.get(ATTR[name])
        return None if value is None else int(value["N"])

    return LeaseItem(
        source_identifier=raw[ATTR["sid"]]["S"],
        partition_key=raw[ATTR["key"]]["S"],
        status=PartitionStatus(raw[ATTR["status"]]["S"]),
        owner=text("owner"),
        progress_state=text("progress"),
        ownership_timeout_ms=number("ownership_timeout"),
        reopen_at_ms=number("reopen_at"),
        closed_count=number("closed_count") or 0,
        version=number("version") or 0,
        epoch=number("epoch") or 0,
        priority=text("priority") or "",
        expiration_time=number("expiration"),
        dead_letter_reason=text("dead_letter"),
    )


def item_to(item: LeaseItem) -> dict[str, Any]:
    """A new item as `PutItem` writes it, with the GSI's combination key."""
    raw: dict[str, Any] = {
        **key(item.source_identifier, item.partition_key),
        ATTR["status"]: s(item.status.value),
        ATTR["status_key"]: s(status_key(item.source_identifier, item.status)),
        ATTR["priority"]: s(item.priority),
        ATTR["closed_count"]: n(item.closed_count),
        ATTR["version"]: n(item.version),
        ATTR["epoch"]: n(item.epoch),
    }
    optional = {
        "owner": item.owner and s(item.owner),
        "progress": None if item.progress_state is None else s(item.progress_state),
        "ownership_timeout": None
        if item.ownership_timeout_ms is None
        else n(item.ownership_timeout_ms),
        "reopen_at": None if item.reopen_at_ms is None else n(item.reopen_at_ms),
        "expiration": None if item.expiration_time is None else n(item.expiration_time),
        "dead_letter": item.dead_letter_reason and s(item.dead_letter_reason),
    }
    raw.update({ATTR[k]: v for k, v in optional.items() if v is not None})
    return raw


class Update:
    """One UpdateExpression: SET/REMOVE clauses and their values."""

    def __init__(self) -> None:
        self.sets: list[str] = []
        self.removes: list[str] = []
        self.values: dict[str, dict[str, str]] = {}

    def set(self, short: str, value: dict[str, str]) -> Update:
        self.sets.append(f"#{short} = :{short}")
        self.values[f":{short}"] = value
        return self

    def incr(self, short: str) -> Update:
        self.sets.append(f"#{short} = #{short} + :one")
        self.values[":one"] = n(1)
        return self

    def remove(self, *shorts: str) -> Update:
        self.removes.extend(f"#{x}" for x in shorts)
        return self

    def optional(self, short: str, value: dict[str, str] | None) -> Update:
        return self.remove(short) if value is None else self.set(short, value)

    def expression(self) -> str:
        parts = []
        if self.sets:
            parts.append("SET " + ", ".join(self.sets))
        if self.removes:
            parts.append("REMOVE " + ", ".join(self.removes))
        return " ".join(parts)


AVAILABLE = (
    "attribute_exists(#key) AND (#status = :c_unassigned"
    " OR (#status = :c_assigned AND #ownership_timeout < :c_now)"
    " OR (#status = :c_closed AND #reopen_at <= :c_now))"
)
OWNED = "#status = :c_assigned AND #owner = :c_owner AND #epoch = :c_epoch"
DEAD_LETTERED = "#status = :c_completed AND attribute_exists(#dead_letter)"


def owned_values(token: LeaseToken) -> dict[str, dict[str, str]]:
    return {
        ":c_assigned": s(PartitionStatus.ASSIGNED.value),
        ":c_owner": s(token.owner),
        ":c_epoch": n(token.epoch),
    }


def condition(guard: Guard) -> tuple[str, dict[str, dict[str, str]]]:
    """The guard as a ConditionExpression and its values. Like `Guard.holds`, an absent item
    never passes (every clause needs an attribute that exists)."""
    clauses: list[str] = []
    values: dict[str, dict[str, str]] = {}
    if guard.available_at_ms is not None:
        clauses.append(AVAILABLE)
        values.update(
            {
                ":c_unassigned": s(PartitionStatus.UNASSIGNED.value),
                ":c_assigned": s(PartitionStatus.ASSIGNED.value),
                ":c_closed": s(PartitionStatus.CLOSED.value),
                ":c_now": n(guard.available_at_ms),
            }
        )
    if guard.owned_by is not None:
        clauses.append(OWNED)
        values.update(owned_values(guard.owned_by))
    if guard.closed_below is not None:
        clauses.append("#closed_count < :c_max")
        values[":c_max"] = n(guard.closed_below)
    if guard.dead_lettered:
        clauses.append(DEAD_LETTERED)
        values[":c_completed"] = s(PartitionStatus.COMPLETED.value)
    if not clauses:
        # A bug in a transition, never a runtime condition: no LeaseholdError, keep the traceback.
        raise ValueError("a transition without a guard would write unconditionally")
    return " AND ".join(clauses), values


def update(transition: Transition, sid: str) -> Update:
    """The transition's changes, applied by DynamoDB to the stored item."""
    t = transition
    out = Update().set("priority", s(t.priority)).incr("version")
    if t.status is not KEEP:
        out.set("status", s(t.status.value)).set("status_key", s(status_key(sid, t.status)))
    if t.owner is not KEEP:
        out.optional("owner", None if t.owner is None else s(t.owner))
    for short, value in (
        ("ownership_timeout", t.ownership_timeout_ms),
        ("reopen_at", t.reopen_at_ms),
    ):
        if value is not KEEP:
            out.optional(short, None if value is None else n(value))
    if t.progress_state is not NOT_GIVEN:
        out.optional("progress", None if t.progress_state is None else s(t.progress_state))
    if t.dead_letter_reason is not KEEP:
        out.optional(
            "dead_letter", None if t.dead_letter_reason is None else s(t.dead_letter_reason)
        )
    if t.expiration_time is not None:
        out.set("expiration", n(t.expiration_time))
    if t.bump_epoch:
        out.incr("epoch")
    if t.closed_count is not KEEP:
        out.set("closed_count", n(t.closed_count))
    elif t.bump_closed_count:
        out.incr("closed_count")
    return out


def conditional_update(
    table_name: str, sid: str, partition_key: str, transition: Transition
) -> dict[str, Any]:
    """The `Update` of a TransactWriteItems entry (and the arguments of `UpdateItem`)."""
    changes = update(transition, sid)
    expression, values = condition(transition.guard)
    return {
        "TableName": table_name,
        "Key": key(sid, partition_key),
        "UpdateExpression": changes.expression(),
        "ConditionExpression": expression,
        "ExpressionAttributeNames": names(changes.expression(), expression),
        "ExpressionAttributeValues": {**changes.values, **values},
    }
