"""The daemon's sensor loop, in this process: what `leasehold run` does in its place.

`sensor_ticks` evaluates a sensor from the cursor kept in the instance and applies each result
as the daemon would (its dynamic partitions added, its runless events reported, its cursor
kept); the caller executes the runs a tick asks for, in this process, tagged with
`in_this_process` and with Dagster's console log at `QUIET`.
"""

from collections.abc import Iterator, Mapping
from typing import Any

from dagster import (
    DagsterInstance,
    DynamicPartitionsDefinition,
    SensorDefinition,
    SensorResult,
    build_sensor_context,
)

from resources.dagster_resources.runs import (
    PROCESS_TAG,
    apply_partition_requests,
    process_identity,
)

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
"""The run config of a run executed here: Dagster's console log keeps to warnings
(`console_level` changes it for the whole process)."""


def console_level(level: str) -> None:
    """The level of Dagster's console log in every run this process executes from now on."""
    QUIET["loggers"]["console"]["config"]["log_level"] = level


def sensor_ticks(
    sensor: SensorDefinition,
    instance: DagsterInstance,
    resources: Mapping[str, Any],
    partitions: DynamicPartitionsDefinition,
    state_key: str,
    max_ticks: int,
) -> Iterator[Any]:
    """Up to `max_ticks` evaluations of `sensor` from the cursor kept under `state_key`. A
    `SensorResult` is applied as the daemon would before it is yielded (its partitions added
    to `partitions`, its runless events reported, its cursor kept), so the caller only executes
    the runs it asks for; anything else (a skip) is yielded as it is, and the caller stops."""
    cursor = instance.run_storage.get_cursor_values({state_key}).get(state_key)
    for _ in range(max_ticks):
        with build_sensor_context(instance=instance, cursor=cursor, resources=resources) as ctx:
            result = sensor(ctx)
        if isinstance(result, SensorResult):
            apply_partition_requests(instance, result.dynamic_partitions_requests or [])
            for event in result.asset_events or []:
                instance.report_runless_asset_event(event)
            cursor = result.cursor
            instance.run_storage.set_cursor_values({state_key: cursor or ""})
        yield result


def in_this_process() -> dict[str, str]:
    """The tag naming this process, for a run created here to execute here: set from the run's
    creation, so a tick can tell the run is dead if this process is killed at any moment after
    it, even before the run starts (`runs.fail_dead_runs`)."""
    return {PROCESS_TAG: process_identity()}
