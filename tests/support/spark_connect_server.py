"""A Spark Connect server as an operator starts it (docs/production.md), for the tests that
drive leasehold through one: `start-connect-server.sh --wait` from pyspark's own distribution,
a JVM of its own bound to 127.0.0.1, its Python workers this interpreter."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from resources.spark.session import JAVA_17

SPARK_CONNECT_START_S = 180.0
T = TypeVar("T")


def wait_for(
    what: str, found: Callable[[], T | None], timeout_s: float, why: Callable[[], str]
) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        value = found()
        if value:
            return value
        assert time.monotonic() < deadline, f"no {what} after {timeout_s:.0f} s\n{why()}"
        time.sleep(0.5)


@dataclass
class SparkConnectServer:
    """`start-connect-server.sh --wait` from pyspark's own distribution, as an operator starts
    it (docs/production.md): a JVM of its own, bound to 127.0.0.1, its process group ours."""

    root: Path
    port: int
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"sc://127.0.0.1:{self.port}"

    @property
    def log(self) -> Path:
        return self.root / "spark-connect.log"

    def start(self) -> SparkConnectServer:
        import pyspark

        spark_home = Path(pyspark.__file__).parent
        self.root.mkdir(parents=True, exist_ok=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
        env.update(
            # The tasks' Python (they parse the sources with pyarrow): this interpreter.
            PYSPARK_PYTHON=sys.executable,
            SPARK_HOME=str(spark_home),
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_LOG_DIR=str(self.root),
            SPARK_PID_DIR=str(self.root),
        )
        if not env.get("JAVA_HOME") and JAVA_17.is_dir():
            env["JAVA_HOME"] = str(JAVA_17)
        conf = {
            "spark.connect.grpc.binding.address": "127.0.0.1",
            "spark.connect.grpc.binding.port": str(self.port),
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
        }
        args = [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                ["bash", str(spark_home / "sbin" / "start-connect-server.sh"), "--wait"]
                + ["--master", "local[2]", "--driver-memory", "768m", *args],
                cwd=self.root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def wait_until_up(self) -> None:
        def up() -> bool:
            assert self.process is not None and self.process.poll() is None, (
                f"the Spark Connect server exited:\n{self.tail()}"
            )
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for("Spark Connect server on 127.0.0.1", up, SPARK_CONNECT_START_S, self.tail)

    def tail(self) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(line for line in lines if not line.startswith("\tat "))[-3000:]

    def stop(self) -> None:
        if self.process is None:
            return
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            try:
                self.process.wait(15)
                break
            except subprocess.TimeoutExpired:
                continue
