"""Which Spark options a leasehold session gets, and where each comes from.

Four sources, the later winning:
1. leasehold's defaults (`DEFAULTS`; on the embedded session also `EMBEDDED`): tuning for many
   small objects, and loopback for the session that runs on this machine alone. Each is set
   only where the user sets nothing for its key.
2. `spark-defaults.conf`, where Spark itself reads it (`$SPARK_CONF_DIR`, else
   `$SPARK_HOME/conf`, else pyspark's own `conf/`): the way Spark users already configure a
   driver. Spark applies it; leasehold only reads it to leave those keys alone.
3. `LEASEHOLD_SPARK_CONF`: `key=value` entries separated by `;` or new lines, for a deployment
   configured by environment variables alone.
4. `REQUIRED`: what the data path's correctness depends on. A user's other value is refused,
   naming the key.

The embedded session is `local[...]` (or a Spark Connect server this process starts itself,
`remote="local[N]"`). Only it binds to loopback by default: a driver on a cluster must be
reachable from the executors' hosts, so it keeps Spark's own defaults (the host's name and
address) unless `spark.driver.host` / `spark.driver.bindAddress` are set. Over a Spark Connect
URL the server owns the application: the client sends only session SQL options (`spark.sql.*`).

May import nothing of the project but `resources.errors` and `resources.settings`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from resources.errors import ConfigError

OPEN_COST_BYTES = 256 << 10
CONF_FIELD = "conf"
"""`SparkSettings`'s field for `LEASEHOLD_SPARK_CONF`, as errors name it."""


@dataclass(frozen=True)
class SparkOption:
    """One key leasehold sets, its value, and why."""

    key: str
    value: str
    why: str


DEFAULTS = (
    SparkOption("spark.sql.shuffle.partitions", "8", "few, small shuffles (merges' sorts)"),
    SparkOption(
        "spark.sql.files.openCostInBytes",
        str(OPEN_COST_BYTES),
        "many small objects packed into fewer tasks than the 4 MB default would",
    ),
    SparkOption("spark.sql.parquet.compression.codec", "snappy", "the table objects' codec"),
    SparkOption(
        "spark.sql.sources.partitionOverwriteMode", "dynamic", "a merge replaces its date only"
    ),
    SparkOption("spark.ui.showConsoleProgress", "false", "no progress bars in run logs"),
    SparkOption(
        "spark.hadoop.fs.file.impl",
        "org.apache.hadoop.fs.RawLocalFileSystem",
        "local merge files: no .crc side files",
    ),
    SparkOption(
        "spark.hadoop.fs.file.impl.disable.cache", "true", "goes with the file system above"
    ),
    SparkOption(
        "spark.hadoop.mapreduce.fileoutputcommitter.algorithm.version",
        "2",
        "one rename per merged file instead of two",
    ),
)
"""Tuning, set where the user sets nothing for the key."""

EMBEDDED = (
    SparkOption("spark.driver.host", "127.0.0.1", "the embedded session talks to itself only"),
    SparkOption("spark.driver.bindAddress", "127.0.0.1", "nothing listens off loopback"),
    SparkOption("spark.ui.enabled", "false", "no web UI nobody asked for"),
)
"""The embedded session's defaults (with `SPARK_LOCAL_IP=127.0.0.1` when unset)."""

REQUIRED = (
    SparkOption(
        "spark.sql.session.timeZone",
        "UTC",
        "event times, dates and partition values are UTC everywhere in leasehold",
    ),
)
"""Set always; another value from the user is a configuration error."""


class SparkOptionsError(ConfigError):
    """A Spark option leasehold cannot use, naming where it was given."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="Spark configuration")


def is_embedded(master: str | None, remote: str | None) -> bool:
    """Whether the session runs on this machine alone: a `local[...]` master (the default) or
    a Connect server this process starts (`remote="local[N]"`)."""
    target = remote or master or "local"
    return str(target).startswith("local")


def parse_entries(text: str | None, field: str = CONF_FIELD) -> dict[str, str]:
    """`LEASEHOLD_SPARK_CONF`'s `key=value` entries (separated by `;` or new lines; blank
    entries and `#` comments skipped) as a dict; a `SparkOptionsError` naming `field` and the
    entry for one that is not `spark.<key>=<value>`."""
    entries: dict[str, str] = {}
    for raw in re.split(r"[;\n]", text or ""):
        entry = raw.strip()
        if not entry or entry.startswith("#"):
            continue
        key, sep, value = entry.partition("=")
        key = key.strip()
        if not sep or not key.startswith("spark.") or not value.strip() or " " in key:
            raise SparkOptionsError(
                field, f"{entry!r} is not a `spark.<key>=<value>` entry (separate entries by ;)"
            )
        entries[key] = value.strip()
    return entries


def check_entries(text: str) -> str | None:
    """`SparkSettings.conf`'s check: what is wrong with the entries, or None."""
    try:
        parse_entries(text)
    except SparkOptionsError as exc:
        return exc.reason
    return None


def spark_defaults_file(environ: Mapping[str, str] | None = None) -> Path:
    """Where Spark reads `spark-defaults.conf` for a driver started from this environment."""
    env = os.environ if environ is None else environ
    if env.get("SPARK_CONF_DIR"):
        return Path(env["SPARK_CONF_DIR"]) / "spark-defaults.conf"
    home = env.get("SPARK_HOME")
    if not home:
        import pyspark

        home = os.path.dirname(pyspark.__file__)
    return Path(home) / "conf" / "spark-defaults.conf"


def read_spark_defaults(path: Path) -> dict[str, str]:
    """The `spark.*` options of a `spark-defaults.conf` (Java properties: `key value`,
    `key=value` or `key: value`; `#` and `!` comments), as Spark reads them; {} if absent."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise SparkOptionsError(str(path), f"cannot be read: {exc.strerror or exc}") from exc
    found = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        match = re.match(r"^(\S+?)\s*(?:[=:]|\s)\s*(.*)$", line)
        if match and match.group(1).startswith("spark."):
            found[match.group(1)] = match.group(2).strip()
    return found


def session_options(
    master: str | None,
    remote: str | None,
    user: Mapping[str, str],
    from_file: Mapping[str, str],
) -> dict[str, str]:
    """The options leasehold passes to the session builder: its defaults where neither
    `from_file` (what `spark-defaults.conf` sets, applied by Spark) nor `user`
    (`LEASEHOLD_SPARK_CONF`) sets the key, then `user`, then `REQUIRED`. Over a Connect URL,
    only `spark.sql.*` options. Raises `SparkOptionsError` for a `REQUIRED` key given another
    value, or an option a Connect client cannot set."""
    given = {**from_file, **user}
    for option in REQUIRED:
        if given.get(option.key, option.value) != option.value:
            where = CONF_FIELD if option.key in user else str(spark_defaults_file())
            raise SparkOptionsError(
                where,
                f"{option.key}={given[option.key]}: leasehold needs {option.value} ({option.why})",
            )
    defaults = DEFAULTS + (EMBEDDED if is_embedded(master, remote) else ())
    options = {o.key: o.value for o in defaults if o.key not in given}
    options.update(user)
    options.update({o.key: o.value for o in REQUIRED})
    if remote and not is_embedded(master, remote):
        static = sorted(k for k in user if not k.startswith("spark.sql."))
        if static:
            raise SparkOptionsError(
                CONF_FIELD,
                f"{', '.join(static)}: a Spark Connect client sets session SQL options only; "
                "set the others on the server (start-connect-server.sh --conf)",
            )
        options = {k: v for k, v in options.items() if k.startswith("spark.sql.")}
    return options


def uses_loopback(master: str | None, remote: str | None, environ: Mapping[str, str]) -> bool:
    """Whether `SPARK_LOCAL_IP` should be set to loopback: the embedded session, and the user
    has not set it."""
    return is_embedded(master, remote) and not environ.get("SPARK_LOCAL_IP")
