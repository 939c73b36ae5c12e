"""Real OS processes racing over one store, on both backends.

Each verdict comes from records the processes wrote themselves (an account independent of the
store's counters), not from what the store claims.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from resources.cli.demo import run_demo
from resources.coordination.items import PartitionStatus
from resources.coordination.lease import LeaseTiming
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.aws_action_recorder import recorded_command

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 2.0
RENEW_S = 0.5


def test_processes_race_and_complete_each_partition_exactly_once(
    backend: str, settings_for, tmp_path: Path
) -> None:
    settings = settings_for(backend)
    result = run_demo(
        settings,
        workers=4,
        partitions=240,
        work_dir=tmp_path,
        timing=LeaseTiming(ownership_timeout_s=5, renew_interval_s=1),
    )
    assert result.duplicates == [] and result.missing == []
    assert sum(result.completed_by_worker.values()) == 240
    assert len(result.completed_by_worker) == 4
    assert sum(1 for n in result.completed_by_worker.values() if n > 0) >= 2  # a real race
    store = build_store(settings)
    (summary,) = [s for s in store.status() if s.source_identifier.startswith("demo-")]
    assert summary.counts["COMPLETED"] == 240


def spawn(settings: StoreSettings, out: Path, **args: object) -> subprocess.Popen[bytes]:
    payload = {
        "settings": settings.__dict__,
        "timeout": TIMEOUT_S,
        "renew": RENEW_S,
        "out": str(out),
        **args,
    }
    return subprocess.Popen(
        recorded_command("tests.support.concurrency_child", json.dumps(payload)),
        cwd=ROOT,
        env=os.environ.copy(),
    )


def wait_for(path: Path, proc: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert proc.poll() is None or path.exists(), f"child exited with {proc.returncode}"
        assert time.monotonic() < deadline, f"timed out waiting for {path.name}"
        time.sleep(0.05)


@pytest.fixture
def children():
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(10)


def test_stopped_owner_is_taken_over_and_its_commit_refused(
    backend: str, settings_for, tmp_path: Path, children
) -> None:
    settings = settings_for(backend)
    store = build_store(settings)
    sid = store.source_identifier("race")
    store.create_partitions(sid, ["x"])
    zombie_out, successor_out = tmp_path / "zombie", tmp_path / "successor"
    zombie = spawn(settings, zombie_out, mode="hold", key="x", owner="zombie", progress={"o": 1})
    children.append(zombie)
    wait_for(tmp_path / "zombie.ready", zombie)
    os.kill(zombie.pid, signal.SIGSTOP)
    successor = spawn(settings, successor_out, mode="take", key="x", owner="successor", wait=60)
    children.append(successor)
    assert successor.wait(90) == 0
    took = json.loads(successor_out.read_text())
    assert took["epoch"] == 2 and took["progress"] == {"o": 1}
    os.kill(zombie.pid, signal.SIGCONT)
    (tmp_path / "zombie.go").write_text("go")
    assert zombie.wait(60) == 0
    outcome = json.loads(zombie_out.read_text())
    assert outcome["lease_complete"].startswith("refused")
    assert outcome["store_complete"].startswith("refused")  # the store itself fences it
    item = store.get(sid, "x")
    assert item.status is PartitionStatus.COMPLETED and item.epoch == 2
    assert item.progress == {"by": "successor"}


def test_killed_owner_is_reacquired_with_its_last_saved_progress(
    backend: str, settings_for, tmp_path: Path, children
) -> None:
    settings = settings_for(backend)
    store = build_store(settings)
    sid = store.source_identifier("race")
    store.create_partitions(sid, ["y"])
    victim = spawn(
        settings,
        tmp_path / "victim",
        mode="hold",
        key="y",
        owner="victim",
        progress={"offset": 1234, "file": "y"},
    )
    children.append(victim)
    wait_for(tmp_path / "victim.ready", victim)
    os.kill(victim.pid, signal.SIGKILL)
    victim.wait(10)
    killed_at = time.monotonic()
    heir = spawn(settings, tmp_path / "heir", mode="take", key="y", owner="heir", wait=60)
    children.append(heir)
    assert heir.wait(90) == 0
    assert time.monotonic() - killed_at >= TIMEOUT_S * 0.5  # it had to wait out the lease
    took = json.loads((tmp_path / "heir").read_text())
    assert took["progress"] == {"offset": 1234, "file": "y"}
    assert took["epoch"] == 2
    assert store.get(sid, "y").status is PartitionStatus.COMPLETED
