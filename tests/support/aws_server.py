"""A real AWS-compatible HTTP server on loopback (moto's server, as a separate process).

The contract tests talk to it through boto3 exactly as production talks to AWS: no in-process
patching. A separate process (not a thread in the test process) so that stopping it is a real
outage and child processes in concurrency tests reach it like any other endpoint.

It handles one request at a time (`serve`). moto's own server (`python -m moto.server`) runs
requests on threads without isolating them: a `TransactWriteItems` deep-copies every table it
touches when it begins and, when cancelled, puts that copy back, undoing whatever other clients
wrote meanwhile — acknowledged writes vanish — and a copy taken while another request writes can
fail with a 500. DynamoDB applies each request atomically; served one at a time, moto does too,
and processes racing over one table (the concurrency tests) see DynamoDB's semantics.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class LocalAwsServer:
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout_s: float = 30.0) -> LocalAwsServer:
        env = {**os.environ, **AWS_TEST_ENV}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.aws_server", str(self.port)],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1).read()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError("moto server exited at start") from None
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"moto server did not answer on {self.endpoint_url}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


AWS_TEST_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


def serve(port: int) -> None:
    """moto's server app, as `moto.server` runs it, behind one lock: each request is handled
    whole — body read, backend call, response built — before the next begins."""
    import threading

    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    app = DomainDispatcherApplication(create_backend_app)
    lock = threading.Lock()

    def one_at_a_time(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        with lock:
            return list(app(environ, start_response))

    run_simple("127.0.0.1", port, one_at_a_time, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve(int(sys.argv[1]))
