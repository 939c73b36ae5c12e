"""The lake resource: where streams read from and write to.

`LakeResource` turns a stream's configuration into the callables `IngestionRunner` and
`Discovery` need (list, fetch, read, publish), so both stay free of Dagster and of any one
object store. The run's one SparkSession is `SparkResource`'s (`spark.py`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dagster import ConfigurableResource, InitResourceContext
from pydantic import PrivateAttr

from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.env import env_fields
from resources.ingestion.discovery import Lister
from resources.ingestion.runner import IngestionRunner, Publish
from resources.objects.base import ObjectStore, object_store_for
from resources.settings import default_data_dir
from resources.streams import StreamConfig, load_streams

if TYPE_CHECKING:
    from resources.dagster_resources.spark import SparkResource
    from resources.ingestion.source_reader import SourceReader


class LakeResource(ConfigurableResource):
    """Streams configuration plus how to reach their object stores."""

    streams_path: str | None = None
    s3_endpoint_url: str | None = None
    region: str | None = None
    work_dir: str | None = None
    # Each run costs seconds before it ingests anything (launch through the daemon, Spark
    # start, its planned events) and a tail after its last Spark read that nothing overlaps
    # (that chunk's writes, commits and events): fewer, bigger runs (BENCHMARKS.md).
    max_partitions_per_run: int = 2000
    max_objects_per_tick: int = 20_000
    max_retries_per_tick: int = 20
    # Partitions per Spark read. A run reads the next chunk while it commits this one (and
    # Dagster records it), so several chunks per run hide most of the event-log cost.
    chunk_size: int = 250

    _streams: dict[str, StreamConfig] | None = PrivateAttr(default=None)

    @classmethod
    def from_env(cls) -> LakeResource:
        return cls(
            **env_fields(
                {
                    "streams_path": "LEASEHOLD_STREAMS",
                    "s3_endpoint_url": "LEASEHOLD_S3_ENDPOINT_URL",
                    "region": "LEASEHOLD_S3_REGION",
                    "work_dir": "LEASEHOLD_WORK_DIR",
                }
            )
        )

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.streams()  # invalid stream configuration fails before any work

    def streams(self) -> dict[str, StreamConfig]:
        if self._streams is None:
            self._streams = load_streams(self.streams_path)
        return self._streams

    def stream(self, name: str) -> StreamConfig:
        return self.streams()[name]

    def table_name(self, stream: str) -> str:
        return stream

    def object_store(self, url: str) -> ObjectStore:
        return object_store_for(url, endpoint_url=self.s3_endpoint_url, region=self.region)

    def scratch_dir(self) -> Path:
        return Path(self.work_dir) if self.work_dir else default_data_dir() / "work"

    def lister(self, stream: str) -> Lister:
        source = self.object_store(self.stream(stream).source)

        def list_after(after: str | None, limit: int) -> tuple[list[str], str | None]:
            keys = [o.key for o in source.list_after(after, limit)]
            return keys, keys[-1] if keys else after

        return list_after

    def ingestion_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> IngestionRunner:
        config = self.stream(stream)
        source = self.object_store(config.source)
        table = self.object_store(config.table)
        quarantine = self.object_store(config.quarantine)

        @functools.cache
        def reader() -> SourceReader:  # one per run: it keeps the Spark expressions it built
            from resources.ingestion.source_reader import SourceReader

            return SourceReader(spark.session(), config)

        def read_batch(files: dict[str, Path], staging: Path, attempt: str):
            return reader().start(files, staging, attempt)

        def publisher(store: ObjectStore) -> Publish:
            return lambda local, key: store.move_file(local, key)

        return IngestionRunner(
            stream=stream,
            table=self.table_name(stream),
            store=coordination.store,
            owner=owner,
            timing=coordination.timing(),
            fetch=lambda key, scratch: source.local_copy(key, scratch),
            read_batch=read_batch,
            publish_table=publisher(table),
            publish_quarantine=publisher(quarantine),
            work_dir=self.scratch_dir(),
            chunk_size=self.chunk_size,
            on_step=on_step,
        )
