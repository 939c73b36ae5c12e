"""Reading a published table partition exactly as an external engine does (docs/architecture.md).

The partition is looked up through the table's `PublicationTarget`, and its files resolved the
way an engine of that table format does (`partition_files`): under `manifests`, Athena, Trino
and Presto list the directory the Hive partition's location names (the manifest version's
`symlink/` directory, read through `SymlinkTextInputFormat`), read every file there as a list
of data-file URLs, and read those files. Nothing here asks the ledger or lists a data prefix:
if this reader sees the right rows, so does an engine, and a file a manifest does not name (an
orphan of a failed attempt) is never read.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.catalog.target import MANIFESTS, PublicationTarget, PublishedPartition
from resources.errors import LeaseholdError
from resources.objects.base import ObjectStore, ObjectStoreError
from resources.objects.factory import object_store_for
from resources.publication.manifest import parse_symlink_text
from resources.schema.arrow import RetypedColumnError, arrow_type, read_by_name
from resources.schema.columns import ColumnSpec

HIDDEN_PREFIXES = (".", "_")
"""Files Hadoop's input formats skip when they list a directory."""


class PublishedReadError(LeaseholdError):
    """A published partition could not be resolved or read."""


class TableNotPublishedError(PublishedReadError):
    """The table is not in the catalog: nothing was published yet."""

    def __init__(self, table: str) -> None:
        super().__init__(f"table {table!r} is not in the catalog (nothing published yet?)")
        self.table = table


class PartitionNotPublishedError(PublishedReadError):
    """The table has no published partition for that date."""

    def __init__(self, table: str, dt: str) -> None:
        super().__init__(f"{table} has no published partition dt={dt}")
        self.table = table
        self.dt = dt


def served_partition(target: PublicationTarget, table: str, dt: str) -> PublishedPartition:
    """Partition `dt` of `table` as `target` serves it now. Raises `TableNotPublishedError`,
    `PartitionNotPublishedError`, `CatalogError`."""
    if target.table(table) is None:
        raise TableNotPublishedError(table)
    partition = target.partition(table, dt)
    if partition is None:
        raise PartitionNotPublishedError(table, dt)
    return partition


def partition_files(
    target: PublicationTarget,
    table: str,
    dt: str,
    *,
    s3_endpoint_url: str | None = None,
    region: str | None = None,
) -> list[str]:
    """The data-file URLs of partition `dt` as an engine of the target's table format
    resolves them: `manifests`, every symlink file in the directory the Hive partition points
    at, in manifest order (`symlink_files`); `iceberg`, the current snapshot's files
    (`IcebergTarget.data_files`), by URL. Raises
    `PublishedReadError` (and its subclasses for a table or partition never published),
    `CatalogError`."""
    partition = served_partition(target, table, dt)
    if target.table_format == MANIFESTS:
        return symlink_files(partition, s3_endpoint_url=s3_endpoint_url, region=region)
    from resources.catalog.iceberg.target import IcebergTarget  # pyiceberg: only when needed

    if not isinstance(target, IcebergTarget):
        raise PublishedReadError(
            f"{table} dt={dt}: no way to resolve the files of a {target.table_format!r} table"
        )
    return [f.url for f in target.data_files(table, dt)]


def symlink_files(
    partition: PublishedPartition,
    *,
    s3_endpoint_url: str | None = None,
    region: str | None = None,
) -> list[str]:
    """The data-file URLs a Hive partition serves, in manifest order: every symlink file in
    the directory its location names, as an engine lists and reads them. Raises
    `PublishedReadError`."""
    table, dt, location = partition.table, partition.dt, partition.location
    directory = object_store_for(location.rstrip("/"), endpoint_url=s3_endpoint_url, region=region)
    try:
        names = sorted(
            info.key
            for info in directory.list_after(None, 1000)
            if "/" not in info.key and not info.key.startswith(HIDDEN_PREFIXES)
        )
        if not names:
            raise PublishedReadError(f"{table} dt={dt}: no symlink manifest in {location}")
        urls: list[str] = []
        for name in names:
            urls += parse_symlink_text(directory.get_bytes(name))
    except (ObjectStoreError, OSError) as exc:
        raise PublishedReadError(f"{table} dt={dt}: cannot read {location}: {exc}") from exc
    return urls


def read_partition(
    target: PublicationTarget,
    table: str,
    dt: str,
    *,
    limit: int | None = None,
    columns: Sequence[ColumnSpec] | None = None,
    s3_endpoint_url: str | None = None,
    region: str | None = None,
) -> pa.Table:
    """Partition `dt`'s rows from the files its manifest names (at most `limit` rows; files
    past the limit are not read). Local files are read in place, S3 objects through the
    object store. The files may hold different schema versions: without `columns`, every
    column any file holds, null where a file lacks it; with `columns`, only those, each file
    read by name (`read_by_name`: a column a file lacks is null, one it holds with another
    type a `PublishedReadError`); no rows for a manifest naming no file. Raises
    `PublishedReadError` (and its subclasses for a
    table or partition never published) when a file cannot be resolved or read."""
    urls = partition_files(target, table, dt, s3_endpoint_url=s3_endpoint_url, region=region)
    stores: dict[str, ObjectStore] = {}
    tables: list[pa.Table] = []
    rows = 0
    for url in urls:
        if limit is not None and rows >= limit:
            break
        try:
            data = _read(url, stores, s3_endpoint_url, region, columns)
        except (ObjectStoreError, OSError, pa.ArrowException, RetypedColumnError) as exc:
            raise PublishedReadError(f"{table} dt={dt}: cannot read {url}: {exc}") from exc
        tables.append(data)
        rows += data.num_rows
    if not tables:  # a date every record of which another date serves (`dedupe.scope: table`)
        return pa.schema([]).empty_table() if columns is None else _no_rows(columns)
    result = pa.concat_tables(tables, promote_options="default")
    return result if limit is None else result.slice(0, limit)


def _no_rows(columns: Sequence[ColumnSpec]) -> pa.Table:
    return pa.schema([(c.name, arrow_type(c.type)) for c in columns]).empty_table()


def _read(
    url: str,
    stores: dict[str, ObjectStore],
    endpoint_url: str | None,
    region: str | None,
    columns: Sequence[ColumnSpec] | None,
) -> pa.Table:
    """One data file: an `s3://` object through the object store, else a local file (a
    `file://` URL or a plain path, as an engine takes both); all of it, or `columns` by
    name."""
    source: Any
    if url.startswith("s3://"):
        bucket, _, key = url[len("s3://") :].partition("/")
        root = f"s3://{bucket}"
        if root not in stores:
            stores[root] = object_store_for(root, endpoint_url=endpoint_url, region=region)
        source = io.BytesIO(stores[root].get_bytes(key))
    else:
        source = url[len("file://") :] if url.startswith("file://") else url
    return pq.read_table(source) if columns is None else read_by_name(source, columns)
