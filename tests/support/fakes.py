"""Test doubles shared by the suites: a clock moved by hand, the store factory's type."""

from __future__ import annotations

from collections.abc import Callable

from resources.stores import CoordinationStore

StoreFactory = Callable[..., CoordinationStore]


class FakeClock:
    """Wall clock the tests move by hand, so expiry is tested without sleeping."""

    def __init__(self, start: float = 1_800_000_000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
