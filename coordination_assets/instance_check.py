"""`leasehold doctor`'s look at the Dagster instance: does the instance at `DAGSTER_HOME` load,
and does each of its storages answer?

Here, not in the CLI, because the CLI reaches Dagster only through this package (the import
contract in pyproject.toml). A Postgres-backed instance loads without contacting Postgres; a
wrong URL or a server that is down shows only when a storage is asked something, so each of
the three storages (runs, event log, schedules) is asked one cheap question. The Spark pool's
limit is created if the instance has a default for it (`ensure_spark_pool`): an instance
without one lets every run start a SparkSession at once, which the doctor reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dagster import DagsterInstance

from resources.dagster_resources.instance import SPARK_POOL, ensure_spark_pool


@dataclass(frozen=True)
class InstanceStorage:
    """What the instance at `home` is made of, as the doctor reports it."""

    home: str
    run_storage: str
    event_log_storage: str
    schedule_storage: str
    runs: int
    spark_pool_limit: int | None
    """How many runs that may start a SparkSession run at once; None: no limit."""

    def describe(self) -> str:
        return (
            f"instance at {self.home}: runs {self.run_storage}, events "
            f"{self.event_log_storage}, schedules {self.schedule_storage}; {self.runs} runs; "
            f"pool {SPARK_POOL}: "
            + ("no limit" if self.spark_pool_limit is None else f"{self.spark_pool_limit} at once")
        )


def probe_instance(home: Path) -> InstanceStorage:
    """Load the instance at `home` (its `dagster.yaml`) and ask each storage one question.
    Raises whatever Dagster or the database driver raises: the doctor prints its message."""
    with DagsterInstance.from_config(str(home)) as instance:
        runs = instance.get_runs_count()
        instance.event_log_storage.get_maximum_record_id()
        instance.all_instigator_state()
        pool_limit = ensure_spark_pool(instance)
        return InstanceStorage(
            home=str(home),
            run_storage=type(instance.run_storage).__name__,
            event_log_storage=type(instance.event_log_storage).__name__,
            schedule_storage=type(instance.schedule_storage).__name__,
            runs=runs,
            spark_pool_limit=pool_limit,
        )
