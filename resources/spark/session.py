"""The one SparkSession of a run: embedded on loopback by default, a cluster by configuration.

Its options come from `resources.spark.options` (leasehold's defaults, `spark-defaults.conf`,
`LEASEHOLD_SPARK_CONF`, the keys leasehold requires); only the embedded `local[*]` session binds
to loopback. `remote` selects Spark Connect (a URL, or `local[N]` to start a local Connect
server), which the data path supports because it uses the DataFrame API only.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resources.errors import ComponentUnreachableError, ConfigError
from resources.settings import Settings, at_least, setting
from resources.spark.code_shipping import ship_code
from resources.spark.options import (
    check_entries,
    parse_entries,
    read_spark_defaults,
    session_options,
    spark_defaults_file,
    uses_loopback,
)
from resources.spark.reachable import require_reachable

JAVA_17 = Path("/usr/lib/jvm/java-17-openjdk-amd64")


class SparkConfigError(ConfigError):
    """Invalid Spark configuration (`SparkSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="Spark configuration")


@dataclass(frozen=True)
class SparkSettings(Settings):
    """`SparkResource`'s fields, declared once; `remote` wins when both are set."""

    config_error = SparkConfigError

    master: str | None = setting(
        None, env="LEASEHOLD_SPARK_MASTER", doc="Spark master (default `local[*]`)"
    )
    remote: str | None = setting(
        None,
        env="LEASEHOLD_SPARK_REMOTE",
        doc="Spark Connect URL, or `local[N]` for a local Connect server",
    )
    log_file: str | None = setting(
        None,
        env="LEASEHOLD_SPARK_LOG",
        doc="file the Spark JVM's own output goes to (log4j, Java warnings); default: stderr",
    )
    conf: str | None = setting(
        None,
        env="LEASEHOLD_SPARK_CONF",
        doc="Spark options as `key=value` entries separated by `;` (over `spark-defaults.conf`)",
        check=check_entries,
    )
    stall_seconds: float = setting(
        300.0,
        env="LEASEHOLD_SPARK_STALL_SECONDS",
        doc="a Spark job with no executor, no task started and none finished this long is "
        "cancelled and its leases handed back",
        check=at_least(10),
    )

    def options(self, app_name: str = "leasehold") -> dict[str, str]:
        """Every option a session of these settings is built with (`session_options`)."""
        user = parse_entries(self.conf)
        options = session_options(
            self.master, self.remote, user, read_spark_defaults(spark_defaults_file())
        )
        if not self.remote:
            options = {"spark.master": self.master or "local[*]", **options}
        return {"spark.app.name": app_name, **options}


class SparkSessionError(ComponentUnreachableError):
    """Spark could not be started or reached: no Java, a bad master, a Connect server down."""

    component = "Spark"


def prepare_environment(master: str | None = None, remote: str | None = None) -> None:
    """Java 17; loopback for the embedded session unless `SPARK_LOCAL_IP` says otherwise; and
    the Python of the Spark tasks (which parse the sources): this interpreter, whose packages
    are the project's, unless `PYSPARK_PYTHON` names the one the executors' hosts have (it
    must exist at that path on every one of them)."""
    if uses_loopback(master, remote, os.environ):
        os.environ["SPARK_LOCAL_IP"] = "127.0.0.1"
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    if not os.environ.get("JAVA_HOME") and JAVA_17.is_dir():
        os.environ["JAVA_HOME"] = str(JAVA_17)


def build_spark_session(
    master: str | None = None,
    remote: str | None = None,
    app_name: str = "leasehold",
    extra_conf: dict[str, str] | None = None,
) -> Any:
    """A session on the configured master or Connect URL (the arguments win over the
    settings) with the configured options (`SparkSettings.options`; `extra_conf` on top): for
    the CLI's own commands, the tests and the benchmarks. Dagster runs get theirs from
    `SparkResource`, started by dagster-pyspark with the same options inside the same
    `starting_spark`."""
    from pyspark.sql import SparkSession

    configured = SparkSettings.from_env()
    master = master or configured.master
    remote = remote or configured.remote
    settings = dataclasses.replace(configured, master=master, remote=remote)
    options = {**settings.options(app_name), **(extra_conf or {})}
    with starting_spark(master, remote, configured.log_file):
        builder = SparkSession.builder.remote(remote) if remote else SparkSession.builder
        for key, value in options.items():
            builder = builder.config(key, value)
        session = builder.getOrCreate()
        # On a cluster or behind a Connect server the executors get the project's code from
        # the session (resources/spark/code_shipping.py).
        ship_code(session, master, remote)
        return session


@contextmanager
def starting_spark(master: str | None, remote: str | None, log_file: str | None) -> Iterator[None]:
    """Around the call that starts Spark: Java found, loopback for the embedded session, the
    JVM's output to
    `log_file` (`LEASEHOLD_SPARK_LOG`), and whatever stops it from starting turned into one
    message. A master or Connect server that is not listening fails first, in a second
    (`require_reachable`), not after a minute of Spark's own attempts."""
    prepare_environment(master, remote)
    require_reachable(master, remote)
    try:
        with jvm_output_to(Path(log_file) if log_file else None):
            yield
    except Exception as exc:  # noqa: BLE001 - whatever stops Spark from starting: one message
        if remote:
            where = f"Spark Connect at {remote!r}"
        else:
            java = os.environ.get("JAVA_HOME") or "not set"
            where = f"Spark (master {master or 'local[*]'!r}, JAVA_HOME {java})"
        raise SparkSessionError(f"could not start {where}: {_first_line(exc)}") from exc


@contextmanager
def jvm_output_to(log_file: Path | None) -> Iterator[None]:
    """Point this process's stderr (fd 2) at `log_file` while a JVM starts, then back.

    The JVM (py4j's gateway, or a local Spark Connect server) inherits fd 2 when it starts and
    writes all it ever logs there: Java's module warnings, log4j's start-up lines and every
    later WARN. Spark has no setting for the first of those, and its log4j configuration is
    read by the JVM only, so the one place to catch them all is the descriptor it inherits.
    Python's own stderr is back on the terminal as soon as the JVM runs."""
    if log_file is None:
        yield
        return
    log_file.parent.mkdir(parents=True, exist_ok=True)
    target = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(target, 2)
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def _first_line(exc: BaseException, limit: int = 300) -> str:
    """The first line of an error from Spark or py4j (often followed by a Java stack trace)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    text = lines[0] if lines else type(exc).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
