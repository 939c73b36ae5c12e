"""The lake resource: where streams read from and write to.

`LakeResource` turns a stream's configuration into the callables `IngestionRunner`,
`Discovery` and `MergeRunner` need (list, read, merge), so they stay free of
Dagster and of any one object store. The run's one SparkSession is `SparkResource`'s (`spark.py`).
"""

from __future__ import annotations

import functools
import os
import sys
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
from resources.ingestion.discovery import Lister
from resources.ingestion.notification_discovery import SourceLocation
from resources.ingestion.replacement import ReplacementMarkers
from resources.ingestion.runner import IngestionRunner
from resources.ingestion.source_listing import source_lister
from resources.ingestion.split_task import StoreAddress
from resources.notifications.queue import EventQueue
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.publication.current_keys import current_keys
from resources.publication.deduped_files import DedupedFiles
from resources.stores.stream_schema import followed_config
from resources.streams import LakeSettings, StreamConfig

MAX_PARALLEL_MERGES = 4
"""Merges a run does at once (one thread each): bounds a merge run's memory at ~2 GiB."""

if TYPE_CHECKING:
    from resources.dagster_resources.spark import SparkResource
    from resources.ingestion.task_reader import TaskReader


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

    def event_queue(self, stream: str) -> EventQueue:
        """The SQS queue a notifications stream's S3 events arrive on."""
        queue = self.stream(stream).discovery.queue
        if queue is None:
            raise ValueError(f"stream {stream!r} does not discover by notifications")
        return EventQueue(queue, region=self.region, wait_s=self.notification_wait_seconds)

    def source_location(self, stream: str) -> SourceLocation:
        """The stream's bucket and prefix, as its S3 events name them, with its store."""
        source = self.stream(stream).source
        bucket, _, prefix = source.removeprefix("s3://").partition("/")
        return SourceLocation(
            bucket, prefix.strip("/"), self.object_store(source), self.lister(stream)
        )

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

        @functools.cache
        def reader() -> TaskReader:  # one per run: it follows the stream's schema as it reads
            from resources.ingestion.task_reader import TaskReader
            from resources.spark.progress import watch_for

            session = spark.session()
            return TaskReader(
                session,
                config,
                self.store_address(config),
                record_schema=lambda columns, origin: store.record_schema(stream, columns, origin),
                watch=watch_for(session, spark.stall_seconds, spark.remote),
            )

        def progressing() -> bool:  # a reader not made yet runs no Spark job
            return reader.cache_info().currsize == 0 or reader().watch.progressing()

        return IngestionRunner(
            stream=stream,
            table=self.table_name(stream),
            store=store,
            owner=owner,
            timing=coordination.timing(),
            read_batch=lambda reading, attempt: reader().read(reading, attempt),
            read_large=lambda unit, obj, reached, attempt: reader().read_large(
                unit, obj, reached, config.partition.commit_every_bytes or 0, attempt
            ),
            chunk_size=self.chunk_size,
            on_step=on_step,
            merge_after_s=config.merge.interval_s,
            commit_every_bytes=config.partition.commit_every_bytes,
            delayed_merge_after_s=config.merge.delayed_interval_s,
            progressing=progressing,
            replacements=ReplacementMarkers(
                store, self.object_store(config.table), stream, self.table_name(stream)
            ),
        )

    def store_address(self, config: StreamConfig) -> StoreAddress:
        """Where a stream's Spark tasks read and write, and how they reach S3."""
        return StoreAddress.of(config, self.s3_endpoint_url, self.region)

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

        from resources.compaction.merge_writer import ARROW_MAX_BYTES, MergeWriter

        # Spark starts only if a merge needs it (most are done in pyarrow, `MergeWriter`). Its
        # Spark path reads the inputs this process downloaded, by path: on a cluster or a
        # Connect server, whose executors do not see this disk, every merge is pyarrow's.
        writer = MergeWriter(
            spark.session,
            config,
            follow=lambda: followed_config(store, self.stream(stream)),
            arrow_max_bytes=ARROW_MAX_BYTES if spark.sees_local_files else sys.maxsize,
        )
        table, objects = self.table_name(stream), self.object_store(config.table)
        return MergeRunner(
            config=config,
            table=table,
            store=coordination.store,
            objects=objects,
            owner=owner,
            timing=coordination.timing(),
            write=writer.write,
            work_dir=self.scratch_dir(),
            on_step=on_step,
            # One merge per core, at most MAX_PARALLEL_MERGES: a merge done in pyarrow holds up
            # to twice `ARROW_MAX_BYTES` (512 MiB) while it sorts.
            parallel=min(os.cpu_count() or 1, MAX_PARALLEL_MERGES),
            served=functools.partial(current_keys, store, DedupedFiles(config, objects), table),
        )
