"""When table partitions close: local midnight in the stream's zone (DST days included), plus
the grace."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from resources.compaction.closing import (
    ClosingError,
    closes_at_ms,
    day_end_ms,
    due_to_close,
    first_failure_estimate_ms,
    ingestion_pending,
    retry_holds_closing,
)
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import LeaseItem, PartitionStatus
from resources.ledger.model import TablePartition
from resources.stream_sections import MergeSettings
from resources.streams import ColumnSpec, StreamConfig

HOUR_MS = 3_600_000
CAUGHT_UP = {"caught_up_ms": 2**62, "pending": False}
"""Ingestion caught up for good: only the clock decides."""


def utc_ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp()) * 1000


def config(tz: str = "UTC", close_grace: str = "PT1H") -> StreamConfig:
    return StreamConfig(
        name="events",
        source="file:///nowhere",
        format="jsonl",
        columns=(ColumnSpec("id", "string"), ColumnSpec("at", "timestamp")),
        event_time="at",
        table="file:///nowhere/table",
        quarantine="file:///nowhere/quarantine",
        timezone=tz,
        merge=MergeSettings(close_grace=close_grace),
    )


def partition(dt: str, last_live_object_id: int | None = None) -> TablePartition:
    return TablePartition("events", dt, next_object_id=3, last_live_object_id=last_live_object_id)


@pytest.mark.parametrize(
    ("tz", "dt", "day_end_utc"),
    [
        ("UTC", "2026-01-15", "2026-01-16T00:00:00"),
        # Tokyo is UTC+9 all year: its day ends at 15:00 UTC the day before the next date.
        ("Asia/Tokyo", "2026-01-15", "2026-01-15T15:00:00"),
        ("America/New_York", "2026-01-15", "2026-01-16T05:00:00"),  # EST, UTC-5
        ("America/New_York", "2026-07-15", "2026-07-16T04:00:00"),  # EDT, UTC-4
    ],
)
def test_the_day_ends_at_local_midnight(tz: str, dt: str, day_end_utc: str) -> None:
    assert day_end_ms(dt, tz) == utc_ms(day_end_utc)
    assert closes_at_ms(dt, tz, 5400) == utc_ms(day_end_utc) + 90 * 60 * 1000


@pytest.mark.parametrize(
    ("tz", "dt", "hours"),
    [
        ("America/New_York", "2024-03-10", 23),  # spring forward at 02:00
        ("America/New_York", "2024-11-03", 25),  # fall back at 02:00
        ("Europe/Berlin", "2024-03-31", 23),
        ("Europe/Berlin", "2024-10-27", 25),
        ("Asia/Tokyo", "2024-03-10", 24),  # no DST
    ],
)
def test_a_dst_day_is_as_long_as_it_is(tz: str, dt: str, hours: int) -> None:
    previous = datetime.fromisoformat(dt).date().toordinal() - 1
    previous_dt = datetime.fromordinal(previous).date().isoformat()
    assert day_end_ms(dt, tz) - day_end_ms(previous_dt, tz) == hours * HOUR_MS


def test_a_midnight_that_does_not_exist_ends_the_day_at_the_transition() -> None:
    # Chile sprang forward at 2024-09-08 00:00 local (-04 -> -03): that midnight never
    # happened; 2024-09-07 ended at the transition, 04:00 UTC, and 2024-09-08 lasted 23 hours.
    assert day_end_ms("2024-09-07", "America/Santiago") == utc_ms("2024-09-08T04:00:00")
    assert day_end_ms("2024-09-08", "America/Santiago") == utc_ms("2024-09-09T03:00:00")


def test_bad_dates_and_zones_are_refused() -> None:
    with pytest.raises(ClosingError, match="not an ISO date"):
        day_end_ms("2026-13-01", "UTC")
    with pytest.raises(ClosingError, match="not an IANA time zone"):
        day_end_ms("2026-01-01", "Mars/Olympus")


def test_due_to_close_takes_open_partitions_whose_time_came() -> None:
    cfg = config("America/New_York", close_grace="PT2H")
    # 2026-01-15 closes at 2026-01-16T05:00Z + 2 h = 07:00Z.
    closes = utc_ms("2026-01-16T07:00:00")
    partitions = [
        partition("2026-01-16"),  # its day has not ended
        partition("2026-01-15"),
        partition("2026-01-14", last_live_object_id=2),  # closed already
        partition("2026-01-13"),
    ]
    assert [p.dt for p in due_to_close(partitions, cfg, closes - 1, **CAUGHT_UP)] == ["2026-01-13"]
    assert [p.dt for p in due_to_close(partitions, cfg, closes, **CAUGHT_UP)] == [
        "2026-01-13",
        "2026-01-15",
    ]
    # In UTC the same instant is two hours past 2026-01-15's close already.
    utc = replace(cfg, timezone="UTC")
    at = utc_ms("2026-01-16T02:00:00")
    assert [p.dt for p in due_to_close(partitions, utc, at, **CAUGHT_UP)] == [
        "2026-01-13",
        "2026-01-15",
    ]


def test_a_partition_with_a_bad_dt_is_logged_and_left_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    partitions = [partition("not-a-date"), partition("2026-01-01")]
    with caplog.at_level(logging.ERROR, logger="resources.compaction.closing"):
        due = due_to_close(partitions, config(), utc_ms("2026-02-01T00:00:00"), **CAUGHT_UP)
    assert [p.dt for p in due] == ["2026-01-01"]
    assert "events dt=not-a-date cannot be closed" in caplog.text


# -- closing waits for the data ------------------------------------------------------------------


def test_nothing_closes_before_discovery_caught_up_past_the_close_time() -> None:
    """A backfill: every date's time has long come, but only dates whose close time discovery
    had reached the end of its listing after close."""
    cfg = config("America/New_York", close_grace="PT1H")
    partitions = [partition("2026-01-13"), partition("2026-01-14"), partition("2026-01-15")]
    now = utc_ms("2026-03-01T00:00:00")
    assert due_to_close(partitions, cfg, now, caught_up_ms=None, pending=False) == []
    # 2026-01-14 closes at 2026-01-15T05:00Z + 1 h: caught up exactly then, it may close.
    caught_up = utc_ms("2026-01-15T06:00:00")
    due = due_to_close(partitions, cfg, now, caught_up_ms=caught_up, pending=False)
    assert [p.dt for p in due] == ["2026-01-13", "2026-01-14"]
    due = due_to_close(partitions, cfg, now, caught_up_ms=caught_up - 1, pending=False)
    assert [p.dt for p in due] == ["2026-01-13"]
    # Caught up now, but a source partition is still pending: nothing closes.
    assert due_to_close(partitions, cfg, now, caught_up_ms=now, pending=True) == []
    assert len(due_to_close(partitions, cfg, now, caught_up_ms=now, pending=False)) == 3


def test_caught_up_does_not_close_a_day_that_has_not_ended() -> None:
    cfg = config("Asia/Tokyo", close_grace="PT30M")
    closes = closes_at_ms("2026-01-15", "Asia/Tokyo", 1800)  # 15:30Z on the 15th
    assert closes == utc_ms("2026-01-15T15:30:00")
    parts = [partition("2026-01-15")]
    assert due_to_close(parts, cfg, closes - 1, caught_up_ms=closes + 10, pending=False) == []
    assert due_to_close(parts, cfg, closes, caught_up_ms=closes, pending=False) == parts


def test_caught_up_is_compared_with_the_dst_day_end() -> None:
    """New York's 2024-11-03 is 25 hours long: it ends at 05:00Z on the 4th, not 04:00Z."""
    cfg = config("America/New_York", close_grace="PT1S")
    parts = [partition("2024-11-03")]
    now = utc_ms("2024-12-01T00:00:00")
    at_4 = utc_ms("2024-11-04T04:00:01")
    at_5 = utc_ms("2024-11-04T05:00:01")
    assert due_to_close(parts, cfg, now, caught_up_ms=at_4, pending=False) == []
    assert due_to_close(parts, cfg, now, caught_up_ms=at_5, pending=False) == parts


def item(
    status: PartitionStatus,
    closed_count: int = 0,
    reopen_at_ms: int | None = None,
    dead_letter: str | None = None,
) -> LeaseItem:
    return LeaseItem(
        "events|partition", "src/a.jsonl", status, None, None, None, reopen_at_ms,
        closed_count, 1, 1, "0", None, dead_letter,
    )  # fmt: skip


BACKOFF = ReopenBackoff(60, 3600)  # 1, 2, 4, 8 … minutes, at most an hour


def test_the_first_failure_is_estimated_from_the_closes_and_the_backoff() -> None:
    # Closed 3 times: waits of at most 1, 2 and 4 minutes before reopening at `reopen`.
    reopen = 10_000_000
    three = item(PartitionStatus.CLOSED, closed_count=3, reopen_at_ms=reopen)
    assert first_failure_estimate_ms(three, BACKOFF) == reopen - 7 * 60_000
    # Capped waits: 1, 2, 4 … 32 minutes, then the hour cap for each further close.
    many = item(PartitionStatus.CLOSED, closed_count=9, reopen_at_ms=reopen)
    assert first_failure_estimate_ms(many, BACKOFF) == reopen - (63 + 3 * 60) * 60_000


def test_a_retry_holds_closing_back_only_until_the_bound_after_its_first_failure() -> None:
    first_failure = 50_000_000
    # Closed twice, retries ran when due (no jitter): reopens 1 + 2 minutes after the first.
    closed = item(PartitionStatus.CLOSED, closed_count=2, reopen_at_ms=first_failure + 180_000)
    wait_max_s = 7200.0
    bound = first_failure + 7_200_000
    assert retry_holds_closing(closed, bound - 1, wait_max_s, BACKOFF)
    assert not retry_holds_closing(closed, bound, wait_max_s, BACKOFF)
    # Work being done, or about to be, always holds; a dead letter never does.
    for status in (PartitionStatus.UNASSIGNED, PartitionStatus.ASSIGNED):
        assert retry_holds_closing(item(status), 2**62, wait_max_s, BACKOFF)
    dead = item(PartitionStatus.COMPLETED, closed_count=5, dead_letter="404")
    assert not retry_holds_closing(dead, 0, wait_max_s, BACKOFF)


def test_ingestion_pending_names_the_first_item_that_holds_closing() -> None:
    old = item(PartitionStatus.CLOSED, closed_count=1, reopen_at_ms=60_000)  # failed at 0
    assert ingestion_pending([], 0, 3600, BACKOFF) is None
    assert ingestion_pending([old], 3_600_000, 3600, BACKOFF) is None  # past the bound
    assert ingestion_pending([old], 3_599_999, 3600, BACKOFF) is old
    new = item(PartitionStatus.UNASSIGNED)
    assert ingestion_pending([new, old], 3_600_000, 3600, BACKOFF) is new


# -- the stream's settings ---------------------------------------------------------------------


def write_stream(tmp_path, merge: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "streams.yaml"
    path.write_text(
        "streams:\n  events:\n    source: file://src\n    format: jsonl\n"
        "    schema: {id: string, at: timestamp}\n    event_time: at\n    table: file://t\n"
        f"    merge: {{{merge}}}\n"
    )
    return path


def test_delayed_interval_and_close_wait_max_are_read_with_defaults(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from resources.streams import load_streams

    default = load_streams(write_stream(tmp_path, ""))["events"].merge
    assert (default.delayed_interval_s, default.close_wait_max_s) == (300.0, 7200.0)
    merge = load_streams(write_stream(tmp_path, "delayed_interval: PT2M, close_wait_max: PT30M"))[
        "events"
    ].merge
    assert (merge.delayed_interval_s, merge.close_wait_max_s) == (120.0, 1800.0)


@pytest.mark.parametrize("field", ["delayed_interval", "close_wait_max"])
def test_a_bad_duration_fails_naming_the_field(tmp_path, field: str) -> None:  # type: ignore[no-untyped-def]
    from resources.streams import StreamConfigError, load_streams

    with pytest.raises(StreamConfigError, match=rf"merge\.{field}"):
        load_streams(write_stream(tmp_path, f"{field}: 5 minutes"))
