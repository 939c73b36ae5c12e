"""Bounded retries with full jitter.

Data Prepper retries a throttled DynamoDB forever and at a fixed pace, which deepens the
throttling. Here every store call gets a bounded number of attempts with exponentially growing,
fully jittered sleeps, and then a clear `StoreUnavailableError` naming what failed.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """A bounded retry: how many attempts and the jittered exponential delay between them."""

    max_attempts: int = 6
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0

    def delay(self, attempt: int, rng: random.Random | None = None) -> float:
        """Full jitter (AWS architecture blog): uniform in [0, min(cap, base * 2**attempt)]."""
        ceiling = min(self.max_delay_s, self.base_delay_s * (2**attempt))
        return (rng or random).uniform(0, ceiling)

    def max_total_delay(self) -> float:
        return sum(
            min(self.max_delay_s, self.base_delay_s * 2.0**a) for a in range(self.max_attempts - 1)
        )


RETRY_RECORD = "leasehold_retry"
"""Set on the log records `log_retries` makes: the CLI sends them to its log file rather than
the terminal, where the error after the last attempt says how many there were."""


def log_retries(
    logger: logging.Logger, level: int, what: str, policy: RetryPolicy
) -> Callable[[BaseException, int, float], None]:
    """An `on_retry` that logs `<what> failed (attempt n of m), retrying in s: error`."""

    def on_retry(exc: BaseException, attempts: int, delay: float) -> None:
        logger.log(
            level,
            "%s failed (attempt %d of %d), retrying in %.2f s: %s",
            what,
            attempts,
            policy.max_attempts,
            delay,
            exc,
            extra={RETRY_RECORD: True},
        )

    return on_retry


def call_with_retries(
    fn: Callable[[], T],
    *,
    policy: RetryPolicy,
    is_retryable: Callable[[BaseException], bool],
    on_give_up: Callable[[BaseException, int], BaseException],
    sleep: Callable[[float], None] = time.sleep,
    on_retry: Callable[[BaseException, int, float], None] | None = None,
) -> T:
    """`fn()`, tried again after a retryable error until `policy.max_attempts`; then the error
    `on_give_up` makes. `on_retry(error, attempts so far, delay before the next)` observes each
    retry, e.g. to log it."""
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - classified just below
            if not is_retryable(exc):
                raise
            attempt += 1
            if attempt >= policy.max_attempts:
                raise on_give_up(exc, attempt) from exc
            delay = policy.delay(attempt)
            if on_retry is not None:
                on_retry(exc, attempt, delay)
            sleep(delay)
