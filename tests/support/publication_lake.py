"""A table's lake written by hand the way ingestion, merges and publication write it — real
files under the table's root and the ledger's records of them — for the garbage-collection
suites: small objects under `dt=<dt>/`, merged objects under `merged/dt=<dt>/<epoch>-<uuid>/`,
manifest versions under `_manifests/` (`resources.publication.manifest`), each committed or
recorded through the real ledger."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from resources.coordination.items import ItemType
from resources.ledger.merge import MergeCommit, MergedObject, merged_object_name
from resources.ledger.model import RegisteredObject, SmallObject
from resources.ledger.publication import (
    LIVE,
    MERGED,
    DataFile,
    Publication,
    live_files,
    merged_files,
)
from resources.objects.base import ObjectStore
from resources.publication.manifest import new_version_key, write_version
from resources.stores.base import CoordinationStore
from resources.streams import ColumnSpec, StreamConfig

TABLE = "events"
DT = "2026-01-01"
LEASE_S = 60.0


def stream_config(table_url: str) -> StreamConfig:
    return StreamConfig(
        name=TABLE,
        source="file:///nowhere",
        format="jsonl",
        columns=(ColumnSpec("id", "long"), ColumnSpec("at", "timestamp")),
        event_time="at",
        table=table_url,
        quarantine="file:///nowhere/quarantine",
    )


@dataclass
class Lake:
    store: CoordinationStore
    objects: ObjectStore
    dt: str = DT

    def ingest(self, *sizes: int) -> list[RegisteredObject]:
        """One ingestion attempt: its small objects written, then committed in one commit."""
        return self.commit(self.write_small(*sizes))

    def write_small(self, *sizes: int) -> list[SmallObject]:
        """An ingestion attempt's small objects, written and not committed (yet)."""
        small = []
        for size in sizes:
            key = f"dt={self.dt}/att-{uuid.uuid4().hex[:12]}.parquet"
            url = self.objects.put_bytes(key, b"s" * size)
            small.append(SmallObject(TABLE, self.dt, url, size, size // 10))
        return small

    def commit(self, small: list[SmallObject]) -> list[RegisteredObject]:
        sid = self.store.source_identifier("source")
        self.store.create_partitions(sid, [small[0].url])
        lease = self.store.acquire(sid, small[0].url, "ingester", LEASE_S)
        return list(self.store.commit(lease.token, small, merge_after_s={TABLE: 3600}).objects)

    def close(self) -> None:
        self.store.close_partition(TABLE, self.dt)

    def merge(self, lower: int, upper: int, size: int = 500) -> str:
        """One merge of `(lower, upper]` (a new range or the open one rewritten): the merged
        object written under a prefix of its own, then committed; returns its URL."""
        sid = self.store.source_identifier(TABLE, ItemType.MERGE_JOB)
        self.store.create_partitions(sid, [self.dt])
        lease = self.store.acquire(sid, self.dt, "merger", LEASE_S)
        name = merged_object_name(lower, upper)
        key = f"merged/dt={self.dt}/{lease.epoch}-{uuid.uuid4().hex[:12]}/{name}"
        url = self.objects.put_bytes(key, b"m" * size)
        ranges = self.store.merge_ranges(TABLE, self.dt)
        previous = ranges[-1].upper if ranges else 0
        merged = MergedObject(lower, upper, url, size, size // 10)
        commit = MergeCommit(TABLE, self.dt, previous, merged, False, 3600.0)
        self.store.commit_merge(lease.token, commit)
        return url

    def files(self, switched: bool, upper: int) -> list[DataFile]:
        if switched:
            return merged_files(self.store.merge_ranges(TABLE, self.dt))
        return live_files(self.store.ledger_objects(TABLE, self.dt), upper)

    def publish(self, switched: bool, upper: int) -> Publication:
        """One publication: a new manifest version written, then recorded in the ledger."""
        files = self.files(switched, upper)
        key = new_version_key(self.dt, MERGED if switched else LIVE, upper)
        location = write_version(self.objects, key, files)
        return self.store.record_publication(
            Publication(
                table=TABLE,
                dt=self.dt,
                seq=0,
                switched=switched,
                upper=upper,
                location=location,
                files=len(files),
                rows=sum(f.row_count for f in files),
                bytes=sum(f.content_length for f in files),
                published_at_ms=0,
            )
        )

    def keys(self) -> set[str]:
        return {o.key for o in self.objects.list_prefix("")}

    def key(self, url: str) -> str:
        return self.objects.key_of(url)
