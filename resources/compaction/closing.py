"""When a table partition closes: its day has ended in the stream's time zone, plus a grace,
and the stream's ingestion has caught up with what landed before then.

A table partition `dt` holds the rows whose event time falls on that calendar day in the
stream's time zone (`StreamConfig.timezone`), so its day ends at the next local midnight —
not 24 hours after it began (a DST day is 23 or 25 hours long) and not at UTC midnight.
`merge.close_grace` then gives late sources time to land as live objects before the partition
is closed; whatever is committed after that is *delayed* (docs/architecture.md).

Time alone is not enough: in a backfill every historical date is past its close time at once,
so closing on time alone would close them all before their data is ingested, and most rows
would arrive "delayed" (unpublished until a merge covers them). So a partition closes only
once ingestion has caught up (`due_to_close`):

- discovery reached the end of its listing at or after the partition's close time
  (`caught_up_ms >= closes_at_ms(dt)`: everything that landed before the close time is
  leased), and
- no source partition of the stream is still pending (`ingestion_pending`): UNASSIGNED,
  ASSIGNED, or CLOSED waiting on a retry — but a retry only for a bounded time
  (`retry_holds_closing`), and never a dead letter (COMPLETED).

Pure: the caller brings the clock and the store's answers, and `MergeSchedule` does the
(idempotent) closing.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from datetime import date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from resources.coordination.backoff import ReopenBackoff, reopen_delay_s
from resources.coordination.items import LeaseItem, PartitionStatus
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
    partitions: Iterable[TablePartition],
    config: StreamConfig,
    now_ms: int,
    *,
    caught_up_ms: int | None,
    pending: bool,
) -> list[TablePartition]:
    """The open partitions that close now, by dt: their closing time has come
    (`closes_at_ms <= now_ms`), discovery caught up at or after it (`caught_up_ms`: when the
    latest tick that reached the end of the listing started; None: never), and no source
    partition is `pending`. Whatever the stream still has to ingest may belong to any date,
    so a pending one holds every date back.

    A partition whose dt cannot be parsed is logged and left open rather than failing the
    others: it is a ledger bug to look at, and keeping it open loses nothing (its objects stay
    live and are still merged)."""
    if pending or caught_up_ms is None:
        return []
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
        if closes_at <= now_ms and closes_at <= caught_up_ms:
            due.append(partition)
    return sorted(due, key=lambda p: p.dt)


def first_failure_estimate_ms(item: LeaseItem, backoff: ReopenBackoff) -> int:
    """The earliest a CLOSED item can have failed first, had every retry run as soon as it
    came due: its `reOpenAt` less the longest wait of each of its closes (the backoff's
    ceilings; the jitter only shortens a wait, which makes the first failure later). A retry
    that ran late puts the true first failure before this estimate by as much."""
    waits_s = 0.0
    for closes in range(1, item.closed_count + 1):
        ceiling = reopen_delay_s(closes, backoff.base_s, backoff.cap_s, 0.0)
        if ceiling >= backoff.cap_s:  # capped from here on: the rest are all the cap
            waits_s += ceiling * (item.closed_count - closes + 1)
            break
        waits_s += ceiling
    return (item.reopen_at_ms or 0) - int(round(waits_s * 1000))


def retry_holds_closing(
    item: LeaseItem, now_ms: int, wait_max_s: float, backoff: ReopenBackoff
) -> bool:
    """Whether a pending item holds closing back: UNASSIGNED and ASSIGNED ones always (they
    are being ingested, or about to be); a CLOSED one (its object failed to read, a retry is
    scheduled) only until `wait_max_s` (`merge.close_wait_max`) after its first failure.

    Why bounded: an object that keeps failing is dead-lettered after `max_closed_count`
    closes, but until then — with the defaults 1+2+4+8 minutes of backoff, with a raised
    count or cap hours — one broken object would keep every date of the stream open, and
    their data unmerged. Past the bound the dates close; if the object is read later after
    all, its rows are delayed objects like any late record (merged `merge.delayed_interval`
    after they land). The lease item holds no first-failure time, so it is derived from what
    it holds (`first_failure_estimate_ms`): closing stops waiting at most `wait_max_s`
    after the first failure, plus however late the retries ran (under the daemon a retry
    runs at the first discovery tick after it is due)."""
    if item.status is not PartitionStatus.CLOSED:
        return item.status is not PartitionStatus.COMPLETED
    return now_ms < first_failure_estimate_ms(item, backoff) + int(round(wait_max_s * 1000))


def ingestion_pending(
    items: Sequence[LeaseItem], now_ms: int, wait_max_s: float, backoff: ReopenBackoff
) -> LeaseItem | None:
    """The first of `items` (`LeaseStore.pending_partitions`) that holds closing back, None if
    none does."""
    return next((i for i in items if retry_holds_closing(i, now_ms, wait_max_s, backoff)), None)
