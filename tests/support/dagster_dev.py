"""`dagster dev` (webserver, daemon, code server) as a test's child, and nothing left behind.

Dagster's processes start processes of their own — the code server, run workers, each run's
Spark JVM — and a test that kills only the one it started leaves the rest running, holding
ports, CPU and SQLite files. So `dagster dev` starts in a session of its own and `stop()` kills
the whole process group; then, because a child may have started a session of its own, every
process whose environment carries this instance's `marker` variable (inherited by everything
Dagster and Spark start) is killed by pid too. `stop()` returns what still runs after all that,
for the test to assert on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.aws_server import free_port

GRACE_S = 10.0  # dagster dev stops its children on SIGTERM; this long, then SIGKILL


class DagsterDev:
    def __init__(self, workspace: Path, env: dict[str, str], log_path: Path, marker: str) -> None:
        """`marker` is a `NAME=value` pair of `env` unique to this instance (say, a tmp path)."""
        name, _, value = marker.partition("=")
        if env.get(name) != value:
            raise ValueError(f"the marker {marker!r} must be set in env")
        self.workspace = workspace
        self.env = env
        self.log_path = log_path
        self.marker = marker.encode()
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> DagsterDev:
        dagster = Path(sys.executable).parent / "dagster"
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [
                    str(dagster),
                    "dev",
                    "-w",
                    str(self.workspace),
                    "-h",
                    "127.0.0.1",
                    "-p",
                    str(self.port),
                ],
                cwd=self.log_path.parent,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def webserver_up(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/server_info", timeout=1):
                return True
        except OSError:
            return False

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 200) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def marked_pids(self) -> list[int]:
        """This instance's processes: those whose environment carries the marker."""
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) == os.getpid():
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:  # gone, or not ours
                continue
            if self.marker in environ.split(b"\0"):
                pids.append(int(entry.name))
        return pids

    def stop(self) -> list[int]:
        """Kill the process group, then any marked process outside it; the pids still alive."""
        if self.process is not None:
            pgid = self.process.pid  # start_new_session: the leader's pid is the group's id
            _signal_group(pgid, signal.SIGTERM)
            try:
                self.process.wait(GRACE_S)
            except subprocess.TimeoutExpired:
                pass
            _signal_group(pgid, signal.SIGKILL)
            if self.process.poll() is None:
                self.process.wait(GRACE_S)
        deadline = time.monotonic() + GRACE_S
        while (pids := self.marked_pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            time.sleep(0.2)
        return [pid for pid in self.marked_pids() if not _zombie(pid)]


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _zombie(pid: int) -> bool:
    """A killed child not yet reaped by its (also killed) parent: gone in all but name."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] == "Z"


def project_env(
    streams: Path,
    data_dir: Path,
    home: Path,
    *,
    lease_timeout_s: float,
    chunk_size: int,
    sensor_interval_s: int = 30,
) -> dict[str, str]:
    """The environment of a `dagster dev` project: this process's, without any LEASEHOLD_,
    DAGSTER_ or PYSPARK_ variable of its own, plus the project's streams, data directory,
    Dagster home, lease timeout, chunk size and sensor interval, as a user configures them."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LEASEHOLD_", "DAGSTER_", "PYSPARK_"))
    }
    return {
        **env,
        "DAGSTER_HOME": str(home),
        "PYTHONPATH": str(Path(__file__).resolve().parents[2]),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "LEASEHOLD_STREAMS": str(streams),
        "LEASEHOLD_DATA_DIR": str(data_dir),
        "LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS": str(int(lease_timeout_s)),
        "LEASEHOLD_CHUNK_SIZE": str(chunk_size),
        "LEASEHOLD_SENSOR_INTERVAL_SECONDS": str(sensor_interval_s),
    }
