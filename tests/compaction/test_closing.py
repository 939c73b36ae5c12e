"""When table partitions close: local midnight in the stream's zone (DST days included), plus
the grace."""

from __future__ import annotations

import logging
from dataclasses import replace
from datetime import datetime, timezone

import pytest

from resources.compaction.closing import ClosingError, closes_at_ms, day_end_ms, due_to_close
from resources.ledger.model import TablePartition
from resources.streams import ColumnSpec, MergeSettings, StreamConfig

HOUR_MS = 3_600_000


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
    assert [p.dt for p in due_to_close(partitions, cfg, closes - 1)] == ["2026-01-13"]
    assert [p.dt for p in due_to_close(partitions, cfg, closes)] == ["2026-01-13", "2026-01-15"]
    # In UTC the same instant is two hours past 2026-01-15's close already.
    utc = replace(cfg, timezone="UTC")
    assert [p.dt for p in due_to_close(partitions, utc, utc_ms("2026-01-16T02:00:00"))] == [
        "2026-01-13",
        "2026-01-15",
    ]


def test_a_partition_with_a_bad_dt_is_logged_and_left_open(
    caplog: pytest.LogCaptureFixture,
) -> None:
    partitions = [partition("not-a-date"), partition("2026-01-01")]
    with caplog.at_level(logging.ERROR, logger="resources.compaction.closing"):
        due = due_to_close(partitions, config(), utc_ms("2026-02-01T00:00:00"))
    assert [p.dt for p in due] == ["2026-01-01"]
    assert "events dt=not-a-date cannot be closed" in caplog.text
