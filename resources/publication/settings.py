"""Publication and garbage-collection settings, declared once (`resources.settings.setting`).

The safety delay is how long a file no retained manifest needs any more is kept anyway: a
reader that resolved an older manifest version (a long Athena or Spark query, a paused job)
keeps working through it, and an attempt still writing its files (ingestion, merge or
publication, each bounded by a lease timeout) is never mistaken for an orphan.
docs/concepts/garbage-collection.md says why the default.
"""

from __future__ import annotations

from dataclasses import dataclass

from resources.errors import ConfigError
from resources.settings import Settings, at_least, setting


class PublicationConfigError(ConfigError):
    """Invalid publication configuration (`PublicationSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="publication configuration")


@dataclass(frozen=True)
class PublicationSettings(Settings):
    """Publication limits: how long garbage collection waits to delete, publications per run,
    source objects per clean-up pass."""

    config_error = PublicationConfigError

    gc_safety_delay_seconds: float = setting(
        86400.0,
        env="LEASEHOLD_GC_SAFETY_DELAY_SECONDS",
        doc="garbage collection keeps a file this long after the last manifest naming it was "
        "superseded (or after it was written, for a file no manifest names)",
        check=at_least(0),
    )
    cleanup_objects_per_pass: int = setting(
        10_000,
        env="LEASEHOLD_CLEANUP_OBJECTS_PER_PASS",
        doc="source objects one clean-up pass archives or deletes at most (in whole work "
        "units; streams with `source_cleanup`)",
        check=at_least(1),
    )
    max_publications_per_run: int = setting(
        500,
        env="LEASEHOLD_MAX_PUBLICATIONS_PER_RUN",
        doc="table partitions one publication run the sensor requests covers at most",
        check=at_least(1),
    )
