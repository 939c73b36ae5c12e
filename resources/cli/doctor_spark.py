"""`leasehold doctor`'s Spark checks: the session starts, an executor runs a task and reaches the
driver, its Python runs leasehold's code, it has scratch space, and per stream it reads the
source and writes the table.

Spark is asked in a child process (`probe_main`), so that a JVM that never answers is ended
with it, within `--spark-timeout`. The child says what it learns as it goes, one line each, so
a probe cut short still tells where it stopped: first the session and the address its
executors are told to call back, then the first task's report (`executor_host.host_report`),
or — when no executor ran it within the stall bound — the sentence that says why.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlparse

from resources.cli.doctor_check import Check, error_text
from resources.spark.session import SparkSettings

CONNECT_TIMEOUT_S = 3.0
START_SLACK_S = 60.0
"""Of `--spark-timeout`, what the session's start may take before the first task's stall bound
runs (the bound is the rest, at most `LEASEHOLD_SPARK_STALL_SECONDS`, at least 10 s)."""
EXECUTOR_FIX = (
    "the executors need the project's code (shipped by leasehold, or in their image), "
    "pyarrow and boto3, a route to the stores, and credentials of their own (an instance or "
    "pod role, or AWS_* in the executors' environment): docs/production.md"
)
CALLBACK_FIX = (
    "set spark.driver.host (and spark.driver.bindAddress, spark.driver.port) to an address of "
    "this host the workers reach, in LEASEHOLD_SPARK_CONF or spark-defaults.conf "
    "(docs/production.md#a-cluster-on-other-hosts); if they reach it, free cores and memory on "
    "the master"
)
STARTS = "spark: session starts"
TASK = "spark: an executor runs a task and reaches the driver"
PYTHON = "spark: the executors' Python runs leasehold's code"
SCRATCH = "spark: the executors have scratch space"


def connect_address(remote: str) -> tuple[str, int] | None:
    """Host and port of an `sc://host:port/...` URL (15002, Spark Connect's default, when
    none); None for `local[N]` (a Connect server this process would start itself)."""
    if not remote.startswith("sc://"):
        return None
    parsed = urlparse("http://" + remote[len("sc://") :])
    return parsed.hostname or "localhost", parsed.port or 15002


def check_spark(settings: SparkSettings, timeout_s: float, run: bool = True) -> Iterator[Check]:
    address = connect_address(settings.remote) if settings.remote else None
    if address is not None:
        host, port = address
        try:
            socket.create_connection(address, timeout=CONNECT_TIMEOUT_S).close()
        except OSError as exc:
            yield Check(
                "spark: Connect server reachable",
                False,
                f"{settings.remote}: nothing answers at {host}:{port} ({error_text(exc)})",
                "start the server ($SPARK_HOME/sbin/start-connect-server.sh, see "
                "docs/production.md) or fix LEASEHOLD_SPARK_REMOTE",
            )
            return
        yield Check("spark: Connect server reachable", True, f"{host}:{port} accepts connections")
    if run:
        bound_s = max(10.0, min(settings.stall_seconds, timeout_s - START_SLACK_S))
        yield from _probe_checks(
            settings.remote or settings.master or "local[*]", timeout_s, bound_s
        )


def _probe_checks(where: str, timeout_s: float, bound_s: float) -> Iterator[Check]:
    command = [sys.executable, "-c", f"from {__name__} import probe_main; probe_main({bound_s})"]
    timed_out = False
    try:
        probe = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
        out, err, code = probe.stdout, probe.stderr, probe.returncode
    except subprocess.TimeoutExpired as exc:
        out, err, code, timed_out = _text(exc.stdout), _text(exc.stderr), None, True
    said = _said(out)
    if "session" not in said:
        yield _not_started(where, timeout_s, err, timed_out)
        return
    session = said["session"]
    driver = session["driver"]
    back = f"the executors call the driver back at {driver}" if driver else "the server drives"
    took = session["seconds"]
    yield Check(STARTS, True, f"{where}: Spark {session['version']}, {took:.1f} s; {back}")
    if "host" not in said:
        yield _no_task(said, driver, timeout_s, err, code)
        return
    yield from host_checks(said["host"])
    for report in said.get("executor", []):
        yield executor_check(report)


def _text(output: str | bytes | None) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output or ""


def _said(out: str) -> dict[str, Any]:
    """The probe's lines: `session` and `host` once, `stalled` once, `executor` per stream."""
    said: dict[str, Any] = {}
    for line in out.splitlines():
        kind, _, payload = line.partition(" ")
        if kind not in ("session", "host", "stalled", "failed", "executor"):
            continue
        value = json.loads(payload)
        if kind == "executor":
            said.setdefault(kind, []).append(value)
        else:
            said[kind] = value
    return said


def _not_started(where: str, timeout_s: float, err: str, timed_out: bool) -> Check:
    if timed_out:
        return Check(STARTS, False, f"{where}: no session within {timeout_s:.0f} s", EXECUTOR_FIX)
    lines = [line for line in err.splitlines() if line.strip()]
    why = next((line for line in reversed(lines) if "Error" in line), lines[-1] if lines else "")
    return Check(
        STARTS,
        False,
        f"{where}: {' '.join(why.split())[:400]}",
        "check LEASEHOLD_SPARK_MASTER / LEASEHOLD_SPARK_REMOTE, JAVA_HOME (Java 17) for a "
        "master, and that the server's Spark version matches pyspark's",
    )


def _no_task(said: dict[str, Any], driver: str | None, timeout_s: float, err: str,
             code: int | None) -> Check:  # fmt: skip
    """The first task did not report: it stalled (no executor), failed, or time ran out."""
    if "stalled" in said:
        return Check(TASK, False, said["stalled"], CALLBACK_FIX if driver else EXECUTOR_FIX)
    if "failed" in said:
        return Check(TASK, False, f"the task failed: {said['failed']}", EXECUTOR_FIX)
    told = f"; they were told to call the driver back at {driver}" if driver else ""
    if code is None:
        return Check(TASK, False, f"no executor ran a task within {timeout_s:.0f} s{told}",
                     CALLBACK_FIX if driver else EXECUTOR_FIX)  # fmt: skip
    last = " ".join((err.strip().splitlines() or [""])[-1].split())[:400]
    return Check(TASK, False, f"the probe ended (exit {code}) before a task ran: {last}",
                 EXECUTOR_FIX)  # fmt: skip


def host_checks(report: dict[str, Any]) -> Iterator[Check]:
    """The first task's report as three checks: the callback, the Python, the scratch."""
    on = f"on {report['host']}"
    callback = report["callback"]
    yield Check(TASK, not callback.startswith("cannot"), f"{on}: {callback}", CALLBACK_FIX)
    code = (
        f"leasehold's code shipped with the session ({report['code']})"
        if report["code_shipped"]
        else f"leasehold's code from the executor's own files ({report['code']})"
    )
    yield Check(PYTHON, True, f"{on}: Python {report['python']} ({report['executable']}); {code}")
    if "scratch_error" in report:
        yield Check(SCRATCH, False, f"{on}: {report['scratch']}: {report['scratch_error']}",
                    "point spark.local.dir (or the worker's SPARK_LOCAL_DIRS) at a writable "
                    "disk")  # fmt: skip
        return
    from resources.spark.executor_host import MIN_SCRATCH_BYTES

    free = report["scratch_free"]
    yield Check(
        SCRATCH,
        free >= MIN_SCRATCH_BYTES,
        f"{on}: {report['scratch']}: {free / (1 << 30):.1f} GiB free",
        f"at least {MIN_SCRATCH_BYTES >> 30} GiB: point spark.local.dir (or the worker's "
        "SPARK_LOCAL_DIRS) at a larger disk",
    )


def executor_check(report: dict[str, str]) -> Check:
    """One stream's `executor_probe` report as a check."""
    what = f"spark: an executor reads {report['stream']}'s source and writes its table"
    if "task" in report:
        return Check(what, False, f"the task did not run: {report['task']}", EXECUTOR_FIX)
    host = f"on {report['host']} (Python {report['python']})"
    problems = [
        f"{step}: {report[step]}" for step in ("read", "write") if not report[step].startswith("ok")
    ]
    if problems:
        return Check(what, False, f"{host}: {'; '.join(problems)}", EXECUTOR_FIX)
    return Check(what, True, f"{host}: {report['read']}; {report['write']}")


# -- the child process --------------------------------------------------------------------------


def probe_main(bound_s: float) -> None:
    """In the child: start the session, run the first task under a stall bound of `bound_s`,
    then each stream's task; one line printed per finding (`_said` reads them)."""
    from resources.ingestion.executor_probe import probe_stream
    from resources.ingestion.split_task import StoreAddress
    from resources.spark.executor_host import driver_address, probe_executor
    from resources.spark.progress import SparkStalledError, watch_for
    from resources.spark.session import build_spark_session
    from resources.streams import LakeSettings

    started = time.monotonic()
    spark = build_spark_session(app_name="leasehold-doctor")
    driver = driver_address(spark)
    took = round(time.monotonic() - started, 1)
    _say("session", {"version": spark.version, "driver": driver, "seconds": took})
    watch = watch_for(spark, bound_s, SparkSettings.from_env().remote)
    try:
        with watch.job("the doctor's first task"):
            _say("host", probe_executor(spark, driver))
    except SparkStalledError as exc:
        _say("stalled", str(exc))
        return
    except Exception as exc:  # noqa: BLE001 - whatever stops the task is the finding
        _say("failed", error_text(exc))
        return
    lake = LakeSettings.from_env()
    for name, config in sorted(lake.streams().items()):
        try:
            stores = StoreAddress.of(config, lake.s3_endpoint_url, lake.region)
            with watch.job(f"the doctor's task for {name}"):
                report = probe_stream(spark, stores)
        except Exception as exc:  # noqa: BLE001 - whatever stops the task is the finding
            report = {"task": error_text(exc)}
        _say("executor", {"stream": name, **report})


def _say(kind: str, value: Any) -> None:
    print(kind, json.dumps(value), flush=True)
