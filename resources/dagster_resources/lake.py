"""The lake resource: where streams read from and write to.

`LakeResource` turns a stream's configuration into the callables `IngestionRunner`,
`Discovery` and `MergeRunner` need (list, fetch, read, publish, merge), so they stay free of
Dagster and of any one object store. The run's one SparkSession is `SparkResource`'s (`spark.py`).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dagster import InitResourceContext
from pydantic import PrivateAttr

from resources.compaction.merge_runner import MergeRunner
from resources.compaction.merge_schedule import MergeSchedule
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.door import failing_the_run
from resources.dagster_resources.env import settings_resource
from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.discovery import Lister
from resources.ingestion.runner import IngestionRunner, Publish
from resources.ingestion.source_listing import source_lister
from resources.objects.base import ObjectStore, object_store_for
from resources.stores.stream_schema import followed_config
from resources.streams import LakeSettings, StreamConfig

MAX_PARALLEL_MERGES = 4
"""Merges a run does at once (one thread each): bounds a merge run's memory at ~2 GiB."""

if TYPE_CHECKING:
    from concurrent.futures import Future

    from resources.dagster_resources.spark import SparkResource
    from resources.ingestion.runner import SourceBatchResult
    from resources.ingestion.source_reader import SourceReader


# A base built at import from the declarations: mypy cannot follow it (its fields read as Any).
class LakeResource(settings_resource(LakeSettings)):  # type: ignore[misc]
    """Streams configuration plus how to reach their object stores.

    Its fields are the settings `LakeSettings` declares; `from_env()` is the resource as
    Definitions binds it.
    """

    _streams: dict[str, StreamConfig] | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        with failing_the_run():
            self.validate_settings()
            self.streams()  # invalid stream configuration fails before any work

    def streams(self) -> dict[str, StreamConfig]:
        if self._streams is None:
            self._streams = self.settings_of(LakeSettings).streams()
        return self._streams

    def stream(self, name: str) -> StreamConfig:
        return self.streams()[name]

    def table_name(self, stream: str) -> str:
        return stream

    def object_store(self, url: str) -> ObjectStore:
        return object_store_for(url, endpoint_url=self.s3_endpoint_url, region=self.region)

    def scratch_dir(self) -> Path:
        settings: LakeSettings = self.settings_of(LakeSettings)
        return settings.scratch_dir()

    def lister(self, stream: str) -> Lister:
        return source_lister(self.object_store(self.stream(stream).source))

    def ingestion_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> IngestionRunner:
        store = coordination.store
        config = followed_config(store, self.stream(stream))
        source = self.object_store(config.source)
        table = self.object_store(config.table)
        quarantine = self.object_store(config.quarantine)

        @functools.cache
        def reader() -> SourceReader:  # one per run: it keeps the Spark expressions it built
            from resources.ingestion.source_reader import SourceReader

            return SourceReader(
                spark.session(),
                config,
                record_schema=lambda columns, origin: store.record_schema(stream, columns, origin),
            )

        def read_batch(
            files: dict[str, Path],
            staging: Path,
            attempt: str,
            groups: dict[str, str],
            line_offsets: dict[str, int] | None = None,
        ) -> Future[dict[str, SourceBatchResult]]:
            return reader().start(files, staging, attempt, groups, line_offsets)

        def publisher(store: ObjectStore) -> Publish:
            return lambda local, key: store.move_file(local, key)

        return IngestionRunner(
            stream=stream,
            table=self.table_name(stream),
            store=store,
            owner=owner,
            timing=coordination.timing(),
            fetch=lambda key, scratch: source.local_copy(key, scratch),
            read_batch=read_batch,
            publish_table=publisher(table),
            publish_quarantine=publisher(quarantine),
            work_dir=self.scratch_dir(),
            chunk_size=self.chunk_size,
            on_step=on_step,
            merge_after_s=config.merge.interval_s,
            commit_every_bytes=config.partition.commit_every_bytes,
            csv=CsvFormat.of(config) if config.format == "csv" else None,
            delayed_merge_after_s=config.merge.delayed_interval_s,
        )

    def merge_schedule(self, stream: str, coordination: CoordinationResource) -> MergeSchedule:
        return MergeSchedule(
            coordination.store,
            self.stream(stream),
            self.table_name(stream),
            backoff=coordination.timing().reopen_backoff,
        )

    def merge_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> MergeRunner:
        store = coordination.store
        config = followed_config(store, self.stream(stream))

        from resources.compaction.merge_writer import MergeWriter

        # Spark starts only if a merge needs it (most are done in pyarrow, `MergeWriter`).
        writer = MergeWriter(
            spark.session, config, follow=lambda: followed_config(store, self.stream(stream))
        )
        return MergeRunner(
            config=config,
            table=self.table_name(stream),
            store=coordination.store,
            objects=self.object_store(config.table),
            owner=owner,
            timing=coordination.timing(),
            write=writer.write,
            work_dir=self.scratch_dir(),
            on_step=on_step,
            # One merge per core, at most MAX_PARALLEL_MERGES: a merge done in pyarrow holds up
            # to twice `ARROW_MAX_BYTES` (512 MiB) while it sorts.
            parallel=min(os.cpu_count() or 1, MAX_PARALLEL_MERGES),
        )
