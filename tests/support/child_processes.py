"""Child processes of the chaos tests: start one on a `tests.support` module, wait for a file
it writes, and leave none behind.

Every race spawns its children the same way (this interpreter, the project root as working
directory, this environment, one JSON payload as the only argument) and must never leave one
running — a stopped one (SIGSTOP) included — whatever the test's outcome.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.support.aws_action_recorder import recorded_command

ROOT = Path(__file__).resolve().parents[2]


def child_processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    """The body of a fixture: yields the list a test appends its children to, then kills
    whichever still runs (continued first: a test may have stopped it) and reaps them all."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(30)


def spawn_child(
    children: list[subprocess.Popen[bytes]], module: str, payload: dict[str, Any]
) -> subprocess.Popen[bytes]:
    """`python -m tests.support.<module> <payload as JSON>`, added to `children`; its AWS
    calls are recorded for the IAM policy check (tests/support/aws_action_recorder.py)."""
    proc = subprocess.Popen(
        recorded_command(f"tests.support.{module}", json.dumps(payload)),
        cwd=ROOT,
        env=os.environ.copy(),
    )
    children.append(proc)
    return proc


def wait_for(path: Path, proc: subprocess.Popen[bytes], limit_s: float = 30) -> None:
    """Until `proc` writes `path`; fails if it exits first or takes longer than `limit_s`."""
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert proc.poll() is None, f"child exited with {proc.returncode} before {path.name}"
        assert time.monotonic() < deadline, f"no {path.name} after {limit_s} s"
        time.sleep(0.02)
