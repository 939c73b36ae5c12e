"""`leasehold run`'s look at the door: the components its runs need answer before any starts.

The main job starts its runs one after another in this process. A component that is down where
a step first needs it — the Spark master when the first range is read, Glue when the first date
is published — fails that step in every run, each failure logged by Dagster with its stack:
thousands of lines over minutes, and the cause said a hundred times. The lease store, Dagster's
storage and the source are reached before any run starts (the discovery sensor's resources,
the instance, the source listing); this asks the other two once, with the same bounded retries,
and ends the command at the first that does not answer (`ComponentUnreachableError`).
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PublicationTarget
from resources.spark.reachable import require_reachable
from resources.spark.session import SparkSettings
from resources.streams import LakeSettings, StreamConfig


def check_door(streams: Sequence[StreamConfig]) -> None:
    """A Spark master or Connect server that is not listening, or a remote catalog (Glue, an
    Iceberg REST catalog) that does not answer (asked through each stream's
    `PublicationTarget`), raises its `ComponentUnreachableError` here; local ones are not
    asked. Spark's options (`SparkSettings.options`) are checked here too, before any run."""
    spark = SparkSettings.from_env()
    spark.options()
    require_reachable(spark.master, spark.remote)
    settings = CatalogSettings.from_env()
    if settings.catalog == "local":
        return
    lake = LakeSettings.from_env()
    targets: dict[str, PublicationTarget] = {}
    for stream in streams:
        if stream.table_format not in targets:
            targets[stream.table_format] = target_for(
                settings,
                stream.table_format,
                s3_endpoint_url=lake.s3_endpoint_url,
                s3_region=lake.region,
            )
        targets[stream.table_format].table(stream.name)  # named after its stream (LakeResource)
