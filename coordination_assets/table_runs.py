"""What the merge asset and the published-table asset share, and their sensors: both work
through the table partitions of a range run, keep going past a partition that fails, and fail
the run at the end naming each failed partition; both are requested by a sensor ticking on the
same terms.
"""

from collections.abc import Callable, Mapping

from dagster import AssetKey, DefaultSensorStatus, Failure, MetadataValue, sensor

from resources.streams import LakeSettings


def sensor_interval_s() -> int:
    """`LEASEHOLD_SENSOR_INTERVAL_SECONDS`, checked, as the definitions are built: every
    leasehold sensor's `minimum_interval_seconds`."""
    return LakeSettings.from_env().sensor_interval_seconds


def table_sensor(name: str, asset_key: AssetKey, description: str) -> Callable:
    """The decorator of a sensor requesting range runs of `asset_key`: running by default,
    ticking at most every `sensor_interval_s()`."""
    return sensor(
        name=name,
        asset_selection=[asset_key],
        minimum_interval_seconds=sensor_interval_s(),
        default_status=DefaultSensorStatus.RUNNING,
        description=description,
    )


def stays_due_line(dt: str, outcome: str, message: str, job: str, sensor_name: str) -> str:
    """A table partition's failure line: `dt=<date>: <outcome>: <message>; ...` (the run
    report keys its failures by what comes before the first colon)."""
    return (
        f"dt={dt}: {outcome}: {message}; its {job} stays due, the {sensor_name} asks for it again"
    )


def fail_if_any(failed: Mapping[str, str], todo: int, verb: str, metadata_key: str) -> None:
    """Fail the run if any table partition of the `todo` failed: its message names the first 20
    failure lines, its metadata (`metadata_key`) holds up to 1000, for `leasehold run`."""
    if failed:
        lines = list(failed.values())
        raise Failure(
            f"{len(failed)} of {todo} table partitions not {verb}:\n" + "\n".join(lines[:20]),
            metadata={metadata_key: MetadataValue.json(lines[:1000])},
        )
