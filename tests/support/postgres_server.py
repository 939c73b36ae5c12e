"""A PostgreSQL server on 127.0.0.1 for tests, from the binaries the `pgserver` wheel ships.

pgserver's own `get_server` listens on a Unix socket only and, as root, adds a system user and
loosens the permissions of every directory above its data directory. The production profile's
Dagster storage is reached over TCP, as in production, so this runs the same binaries directly:
`initdb`, then `postgres -h 127.0.0.1 -p <free port>` as a child this module owns and stops.
PostgreSQL refuses to run as root; as root (CI, these machines) it runs as `nobody`.
"""

from __future__ import annotations

import importlib.util
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.aws_server import free_port

USER = "postgres"
DATABASE = "dagster"


def _bin_dir() -> Path:
    """The wheel's binaries, found without importing `pgserver` (its import has side effects:
    a runtime directory, a warning)."""
    spec = importlib.util.find_spec("pgserver")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the pgserver package is not installed (pip install -e '.[dev]')")
    return Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"


def _demote() -> tuple[Callable[[], None] | None, pwd.struct_passwd | None]:
    """A preexec function that drops root for `nobody`, and that user; (None, None) if not
    root."""
    if os.geteuid() != 0:
        return None, None
    nobody = pwd.getpwnam("nobody")

    def demote() -> None:
        os.setgid(nobody.pw_gid)
        os.setuid(nobody.pw_uid)

    return demote, nobody


@dataclass
class LocalPostgres:
    """`root` is made here and removed by `stop`: a directory of its own under the system's
    temporary directory, because `nobody` must reach it and pytest's are private to root."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="leasehold-pg-")))
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """psycopg2's scheme spelled out: SQLAlchemy 2.1 takes a bare `postgresql://` for
        psycopg 3, which dagster-postgres does not install (docs/production.md)."""
        return f"postgresql+psycopg2://{USER}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def log_path(self) -> Path:
        return self.root / "postgres.log"

    def start(self, timeout_s: float = 60.0) -> LocalPostgres:
        """Start it; on any failure stop what started and remove the directory."""
        try:
            return self._start(timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, timeout_s: float) -> LocalPostgres:
        data = self.root / "data"
        data.mkdir(parents=True)
        self.root.chmod(0o755)
        demote, user = _demote()
        bin_dir = _bin_dir()
        if user is not None:
            for path in (self.root, data):
                os.chown(path, user.pw_uid, user.pw_gid)
            # `nobody` must also reach the binaries: a checkout under a root-only directory
            # (`mktemp -d`, as CI's clean clone) hides the wheel's. A copy (~40 MB) of its own
            # here, laid out as in site-packages: the binaries find share/ and lib/ relative
            # to themselves, and their shared libraries at $ORIGIN/../../../pgserver.libs.
            package = bin_dir.parent.parent
            shutil.copytree(bin_dir.parent, self.root / "pgserver" / "pginstall", symlinks=True)
            libs = package.parent / "pgserver.libs"
            shutil.copytree(libs, self.root / "pgserver.libs", symlinks=True)
            bin_dir = self.root / "pgserver" / "pginstall" / "bin"
        env = {**os.environ, "LC_ALL": "C"}
        subprocess.run(
            [str(bin_dir / "initdb"), "-D", str(data), "-U", USER, "--auth=trust"]
            + ["--encoding=UTF8", "--no-sync", "--no-instructions"],
            check=True,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=demote,
            env=env,
            timeout=timeout_s,
        )
        with self.log_path.open("wb") as log:
            self.process = subprocess.Popen(
                [str(bin_dir / "postgres"), "-D", str(data), "-h", "127.0.0.1"]
                + ["-p", str(self.port), "-k", "", "-c", "fsync=off"]
                + ["-c", "synchronous_commit=off", "-c", "full_page_writes=off"],
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=demote,
                env=env,
                start_new_session=True,
            )
        deadline = time.monotonic() + timeout_s
        while True:
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                break
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"PostgreSQL did not accept connections on 127.0.0.1:{self.port}:\n"
                    + self.log_path.read_text(errors="replace")[-2000:]
                )
            time.sleep(0.2)
        subprocess.run(
            [str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p", str(self.port)]
            + ["-U", USER, DATABASE],
            check=True,
            capture_output=True,
            timeout=timeout_s,
        )
        return self

    def stop(self) -> None:
        """Fast shutdown (SIGINT: abort sessions, checkpoint, exit), SIGKILL if it hangs; then
        the data directory goes."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()
        shutil.rmtree(self.root, ignore_errors=True)
