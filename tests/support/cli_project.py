"""A project directory where `leasehold` runs as a real command, in processes the test can kill.

Sample sources (with malformed lines), a streams.yaml, a lake, a Dagster home and the store —
SQLite under the data directory, or a table of its own on the local AWS server — configured the
way a user configures them: by environment variables only. The test process builds the same
store from the same settings to watch it.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from resources.coordination.lease_store import LeaseStore
from resources.ingestion.sample_data import write_sample_sources
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.aws_action_recorder import recorded_command
from tests.support.aws_server import AWS_TEST_ENV
from tests.support.pipeline_env import write_streams

ROOT = Path(__file__).resolve().parents[2]
INVOCATION_TIMEOUT_S = 300.0
"""One `leasehold` command's bound: 180 s was too short for `leasehold run` converging after
random kills on moto when the machine ran at half its speed (CI of 60 min against 30)."""


@dataclass
class CliProject:
    root: Path
    settings: StoreSettings
    env: dict[str, str]
    invocations: int = 0
    logs: list[Path] = field(default_factory=list)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def sources(self) -> Path:
        return self.root / "sources"

    @property
    def streams_path(self) -> Path:
        return self.root / "streams.yaml"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def start(self, *args: str, wrapper: tuple[str, ...] = ()) -> subprocess.Popen[bytes]:
        """`leasehold <args>` in its own process group (its Spark JVM with it), its output in a
        log file per invocation; its AWS calls are recorded for the IAM policy check
        (tests/support/aws_action_recorder.py). `wrapper` (`module`, its arguments) runs it
        through a test module that changes the process first, as `pausing_queue` does."""
        self.invocations += 1
        log = self.root / "logs" / f"{self.invocations:02d}-{'-'.join(args)}.log"
        log.parent.mkdir(exist_ok=True)
        self.logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", *wrapper, "resources.cli.main", *args]
                if wrapper
                else recorded_command("resources.cli.main", *args),
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(proc)
        return proc

    def run(self, *args: str) -> tuple[int, str]:
        proc = self.start(*args)
        code = proc.wait(INVOCATION_TIMEOUT_S)
        return code, self.logs[-1].read_text(errors="replace")

    def store(self) -> LeaseStore:
        return build_store(self.settings)

    def tail(self, lines: int = 40) -> str:
        text = self.logs[-1].read_text(errors="replace").splitlines() if self.logs else []
        return "\n".join(text[-lines:])

    def stop_children(self) -> None:
        for proc in self.children:
            if proc.poll() is None:
                kill_group(proc)


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process, then whatever it started that is still there (its Spark JVM exits
    by itself once its parent's pipe closes, but not always before the next run starts)."""
    proc.kill()
    proc.wait(30)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def cli_project(
    root: Path,
    backend: str,
    *,
    objects: int,
    records_per_object: int,
    malformed_every: int,
    chunk_size: int,
    lease_timeout_s: float,
    dynamodb_endpoint_url: str | None = None,
    partition: dict[str, int] | None = None,
) -> CliProject:
    root.mkdir(parents=True)
    write_sample_sources(
        root / "sources",
        objects=objects,
        records_per_object=records_per_object,
        days=3,
        malformed_every=malformed_every,
    )
    write_streams(
        root / "streams.yaml", f"file://{root / 'sources'}", f"file://{root / 'lake'}", partition
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        SPARK_LOCAL_IP="127.0.0.1",
        DAGSTER_HOME=str(root / "dagster_home"),
        LEASEHOLD_DATA_DIR=str(root / "data"),
        LEASEHOLD_STREAMS=str(root / "streams.yaml"),
        LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS=str(lease_timeout_s),
        LEASEHOLD_CHUNK_SIZE=str(chunk_size),
    )
    if backend == "sqlite":
        # The command finds its file under LEASEHOLD_DATA_DIR; the test watches the same one.
        settings = StoreSettings(backend="sqlite", sqlite_path=str(root / "data" / "leasehold.db"))
    else:
        assert dynamodb_endpoint_url, "DynamoDB needs the local AWS server's endpoint"
        table = f"leasehold-cli-{uuid.uuid4().hex[:12]}"
        settings = StoreSettings(
            backend="dynamodb", table_name=table, endpoint_url=dynamodb_endpoint_url
        )
        env.update(
            AWS_TEST_ENV,
            LEASEHOLD_STORE_BACKEND="dynamodb",
            LEASEHOLD_DYNAMODB_ENDPOINT_URL=dynamodb_endpoint_url,
            LEASEHOLD_DYNAMODB_TABLE=table,
        )
    return CliProject(root, settings, env)
