"""What an executor's host offers a task: its Python, leasehold's code, a route back to the
driver, scratch space — asked by `leasehold doctor` in one Spark task (`probe_executor`) and
used by every task (`scratch_root`).

The executor side (`host_report`) uses the standard library only, so the task runs wherever a
Python worker starts at all; what it cannot do is its report, not an error. May import nothing
of the project but `resources.errors` and `resources.settings`.
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import sys
import tempfile
from collections.abc import Iterator
from functools import partial
from typing import Any

CONNECT_TIMEOUT_S = 3.0
MIN_SCRATCH_BYTES = 1 << 30
"""Free scratch below which the check fails: a task stages up to a few 32 MiB parts of source
(decompressed), and an executor runs one task per core."""
REPORT_DDL = "report string"


def scratch_root() -> str | None:
    """Where a task keeps its scratch: the executor's first local directory, which Spark gives
    its Python workers as `SPARK_LOCAL_DIRS` (`spark.local.dir`, or the cluster manager's) and
    deletes with the executor, so a task killed before its `finally` leaves nothing for ever;
    None (the system's temporary directory) outside Spark."""
    dirs = [d for d in os.environ.get("SPARK_LOCAL_DIRS", "").split(",") if d]
    return dirs[0] if dirs else None


def driver_address(spark: Any) -> str | None:
    """`host:port` a classic driver tells its executors to call back; None over Spark Connect
    (the server is the driver, and its address is the server's business)."""
    if type(spark).__module__.startswith("pyspark.sql.connect"):
        return None
    conf = spark.sparkContext.getConf()
    return f"{conf.get('spark.driver.host', '?')}:{conf.get('spark.driver.port', '?')}"


def probe_executor(spark: Any, driver: str | None) -> dict[str, Any]:
    """Run one task and return its `host_report` (DataFrame API only: also over Connect)."""
    frame = spark.range(0, 1, 1, 1).mapInArrow(partial(_map_report, driver), REPORT_DDL)
    (row,) = frame.toArrow().to_pylist()
    report: dict[str, Any] = json.loads(row["report"])
    return report


def _map_report(driver: str | None, batches: Iterator[Any]) -> Iterator[Any]:
    import pyarrow as pa

    for _ in batches:
        yield pa.RecordBatch.from_pylist(
            [{"report": json.dumps(host_report(driver))}],
            schema=pa.schema([("report", pa.string())]),
        )


def host_report(driver: str | None) -> dict[str, Any]:
    """Executor side: its host, Python, where leasehold's code came from, whether it reaches
    `driver` (`host:port`), and its scratch directory's free bytes."""
    import resources

    origin = resources.__file__ or ""
    zipped = ".zip" in origin
    report: dict[str, Any] = {
        "host": platform.node(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "code": os.path.basename(origin.split(".zip")[0]) + ".zip" if zipped else origin,
        "code_shipped": zipped,
        "callback": _reach(driver),
    }
    root = scratch_root() or tempfile.gettempdir()
    report["scratch"] = root
    try:
        tempfile.TemporaryDirectory(prefix="leasehold-doctor-", dir=root).cleanup()
        report["scratch_free"] = shutil.disk_usage(root).free
    except OSError as exc:
        report["scratch_error"] = f"{type(exc).__name__}: {exc}"
    return report


def _reach(driver: str | None) -> str:
    if driver is None:
        return "n/a: over Spark Connect the server is the driver"
    host, _, port = driver.rpartition(":")
    try:
        socket.create_connection((host.strip("[]"), int(port)), CONNECT_TIMEOUT_S).close()
    except (OSError, ValueError) as exc:
        return f"cannot reach {driver}: {exc}"
    return f"ok: reached {driver}"
