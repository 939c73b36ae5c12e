"""A Spark standalone cluster on hosts of its own whose machines see none of the driver's disk.

`SparkCluster(root, network, hidden=[...], workers=2, connect=True)` starts, from pyspark's own
distribution (its `bin/spark-class` and `sbin/start-connect-server.sh`; the wheel ships no
`start-master.sh` / `start-worker.sh`, so the daemons' classes are run as those scripts would),
each daemon on a host of `network` (tests/support/netns.py: a network namespace of its own,
named as the daemon is), bound to and advertising that host's address (`--host`,
`SPARK_LOCAL_IP`), on Spark's usual ports (each host has its own):

- a master, `org.apache.spark.deploy.master.Master`, on host `master` (7077, its UI 8080);
- N workers, `org.apache.spark.deploy.worker.Worker` (1 core, small memory), on hosts
  `worker-<i>`, each also in a mount namespace of its own (`unshare --mount --propagation
  private`) in which an empty tmpfs is mounted over every directory of `hidden` before the JVM
  is exec'd: the driver's work and data directories and the project's source packages
  (`source_package_dirs`), so a task that reads them finds nothing and code it imports can only
  have come with the session;
- optionally a Spark Connect server (`start-connect-server.sh --wait`, `local[2]`) on host
  `connect` (15002), its disk hidden the same way.

Each daemon runs in the foreground in a session of its own, so its process tree (the worker's
JVM, the executor JVMs it launches, their Python daemon and workers) is ours to list and to
kill: `worker_processes(i)`, `kill_worker(i)` (SIGKILL to the whole tree, the way a machine
dies). pyspark's Python daemon moves itself to a process group of its own (`os.setpgid`), so
the tree is walked by parent pid, not by process group. `stop()` (or leaving the `with`) ends
every process it started, and fails naming any that survived. Every wait is bounded and fails
naming what it waited for, with the daemon's log.

The executors run the interpreter of this process (`PYSPARK_PYTHON`: a driver's to set;
`daemon_env` sets it for the Connect server): its virtualenv must not be hidden. `env` is
given to every daemon (and so to the executors and Python workers they start) on top of this
process's environment: what a machine of the cluster has of its own, such as its AWS
credentials — nothing of it comes from a driver; `worker_env[i]` is worker i's alone (its
HTTP proxy, say).
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from tests.support.netns import Host, HostNetwork

ROOT = Path(__file__).resolve().parents[2]
JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")
PACKAGES = ("resources", "coordination_assets")
MASTER_PORT, MASTER_UI_PORT, WORKER_UI_PORT, CONNECT_PORT = 7077, 8080, 8081, 15002
START_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 20.0
KILL_TIMEOUT_S = 15.0
QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
"""Short-lived JVMs on two shared cores: the C1 compiler only and one GC thread start faster
and take less CPU from the rest of the machine."""


NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
"""This machine's proxy settings, if any, are not for the test's hosts."""
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY")


def without_proxies(env: dict[str, str]) -> dict[str, str]:
    """`env` without proxy settings: a process of the test reaches only the test's hosts."""
    return {k: v for k, v in env.items() if k.upper() not in PROXY_VARIABLES}


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def wait_until(
    what: str, check: Callable[[], bool], timeout_s: float, why: Callable[[], str]
) -> None:
    """Poll `check` until it holds; after `timeout_s`, fail naming `what` and `why()`."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout_s:.0f} s\n{why()}")
        time.sleep(0.2)


def source_package_dirs() -> list[Path]:
    """Every directory the project's packages can be imported from on this machine: this
    checkout's, and wherever an interpreter without `PYTHONPATH` finds them (an editable
    install may point at another checkout)."""
    found = {(ROOT / p).resolve() for p in PACKAGES if (ROOT / p).is_dir()}
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = (
        "import importlib.util, json\n"
        f"specs = [importlib.util.find_spec(p) for p in {list(PACKAGES)!r}]\n"
        "print(json.dumps([l for s in specs if s for l in s.submodule_search_locations or []]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", probe], cwd="/", env=env, capture_output=True, check=True, timeout=60
    )
    found.update(Path(p).resolve() for p in json.loads(out.stdout))
    return sorted(found)


# -- processes ----------------------------------------------------------------------------------


def _parents() -> dict[int, int]:
    """pid -> parent pid of every live (not zombie) process."""
    parents = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # exited meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses
        state, ppid = stat[stat.rindex(")") + 2 :].split()[:2]
        if state != "Z":
            parents[int(entry)] = int(ppid)
    return parents


def process_tree(pid: int) -> list[int]:
    """`pid` (if alive) and every live descendant of it."""
    parents = _parents()
    children: dict[int, list[int]] = {}
    for child, parent in parents.items():
        children.setdefault(parent, []).append(child)
    tree, todo = [], [pid] if pid in parents else []
    while todo:
        current = todo.pop()
        tree.append(current)
        todo.extend(children.get(current, []))
    return tree


def command_line(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "(exited)"
    return raw.replace(b"\0", b" ").decode(errors="replace").strip()


def alive(pids: Sequence[int]) -> list[int]:
    live = _parents()
    return [p for p in pids if p in live]


@dataclass
class Daemon:
    """One foreground Spark process of the cluster, its output in `root/<name>.log`."""

    name: str
    root: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def log(self) -> Path:
        return self.root / f"{self.name}.log"

    def start(self, argv: list[str], env: dict[str, str]) -> Daemon:
        self.root.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return self

    def tail(self, chars: int = 3000) -> str:
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError:
            return f"({self.log} unreadable)"
        text = "\n".join(line for line in lines if not line.startswith("\tat "))
        return f"-- {self.name}'s log ({self.log}) --\n{text[-chars:]}"

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def tree(self) -> list[int]:
        return process_tree(self.process.pid) if self.process is not None else []

    def signal_tree(self, sig: signal.Signals, timeout_s: float) -> list[int]:
        """Send `sig` to every process of the tree at once; wait up to `timeout_s` for them to
        end; the ones still alive."""
        pids = self.tree()
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass  # ended meanwhile
        deadline = time.monotonic() + timeout_s
        while True:
            if self.process is not None:
                self.process.poll()  # reap our own child, the tree's root
            left = alive(pids)
            if not left or time.monotonic() > deadline:
                return left
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL the whole tree; fail naming the processes that outlived it."""
        left = self.signal_tree(signal.SIGKILL, KILL_TIMEOUT_S)
        if left:
            named = "\n".join(f"{p}: {command_line(p)}" for p in left)
            raise TimeoutError(f"{self.name}: alive {KILL_TIMEOUT_S:.0f} s after SIGKILL:\n{named}")

    def stop(self) -> None:
        """SIGTERM the tree, then SIGKILL whatever is left."""
        if self.signal_tree(signal.SIGTERM, STOP_TIMEOUT_S):
            self.kill()
        if self.process is not None:
            self.process.wait(KILL_TIMEOUT_S)


def in_namespace(host: Host, argv: list[str], hidden: Sequence[Path], cwd: Path) -> list[str]:
    """`argv` exec'd on `host` (its network namespace) in a mount namespace of its own where
    each of `hidden` is an empty tmpfs (mounts private, so nothing propagates back), from
    `cwd`."""
    mounts = "".join(
        f"mount -t tmpfs -o size=1m,mode=0755 leasehold-hidden {shlex.quote(str(d))}\n"
        for d in hidden
    )
    script = f'set -e\n{mounts}cd {shlex.quote(str(cwd))}\nexec "$@"\n'
    unshare = ["unshare", "--mount", "--propagation", "private", "--"]
    return host.argv([*unshare, "sh", "-c", script, "sh", *argv])


def daemon_env(
    root: Path, host: Host, master: Host, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """This environment without the caller's Spark and Python path settings, plus `extra`:
    pyspark's own distribution, `host`'s address, small daemons, logs and pid files under
    `root`, no conf dir of the machine's, and this interpreter for Python workers."""
    env = {
        k: v
        for k, v in without_proxies(dict(os.environ)).items()
        if not k.startswith(("PYSPARK_", "SPARK_")) and k != "PYTHONPATH"
    }
    env.update(extra or {})
    conf_dir = root / "conf"
    conf_dir.mkdir(parents=True, exist_ok=True)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_CONF_DIR=str(conf_dir),
        SPARK_LOCAL_IP=host.ip,
        SPARK_LOCAL_HOSTNAME=host.ip,  # or Spark looks its address up in DNS (no route here)
        SPARK_MASTER_HOST=master.ip,
        SPARK_LOG_DIR=str(root),
        SPARK_PID_DIR=str(root),
        SPARK_DAEMON_MEMORY="256m",
        SPARK_DAEMON_JAVA_OPTS=QUICK_JVM,
        PYSPARK_PYTHON=sys.executable,
    )
    if not env.get("JAVA_HOME") and JAVA_17.is_dir():
        env["JAVA_HOME"] = str(JAVA_17)
    return env


def port_open(host: str, port: int) -> bool:
    try:
        socket.create_connection((host, port), timeout=1).close()
        return True
    except OSError:
        return False


@dataclass
class SparkCluster:
    """A master, `workers` hidden workers and, with `connect`, a hidden Spark Connect server
    (`local[2]`: its own executors), on the hosts of `network` named after them; a context
    manager. `hidden` must exist and must not hold
    `root` nor this interpreter."""

    root: Path
    network: HostNetwork
    hidden: Sequence[Path] = ()
    workers: int = 2
    connect: bool = False
    worker_memory: str = "1g"
    env: dict[str, str] = field(default_factory=dict)
    worker_env: dict[int, dict[str, str]] = field(default_factory=dict)
    """Worker i's own environment on top of `env` (a machine of its own: its proxy, say)."""
    daemons: list[Daemon] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.hidden = [Path(d).resolve() for d in self.hidden]
        for d in self.hidden:
            if not d.is_dir():
                raise ValueError(f"hidden directory {d} does not exist")
            for kept in (self.root, Path(sys.executable).parent, spark_home()):
                if kept == d or d in kept.parents:
                    raise ValueError(f"hidden directory {d} holds {kept}, which must be seen")

    @staticmethod
    def host_names(workers: int, connect: bool) -> list[str]:
        """The hosts a cluster of `workers` (and a Connect server) needs in its network."""
        return ["master", *(f"worker-{i}" for i in range(workers))] + ["connect"] * connect

    @property
    def master_url(self) -> str:
        return f"spark://{self.network['master'].ip}:{MASTER_PORT}"

    @property
    def connect_url(self) -> str:
        return f"sc://{self.network['connect'].ip}:{CONNECT_PORT}"

    @staticmethod
    def executor_conf() -> dict[str, str]:
        """Session settings of a driver on this cluster: one small executor per worker."""
        return {
            "spark.executor.memory": "512m",
            "spark.executor.cores": "1",
            "spark.executor.extraJavaOptions": QUICK_JVM,
            "spark.driver.extraJavaOptions": QUICK_JVM,
        }

    def __enter__(self) -> SparkCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> SparkCluster:
        master = Daemon("master", self.root / "master")
        self.daemons.append(master)
        host = self.network["master"]
        argv = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.master.Master"]
        argv += ["--host", host.ip, "--port", str(MASTER_PORT)]
        argv += ["--webui-port", str(MASTER_UI_PORT)]
        master.start(host.argv(argv), self._env(master, host, self.env))
        for i in range(self.workers):
            self._start_worker(i)
        if self.connect:
            self._start_connect()
        wait_until(
            f"{self.workers} workers registered with the master at {self.master_url}",
            lambda: self._alive_workers() >= self.workers,
            START_TIMEOUT_S,
            self.logs,
        )
        if self.connect:
            server = self.daemons[-1]
            wait_until(
                f"Spark Connect server at {self.connect_url}",
                lambda: (
                    self._check_running(server)
                    and port_open(self.network["connect"].ip, CONNECT_PORT)
                ),
                START_TIMEOUT_S,
                server.tail,
            )
        return self

    def _start_worker(self, i: int) -> None:
        worker = Daemon(f"worker-{i}", self.root / f"worker-{i}")
        self.daemons.append(worker)
        host = self.network[worker.name]
        argv = [str(spark_home() / "bin" / "spark-class"), "org.apache.spark.deploy.worker.Worker"]
        argv += ["--host", host.ip, "--port", "0", "--webui-port", str(WORKER_UI_PORT)]
        argv += ["--cores", "1", "--memory", self.worker_memory]
        argv += ["--work-dir", str(worker.root / "work"), self.master_url]
        env = self._env(worker, host, {**self.env, **self.worker_env.get(i, {})})
        worker.start(in_namespace(host, argv, self.hidden, worker.root), env)

    def _env(self, daemon: Daemon, host: Host, extra: dict[str, str]) -> dict[str, str]:
        return daemon_env(daemon.root, host, self.network["master"], extra)

    def _start_connect(self) -> None:
        server = Daemon("connect", self.root / "connect")
        self.daemons.append(server)
        host = self.network["connect"]
        conf = {
            "spark.connect.grpc.binding.address": host.ip,
            "spark.connect.grpc.binding.port": str(CONNECT_PORT),
            # `local[2]`: its driver and executors are one process, on its host's loopback.
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
            "spark.sql.session.timeZone": "UTC",
            "spark.sql.shuffle.partitions": "2",
            **self.executor_conf(),
        }
        argv = ["bash", str(spark_home() / "sbin" / "start-connect-server.sh"), "--wait"]
        argv += ["--master", "local[2]"]
        argv += [a for k, v in conf.items() for a in ("--conf", f"{k}={v}")]
        # spark-submit gives the Connect server's JVM `SPARK_DAEMON_MEMORY`; a driver needs more.
        env = {**self._env(server, host, self.env), "SPARK_DAEMON_MEMORY": "768m"}
        server.start(in_namespace(host, argv, self.hidden, server.root), env)

    def _check_running(self, daemon: Daemon) -> bool:
        if not daemon.running():
            raise RuntimeError(f"{daemon.name} exited\n{daemon.tail()}")
        return True

    def _alive_workers(self) -> int:
        for daemon in self.daemons:
            self._check_running(daemon)
        try:
            url = f"http://{self.network['master'].ip}:{MASTER_UI_PORT}/json/"
            with NO_PROXY.open(url, timeout=2) as response:
                return int(json.load(response).get("aliveworkers", 0))
        except OSError:
            return 0  # the master's UI is not up yet

    def worker(self, i: int) -> Daemon:
        return self.daemons[1 + i]

    def worker_processes(self, i: int) -> list[tuple[int, str]]:
        """Worker `i`'s process tree: its JVM, its executors' JVMs, their Python processes."""
        return [(pid, command_line(pid)) for pid in self.worker(i).tree()]

    def kill_worker(self, i: int) -> list[tuple[int, str]]:
        """SIGKILL worker `i`'s whole tree at once, as a machine dies; the processes killed."""
        killed = self.worker_processes(i)
        self.worker(i).kill()
        return killed

    def logs(self) -> str:
        return "\n".join(d.tail(1500) for d in self.daemons)

    def stop(self) -> None:
        """End every process this cluster started, the Connect server and workers first."""
        failures = []
        for daemon in reversed(self.daemons):
            try:
                daemon.stop()
            except (TimeoutError, subprocess.TimeoutExpired) as exc:
                failures.append(f"{daemon.name}: {exc}")
        self.daemons.clear()
        if failures:
            raise RuntimeError("processes left running:\n" + "\n".join(failures))
