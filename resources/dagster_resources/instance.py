"""The embedded default Dagster instance: the `dagster.yaml` `leasehold run` writes.

Dagster's own SQLite storage and file layout (history/, history/runs/, schedules/ under
`DAGSTER_HOME`), with leasehold's event log storage — Dagster's SQLite event log keeping its
connections open (resources/dagster_resources/dagster_internals.py, which holds every private
Dagster name leasehold uses) — unless `LEASEHOLD_EVENT_LOG=dagster` asks for Dagster's own.
Either storage reads what the other wrote. Why, and what it buys: docs/dagster-internals.md.
"""

from __future__ import annotations

import importlib
import json
import logging
import os
from pathlib import Path
from typing import Any

from dagster import DagsterInstance
from sqlalchemy.exc import DBAPIError

from resources.dagster_resources.runs import GC_TAG, MERGE_TAG, PUBLISH_TAG
from resources.errors import ConfigError

log = logging.getLogger(__name__)

# Imported only for the pooled event log: with `LEASEHOLD_EVENT_LOG=dagster`, a Dagster whose
# internals moved (the module fails to import) still runs leasehold on its own storage.
INTERNALS = "resources.dagster_resources.dagster_internals"


def __getattr__(name: str) -> Any:
    """A `dagster.yaml` written before the storage moved to dagster_internals names it here: it
    must keep loading (in a daemon or webserver started before `leasehold run` rewrites it)."""
    if name == "PooledSqliteEventLogStorage":
        return importlib.import_module(INTERNALS).PooledSqliteEventLogStorage
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


EVENT_LOG_VAR = "LEASEHOLD_EVENT_LOG"
"""Which event log storage the embedded instance uses: `pooled` (the default, leasehold's) or
`dagster` (Dagster's own SQLite storage, no private Dagster code in the instance). Read when
`leasehold run` writes `dagster.yaml`, so it holds for the daemon and webserver after it too."""
EVENT_LOGS = ("pooled", "dagster")

# Runs that may start a SparkSession (ingestion, merges) running at once, over all streams.
SPARK_RUN_LIMIT = 2
SPARK_POOL = "leasehold_spark"
"""The Dagster pool of every asset whose step may start a SparkSession. A pool, not a run tag:
the run queue counts a run in it by what the run executes, so a Materialize or backfill from
the UI (which carries no leasehold tag) waits for a slot like a sensor's run."""

INSTANCE_YAML = f"""\
# Written by leasehold: the embedded default instance. No network here, so no telemetry.
telemetry:
  enabled: false
{{storage}}
# What leasehold logs in a run (a failed lease renewal, a partition not ingested, an S3 retry)
# goes to the run's logs.
python_logs:
  managed_python_loggers:
    - resources
# A run stuck starting or canceling is failed by Dagster's run monitoring (in the daemon) after
# 3 minutes. A STARTED run whose worker died is failed by the code server that launched it; one
# `leasehold run` executed in process, or whose code server died too, by the discovery sensor at
# its next tick (resources/dagster_resources/runs.py).
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  poll_interval_seconds: 30
# A run that ingests starts a SparkSession (~1 GB driver, all cores); one that merges may (a
# merge too large for memory) and otherwise sorts in memory. Both execute assets of the pool
# {SPARK_POOL}: at most {SPARK_RUN_LIMIT} such runs at once, however launched (sensor, UI,
# backfill), the rest wait in the queue without starting a process. Merge runs: besides, one
# at a time per stream; the merge job leases decide within. Publication runs and garbage
# collections: one at a time per stream each. The ledger's conditional write keeps racing
# publishers safe; the limit keeps them from racing at all.
concurrency:
  pools:
    granularity: run
    default_limit: {SPARK_RUN_LIMIT}
  runs:
    max_concurrent_runs: 10
    tag_concurrency_limits:
      - key: {MERGE_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
      - key: {PUBLISH_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
      - key: {GC_TAG}
        limit: 1
        value:
          applyLimitPerUniqueValue: true
"""


def written_by_leasehold(home: Path) -> bool:
    """Whether `home`'s `dagster.yaml` is one `write_instance_yaml` wrote (its first line)."""
    path = home / "dagster.yaml"
    if not path.exists():
        return False
    with path.open(encoding="utf-8") as f:
        return f.readline().startswith(INSTANCE_YAML.splitlines()[0])


def event_log_choice(environ: dict[str, str] | None = None) -> str:
    """`LEASEHOLD_EVENT_LOG`'s value, `pooled` when unset; a `ConfigError` for anything else."""
    value = (os.environ if environ is None else environ).get(EVENT_LOG_VAR, "").strip().lower()
    if not value:
        return EVENT_LOGS[0]
    if value not in EVENT_LOGS:
        raise ConfigError(EVENT_LOG_VAR, f"{value!r}: expected one of {', '.join(EVENT_LOGS)}")
    return value


def storage_yaml(home: Path, event_log: str) -> str:
    """The storage section of the embedded instance's `dagster.yaml` at `home` (absolute)."""

    def quoted(sub: str) -> str:  # JSON strings are YAML strings: spaces, colons, quotes intact
        return json.dumps(str(home / sub) if sub else str(home))

    if event_log == "dagster":  # Dagster's own SQLite storage, by its public configuration
        return f"storage:\n  sqlite:\n    base_dir: {quoted('')}"
    internals = importlib.import_module(INTERNALS)
    sections = (
        ("run_storage", internals.SQLITE_RUN_STORAGE, "history"),
        (
            "event_log_storage",
            (INTERNALS, internals.PooledSqliteEventLogStorage.__name__),
            "history/runs",
        ),
        ("schedule_storage", internals.SQLITE_SCHEDULE_STORAGE, "schedules"),
    )
    return "\n".join(
        f"{section}:\n  module: {module}\n  class: {cls}\n  config:\n    base_dir: {quoted(sub)}"
        for section, (module, cls), sub in sections
    )


def write_instance_yaml(home: Path, event_log: str | None = None) -> Path:
    """Write `dagster.yaml` for the embedded default instance at `home`, overwriting it, with
    the event log storage `event_log` (`pooled` or `dagster`; by default `LEASEHOLD_EVENT_LOG`'s
    choice): Dagster's file layout either way, so either storage reads what the other wrote."""
    storage = storage_yaml(home.resolve(), event_log or event_log_choice())
    home.mkdir(parents=True, exist_ok=True)
    path = home / "dagster.yaml"
    path.write_text(INSTANCE_YAML.format(storage=storage), encoding="utf-8")
    return path


def ensure_spark_pool(instance: DagsterInstance) -> int | None:
    """The Spark pool's limit, created from the instance's `concurrency.pools.default_limit` if
    the pool has none yet; None if it has no limit (no default, and nobody set one).

    Why ahead of time: Dagster's run queue creates a pool's limit the first time it sees a
    queued run in it, but only after it read the limits for that pass, so every run queued
    before that pass starts at once (seen: four Materializes from the UI all started). Called
    by `leasehold run`, every discovery tick and the doctor: one query when the limit exists.

    Several processes (hosts) on one Postgres instance may find it missing at once: Dagster's
    insert of the second fails on the key's unique index, and on Postgres the failed statement
    aborts its transaction (its `IntegrityError` handler then fails too). That transaction
    rolled back, nothing of it stays: the loser reads the winner's limit and goes on.
    """
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return None

    def limit() -> int | None:
        return next((p.limit for p in storage.get_pool_limits() if p.name == SPARK_POOL), None)

    if limit() is None and instance.global_op_concurrency_default_limit is not None:
        try:
            storage.initialize_concurrency_limit_to_default(SPARK_POOL)
        except DBAPIError as exc:
            created = limit()
            if created is None:  # not a concurrent creator: the database's own error
                raise
            cause = str(exc.orig).splitlines()[0] if exc.orig else type(exc).__name__
            log.info(
                "pool %s: its limit was created meanwhile by another process (%s); using it: %s",
                SPARK_POOL, cause, created,
            )  # fmt: skip
            return created
    return limit()
