"""Test doubles shared by the suites: a clock moved by hand, the store factory's type."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def fail_nth_commit(monkeypatch: Any, store: Any, n: int) -> dict[str, int]:
    """Make the store's `n`-th ingestion commit from now fail as a store that went away does
    (nothing written): where a run dies between two commits. Returns the live commit count."""
    from resources.coordination.errors import StoreUnavailableError

    commits = {"n": 0}
    real_commit = store.commit

    def commit(*args: Any, **kwargs: Any) -> Any:
        commits["n"] += 1
        if commits["n"] == n:
            raise StoreUnavailableError("test: the store went away")
        return real_commit(*args, **kwargs)

    monkeypatch.setattr(store, "commit", commit)
    return commits
