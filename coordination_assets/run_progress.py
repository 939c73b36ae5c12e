"""How far `leasehold run` got, stage by stage: the `Progress` it reports to, the plain
one-line-per-stage kind a log file or CI shows, and `reported_stage`, which wraps a stage's work.

The CLI draws its own on a terminal (`resources.cli.story.TerminalProgress`).
"""

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Protocol


class Progress(Protocol):
    """Where `leasehold run` says how far it got: one stage at a time (discovery, ingestion,
    merges, publication, checks), each started, updated while it works, and finished with
    what it did. The CLI draws it (a live line on a terminal, plain lines otherwise)."""

    def start(self, stream: str, stage: str) -> None: ...

    def update(self, text: str) -> None: ...

    def finish(self, text: str) -> None: ...


class PlainProgress:
    """One line per finished stage, with its duration: what a log file or CI shows."""

    def __init__(self, out: Callable[[str], None] = print) -> None:
        self.out = out
        self.stream, self.stage, self.started = "", "", 0.0

    def start(self, stream: str, stage: str) -> None:
        self.stream, self.stage, self.started = stream, stage, time.monotonic()

    def update(self, text: str) -> None:
        """Plain output keeps to one line per stage: the details are in the summary."""

    def finish(self, text: str) -> None:
        elapsed = time.monotonic() - self.started
        self.out(f"{self.stream} > {self.stage}: {text} ({elapsed:.1f} s)")


@contextmanager
def reported_stage(progress: Progress | None, stream: str, stage: str) -> Iterator[list[str]]:
    """A stage of `progress` around a block; what the block appends is its finishing line."""
    if progress is not None:
        progress.start(stream, stage)
    done: list[str] = []
    yield done
    if progress is not None:
        progress.finish(done[0] if done else "done")
