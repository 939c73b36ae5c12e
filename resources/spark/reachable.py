"""Whether a Spark master or Spark Connect server answers, asked before a session is built.

A standalone master that is not there costs pyspark a minute of registration attempts (three of
20 s each, fixed in Spark) and thousands of log lines before it gives up, and then every step
of a run tries again; a Connect URL with nothing behind it retries for as long. A TCP connect
with a short timeout tells the same in a second, so the session is only built when something
listens. (Something that listens but is not Spark still fails the slow way: the rare case.)
"""

from __future__ import annotations

import socket
from urllib.parse import urlparse

from resources.errors import ComponentUnreachableError

CONNECT_TIMEOUT_S = 3.0
CONNECT_DEFAULT_PORT = 15002
MASTER_DEFAULT_PORT = 7077


class SparkUnreachableError(ComponentUnreachableError):
    """No Spark master or Connect server listens where the settings say."""

    component = "Spark"


def spark_addresses(master: str | None, remote: str | None) -> list[tuple[str, int]]:
    """Host and port of each server a session would connect to: the Connect server of an
    `sc://host:port/;params` URL (`remote` wins, as in `build_spark_session`), the masters of
    a `spark://h1:7077,h2:7077` URL. None for a local master or `local[N]` Connect server,
    which the session starts itself."""
    if remote:
        if not remote.startswith("sc://"):
            return []
        parsed = urlparse("http://" + remote[len("sc://") :].split(";", 1)[0])
        return [(parsed.hostname or "localhost", parsed.port or CONNECT_DEFAULT_PORT)]
    if not master or not master.startswith("spark://"):
        return []
    found = []
    for hostport in master[len("spark://") :].split(","):
        host, _, port = hostport.strip().rstrip("/").rpartition(":")
        if not host:  # `spark://host` without a port
            host, port = port, ""
        found.append((host, int(port) if port.isdigit() else MASTER_DEFAULT_PORT))
    return found


def require_reachable(
    master: str | None, remote: str | None, timeout_s: float = CONNECT_TIMEOUT_S
) -> None:
    """Raise `SparkUnreachableError` unless one of the servers the session would use accepts
    a TCP connection within `timeout_s` (one of a standalone cluster's masters is enough)."""
    addresses = spark_addresses(master, remote)
    causes = []
    for host, port in addresses:
        try:
            socket.create_connection((host, port), timeout=timeout_s).close()
            return
        except OSError as exc:
            causes.append(f"{host}:{port}: {exc.strerror or exc}")
    if causes:
        what = f"Spark Connect server {remote!r}" if remote else f"Spark master {master!r}"
        raise SparkUnreachableError(f"{what}: nothing answers at {'; '.join(causes)}")
