"""How long a CLOSED partition waits before it is tried again: capped exponential backoff
with equal jitter.

An object that could not be read once is often readable a minute later (a file still being
written, a throttled bucket); one that failed five times is probably broken until somebody
fixes it, and retrying it every minute only burns Spark jobs and sensor ticks. So the wait
doubles with every close, up to a cap. Pure: the random draw is injected, so tests choose it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

Draw = Callable[[], float]
"""A uniform random number in [0, 1): the jitter's source (`random.random`)."""

# 2.0 ** 1000 is still a finite float and far beyond any cap, so a large closedCount neither
# overflows (2.0 ** 1100 raises) nor changes the result.
_MAX_DOUBLINGS = 1000


def reopen_delay_s(closed_count: int, base_s: float, cap_s: float, draw: float) -> float:
    """Seconds until a partition closed for the `closed_count`-th time reopens.

    The ceiling is `min(cap_s, base_s * 2 ** (closed_count - 1))`: the first close waits
    `base_s`, each further one twice as long, never longer than `cap_s`. The delay is drawn
    from (ceiling / 2, ceiling] ("equal jitter": `draw` 0 gives the ceiling, a draw near 1
    half of it). Equal rather than full jitter (anywhere in [0, ceiling]): full jitter may
    reopen a broken object almost at once, so the backoff would not bound how often it is
    retried; half the ceiling at least keeps that bound, and the other half still spreads out
    partitions closed together (a chunk whose bucket was briefly unreadable), so their retries
    do not all come due in the same sensor tick.
    """
    doublings = min(max(closed_count - 1, 0), _MAX_DOUBLINGS)
    ceiling = min(cap_s, base_s * 2.0**doublings)
    return ceiling * (1.0 - draw / 2.0)


@dataclass(frozen=True)
class ReopenBackoff:
    """The reopen policy a close is made with: `TimingSettings.reopen_after_seconds` and
    `reopen_max_seconds`, and the jitter's random source (fixed in tests)."""

    base_s: float
    cap_s: float
    draw: Draw = field(default=random.random, compare=False)

    @classmethod
    def fixed(cls, delay_s: float) -> ReopenBackoff:
        """Always exactly `delay_s`: no growth, no jitter (tests that need exact times)."""
        return cls(delay_s, delay_s, draw=lambda: 0.0)

    def delay_s(self, closed_count: int) -> float:
        return reopen_delay_s(closed_count, self.base_s, self.cap_s, self.draw())
