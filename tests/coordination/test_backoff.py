"""The reopen delay of a CLOSED partition: doubles per close, capped, equal jitter."""

from __future__ import annotations

import random

import pytest

from resources.coordination.backoff import ReopenBackoff, reopen_delay_s
from resources.coordination.lease import LeaseTiming, LeaseTimingError, TimingSettings


@pytest.mark.parametrize(
    ("closed_count", "ceiling"),
    [(1, 60), (2, 120), (3, 240), (4, 480), (5, 960), (6, 1000), (50, 1000)],
)
def test_the_ceiling_doubles_per_close_up_to_the_cap(closed_count: int, ceiling: float) -> None:
    assert reopen_delay_s(closed_count, 60, 1000, draw=0.0) == ceiling


def test_a_huge_closed_count_is_the_cap_not_an_overflow() -> None:
    assert reopen_delay_s(10**9, 60, 3600, draw=0.0) == 3600
    assert reopen_delay_s(10**9, 0, 3600, draw=0.0) == 0  # no delay stays no delay


def test_no_close_yet_counts_as_the_first() -> None:
    """A closedCount below 1 never shrinks the delay under the base."""
    assert reopen_delay_s(0, 60, 3600, draw=0.0) == 60


@pytest.mark.parametrize("closed_count", [1, 3, 7])
def test_equal_jitter_keeps_at_least_half_the_ceiling(closed_count: int) -> None:
    ceiling = reopen_delay_s(closed_count, 60, 1000, draw=0.0)
    assert reopen_delay_s(closed_count, 60, 1000, draw=0.5) == ceiling * 0.75
    draws = random.Random(12).random
    delays = [reopen_delay_s(closed_count, 60, 1000, draw=draws()) for _ in range(2000)]
    assert all(ceiling / 2 < d <= ceiling for d in delays)
    # spread over the whole upper half, not bunched at one end
    assert min(delays) < ceiling * 0.55 and max(delays) > ceiling * 0.95


def test_the_policy_draws_from_its_source() -> None:
    draws = iter([0.0, 0.5])
    backoff = ReopenBackoff(10, 100, draw=lambda: next(draws))
    assert [backoff.delay_s(3), backoff.delay_s(3)] == [40, 30]
    assert [ReopenBackoff.fixed(7).delay_s(n) for n in (1, 2, 9)] == [7, 7, 7]


def test_lease_timing_carries_the_settings() -> None:
    timing = TimingSettings(reopen_after_seconds=30, reopen_max_seconds=90).lease_timing()
    assert (timing.reopen_backoff.base_s, timing.reopen_backoff.cap_s) == (30, 90)
    assert LeaseTiming().reopen_backoff == ReopenBackoff(60, 3600)


def test_the_cap_may_not_be_below_the_base() -> None:
    TimingSettings(reopen_after_seconds=60, reopen_max_seconds=60).validate()
    with pytest.raises(LeaseTimingError) as err:
        TimingSettings(reopen_after_seconds=120, reopen_max_seconds=60).validate()
    assert err.value.field == "reopen_max_seconds"
    assert "must be at least reopen_after_seconds" in str(err.value)
    with pytest.raises(LeaseTimingError):
        LeaseTiming(reopen_after_s=7200)  # above the default cap
