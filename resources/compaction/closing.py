"""When a table partition closes: its day has ended in the stream's time zone, plus a grace.

A table partition `dt` holds the rows whose event time falls on that calendar day in the
stream's time zone (`StreamConfig.timezone`), so its day ends at the next local midnight —
not 24 hours after it began (a DST day is 23 or 25 hours long) and not at UTC midnight.
`merge.close_grace` then gives late sources time to land as live objects before the partition
is closed; whatever is committed after that is *delayed* (ARCHITECTURE §6).

Pure: the caller brings the clock, and `MergeSchedule` does the (idempotent) closing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from resources.errors import LeaseholdError
from resources.ledger.model import TablePartition
from resources.streams import StreamConfig

log = logging.getLogger(__name__)


class ClosingError(LeaseholdError, ValueError):
    """A table partition whose `dt` is not an ISO date, or an unknown time zone: its closing
    time cannot be computed."""


def day_end_ms(dt: str, timezone: str) -> int:
    """The instant (epoch milliseconds) the local day `dt` ends: the first moment of the next
    day in `timezone`.

    Built from the wall-clock midnight rather than `start + 24h`, so DST days get their true
    length. A midnight that does not exist (a zone springing forward at 00:00) resolves, with
    `fold=0`, to the transition instant itself; an ambiguous one (falling back to 00:00) to its
    first occurrence: either way the instant the calendar date changes."""
    try:
        day = date.fromisoformat(dt)
    except (TypeError, ValueError):
        raise ClosingError(f"dt={dt!r} is not an ISO date (YYYY-MM-DD)") from None
    try:
        zone = ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ClosingError(f"{timezone!r} is not an IANA time zone") from None
    next_midnight = datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone)
    return int(next_midnight.timestamp()) * 1000


def closes_at_ms(dt: str, timezone: str, grace_s: float) -> int:
    """When the table partition `dt` closes: its local day's end plus `grace_s`."""
    return day_end_ms(dt, timezone) + int(round(grace_s * 1000))


def due_to_close(
    partitions: Iterable[TablePartition], config: StreamConfig, now_ms: int
) -> list[TablePartition]:
    """The open partitions whose closing time has come (`closes_at_ms <= now_ms`), by dt.

    A partition whose dt cannot be parsed is logged and left open rather than failing the
    others: it is a ledger bug to look at, and keeping it open loses nothing (its objects stay
    live and are still merged)."""
    grace_s = config.merge.close_grace_s
    due = []
    for partition in partitions:
        if partition.closed:
            continue
        try:
            closes_at = closes_at_ms(partition.dt, config.timezone, grace_s)
        except ClosingError as exc:
            log.error("%s dt=%s cannot be closed: %s", partition.table, partition.dt, exc)
            continue
        if closes_at <= now_ms:
            due.append(partition)
    return sorted(due, key=lambda p: p.dt)
