"""`CatalogResource`: the publication targets tables are published through, and the
publication settings.

Its fields are the settings `CatalogSettings` (which catalog: the local file, or Glue) and
`PublicationSettings` (how many partitions a publication run covers, the garbage collector's
safety delay) declare, so a bad `LEASEHOLD_CATALOG` fails the code location at load naming the
field, like every other variable. A stream's table, and its rollups' tables, are published
through the `PublicationTarget` of its `table_format` (`target_for`), plain
Python; this file builds the publication objects the assets, sensor and GC job use from it —
and the rollup runners, which publish each rollup's table — so they stay free of how a target,
a store or an object store is opened.
"""

from __future__ import annotations

import time

from dagster import InitResourceContext
from pydantic import PrivateAttr

from resources.aggregation.first_records import FirstRecords
from resources.aggregation.partials import SizedPartials
from resources.aggregation.rollup_table import RollupTable, rollup_table_name
from resources.aggregation.runner import RollupRunner
from resources.aggregation.served_rows import ServedRows
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PublicationTarget
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.door import failing_the_run
from resources.dagster_resources.env import settings_resource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.key_settings import FIRST, published_rows_leave
from resources.publication.garbage import GarbageCollector
from resources.publication.publisher import Publisher
from resources.publication.settings import PublicationSettings
from resources.stores.stream_schema import followed_config


# A base built at import from the declarations: mypy cannot follow it (its fields read as Any).
class CatalogResource(settings_resource(CatalogSettings, PublicationSettings)):  # type: ignore[misc]
    """The publication targets (each opened once per run, when first asked for) and
    publication settings.

    `from_env()` is the resource as Definitions binds it.
    """

    _targets: dict[str, PublicationTarget] = PrivateAttr(default_factory=dict)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        with failing_the_run():
            self.validate_settings()  # a bad setting fails the run before any step does work

    def target(self, table_format: str, lake: LakeResource) -> PublicationTarget:
        """The target of `table_format` (a stream's `table_format`) over the configured
        catalog, with the lake's S3 endpoint and region, opened once. Raises
        `CatalogConfigError`, `CatalogUnreachableError`."""
        if table_format not in self._targets:
            self._targets[table_format] = target_for(
                self.settings_of(CatalogSettings),
                table_format,
                s3_endpoint_url=lake.s3_endpoint_url,
                s3_region=lake.region,
            )
        return self._targets[table_format]

    def publication_settings(self) -> PublicationSettings:
        settings: PublicationSettings = self.settings_of(PublicationSettings)
        return settings

    def publisher(
        self, stream: str, coordination: CoordinationResource, lake: LakeResource
    ) -> Publisher:
        config = lake.stream(stream)
        return Publisher(
            config,
            coordination.store,
            lake.object_store(config.table),
            self.target(config.table_format, lake),
            keys_timing=coordination.timing(),
        )

    def garbage_collector(
        self, stream: str, coordination: CoordinationResource, lake: LakeResource
    ) -> GarbageCollector:
        config = lake.stream(stream)
        return GarbageCollector(
            config,
            coordination.store,
            lake.object_store(config.table),
            safety_delay_s=self.gc_safety_delay_seconds,
            target=self.target(config.table_format, lake),
        )

    def rollup_runners(
        self,
        stream: str,
        coordination: CoordinationResource,
        lake: LakeResource,
        spark: SparkResource,
        owner: str,
    ) -> list[RollupRunner]:
        """One runner per rollup the stream declares, each publishing its table; Spark starts
        only for a big input (`SizedPartials`). Both read the rollup's columns by name with the
        types of the stream's latest schema version, so objects written before a column was
        added read it as nulls."""
        config = followed_config(coordination.store, lake.stream(stream))
        engines = SizedPartials(spark.session, config.columns)
        objects, table_name = lake.object_store(config.table), lake.table_name(stream)
        first_records, served_rows = None, None
        if published_rows_leave(config.dedupe, config.on_change):
            served_rows = ServedRows(coordination.store, objects, table_name)
        elif config.dedupe.mode == FIRST:
            first_records = FirstRecords(config, coordination.store, objects, table_name)
        runners = []
        for spec in config.rollups:
            table = RollupTable(
                config,
                spec,
                coordination.store,
                self.target(config.table_format, lake),
                lake.object_store(RollupTable.table_url(config, spec)),
                safety_delay_s=self.gc_safety_delay_seconds,
                clock_ms=lambda: int(time.time() * 1000),
            )
            runners.append(
                RollupRunner(
                    coordination.store,
                    objects,
                    table_name,
                    spec,
                    engines.for_bytes,
                    owner=owner,
                    timing=coordination.timing(),
                    work_dir=lake.scratch_dir(),
                    publish_to=table,
                    first_records=first_records,
                    served_rows=served_rows,
                )
            )
        return runners

    def rollup_positions(self, stream: str, lake: LakeResource) -> dict[str, dict[str, int]]:
        """Per rollup of the stream, the state position its table serves, by dt."""
        config = lake.stream(stream)
        target = self.target(config.table_format, lake)
        positions: dict[str, dict[str, int]] = {}
        for spec in config.rollups:
            name = rollup_table_name(config, spec)
            partitions = target.partitions(name) if target.table(name) is not None else []
            positions[spec.name] = {p.dt: p.seq for p in partitions}
        return positions
