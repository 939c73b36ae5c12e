"""The ledger: which small objects make up each table partition (Prism's metadata model).

A small object exists for readers only once the ledger names it. It is registered by the same
transaction that marks its source partition COMPLETED (docs/architecture.md), conditional on the
lease's owner and epoch, and that transaction also assigns its id: ids are dense per table
partition and allocated inside the commit, so "every id up to the counter" is always a complete,
committed set — Prism allocated ids before uploading and a merge could skip a late commit.

Files written by an attempt that never committed are orphans under the table's prefix; nothing
ever lists that prefix to find table data, so they are invisible until a vacuum deletes them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from resources.coordination.items import LeaseItem, LeaseToken
from resources.errors import LeaseholdError
from resources.ledger.provenance import Sources


@dataclass(frozen=True)
class SmallObject:
    """One Parquet object written by one ingestion attempt for one table partition."""

    table: str
    dt: str
    url: str
    content_length: int
    row_count: int
    schema_version: int = 1
    """The stream's schema version whose columns it was written with (what its Parquet
    metadata says, `resources.schema.parquet_meta`): the ledger keeps it, so what a table
    partition holds is known without reading a footer."""
    sources: Sources = ()
    """The source objects its rows came from, in row order (`resources.ledger.provenance`);
    `()`: not said."""


@dataclass(frozen=True)
class RegisteredObject:
    """A small object as the ledger registered it: its id in its table partition, URL, size, rows
    and origin."""

    table: str
    dt: str
    object_id: int
    url: str
    content_length: int
    row_count: int
    source_identifier: str
    source_partition_key: str
    epoch: int
    delayed: bool
    """Committed after its table partition closed (`last_live_object_id` was set)."""
    committed_at_ms: int | None = None
    """When its commit's transaction ran, on the store's clock: how long its rows have waited
    to be published (`resources.ledger.publication_lag`). None: not known (a DynamoDB item
    without the attribute, or an object built outside a commit)."""
    schema_version: int = 1
    """Its `SmallObject.schema_version`, as committed. 1 for an object committed before the
    ledger kept versions (a SQLite row of an older file, a DynamoDB item without the
    attribute): it was written before there were versions."""
    sources: Sources = ()
    """Its `SmallObject.sources`, as committed; `()` for an object committed before the ledger
    kept them."""


@dataclass(frozen=True)
class TablePartition:
    """A table partition's ledger row: its id counter, close, merge and publication state."""

    table: str
    dt: str
    next_object_id: int
    """Ids 1..next_object_id-1 are committed; a merge may take exactly those."""
    last_live_object_id: int | None = None
    current_manifest_version: int = -1
    desired_manifest_version: int = -1
    """Raised by every merge commit to the chain's new `upper` (Prism's rule)."""
    switched: bool = False
    merged_upper: int = 0
    """The last merge range's `upper`: ids above it and below `next_object_id` are unmerged."""
    merge_due_at_ms: int | None = None
    """When the partition's one pending merge job is due; None: no pending job."""
    published_upper: int = 0
    """The ids the current publication covers are `1..published_upper` (0: never published);
    with `switched`, its version (`resources.ledger.publication`)."""
    publication_seq: int = 0
    """The current publication's `seq` (0: never published); the next one gets `seq + 1`."""

    @property
    def closed(self) -> bool:
        return self.last_live_object_id is not None

    @property
    def unmerged(self) -> int:
        return self.next_object_id - 1 - self.merged_upper


@dataclass(frozen=True)
class CommitRecord:
    """Durable, TTL-free proof that a source partition was committed: a second commit of the
    same source partition is refused even if its lease item was deleted and re-created."""

    source_identifier: str
    source_partition_key: str
    epoch: int
    object_ids: tuple[tuple[str, str, int], ...]  # (table, dt, id)
    committed_at_ms: int


@dataclass(frozen=True)
class CommitResult:
    """What a commit wrote: the lease item after it and the objects registered."""

    item: LeaseItem
    objects: tuple[RegisteredObject, ...]


class AlreadyCommittedError(LeaseholdError):
    """The source partition has a commit record already: this attempt must not add anything."""

    def __init__(self, record: CommitRecord) -> None:
        super().__init__(
            f"{record.source_partition_key!r} was already committed (epoch {record.epoch})"
        )
        self.record = record


MAX_OBJECTS_PER_COMMIT = 90
"""DynamoDB transactions hold at most 100 items; a commit also writes the lease, the commit
record and one counter per table partition. One source object feeding more than this many
dates is refused with a clear error rather than committed in pieces."""


def group_by_partition(objects: list[SmallObject]) -> dict[tuple[str, str], list[SmallObject]]:
    """Table partition → its objects, in a stable order (ids follow it)."""
    groups: dict[tuple[str, str], list[SmallObject]] = {}
    for obj in sorted(objects, key=lambda o: (o.table, o.dt, o.url)):
        groups.setdefault((obj.table, obj.dt), []).append(obj)
    return groups


class CommitTooLargeError(LeaseholdError, ValueError):
    """One source object feeds more table partitions than one transaction can register."""


def fits_one_commit(objects: list[SmallObject]) -> bool:
    """Whether one commit of `objects` stays within one DynamoDB transaction (100 items: each
    object, each table partition's row and counter, the lease item and the commit record)."""
    return len(objects) + 2 * len(group_by_partition(objects)) + 2 <= 100


def check_commit_size(objects: list[SmallObject]) -> None:
    if not fits_one_commit(objects):
        raise CommitTooLargeError(
            f"one commit of {len(objects)} objects over {len(group_by_partition(objects))} "
            f"table partitions exceeds a single transaction (max {MAX_OBJECTS_PER_COMMIT} objects)"
        )


def object_summary(objects: tuple[RegisteredObject, ...]) -> dict[str, Any]:
    return {
        "small_objects": len(objects),
        "bytes": sum(o.content_length for o in objects),
        "rows_written": sum(o.row_count for o in objects),
        "table_partitions": sorted({o.dt for o in objects}),
    }


def assign_ids(
    token: LeaseToken,
    groups: Mapping[tuple[str, str], Sequence[SmallObject]],
    counters: Mapping[tuple[str, str], tuple[int, int | None]],
    committed_at_ms: int | None = None,
) -> list[RegisteredObject]:
    """Ids for a commit's objects: per table partition, dense from its counter
    (`next_object_id`, `last_live_object_id`; a partition without one starts at 1). Called
    inside the commit's transaction with the counters it read, by every backend: an object is
    delayed when its partition had closed (`last_live_object_id` set) before this commit.
    `committed_at_ms`: the time the backend stores with them, so a commit's result equals what
    a later read returns."""
    registered = []
    for (table, dt), group in groups.items():
        next_id, last_live = counters.get((table, dt), (1, None))
        for offset, obj in enumerate(group):
            registered.append(
                RegisteredObject(
                    table=table,
                    dt=dt,
                    object_id=next_id + offset,
                    url=obj.url,
                    content_length=obj.content_length,
                    row_count=obj.row_count,
                    source_identifier=token.source_identifier,
                    source_partition_key=token.partition_key,
                    epoch=token.epoch,
                    delayed=last_live is not None,
                    committed_at_ms=committed_at_ms,
                    schema_version=obj.schema_version,
                    sources=obj.sources,
                )
            )
    return registered
