"""Reading a published table partition exactly as an external engine does (docs/architecture.md).

Athena, Trino and Presto look the partition up in the catalog, list the directory its location
names (the manifest version's `symlink/` directory, read through `SymlinkTextInputFormat`),
read every file there as a list of data-file URLs, and read those files. Nothing here asks the
ledger or lists a data prefix: if this reader sees the right rows, so does an engine, and a
file a manifest does not name (an orphan of a failed attempt) is never read.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.catalog.base import Catalog, CatalogPartition
from resources.errors import LeaseholdError
from resources.objects.base import ObjectStore, ObjectStoreError
from resources.objects.factory import object_store_for
from resources.publication.manifest import parse_symlink_text
from resources.schema.arrow import RetypedColumnError, read_by_name
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


def catalog_partition(catalog: Catalog, table: str, dt: str) -> CatalogPartition:
    if catalog.table(table) is None:
        raise TableNotPublishedError(table)
    partition = catalog.partition(table, dt)
    if partition is None:
        raise PartitionNotPublishedError(table, dt)
    return partition


def partition_files(
    catalog: Catalog,
    table: str,
    dt: str,
    *,
    s3_endpoint_url: str | None = None,
    region: str | None = None,
) -> list[str]:
    """The data-file URLs of partition `dt`, in manifest order: every symlink file in the
    directory the catalog partition points at, as an engine lists and reads them."""
    location = catalog_partition(catalog, table, dt).location
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
    catalog: Catalog,
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
    type a `PublishedReadError`). Raises `PublishedReadError` (and its subclasses for a
    table or partition never published) when a file cannot be resolved or read."""
    urls = partition_files(catalog, table, dt, s3_endpoint_url=s3_endpoint_url, region=region)
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
    if not tables:
        raise PublishedReadError(f"{table} dt={dt}: the manifest names no data file")
    result = pa.concat_tables(tables, promote_options="default")
    return result if limit is None else result.slice(0, limit)


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
