"""Data files joining an Iceberg table without a rewrite: their `DataFile` entries, built from
each file's Parquet footer, in the identity partition of their `dt`.

pyiceberg's `parquet_file_to_data_file` derives the partition from the file's columns, and a
leasehold object holds no `dt` column: the file would land in the null partition without an
error (and `DataFile.partition` cannot be set afterwards). So the entry is built here with the
partition given: the days since 1970-01-01 of `dt`. Statistics (row count, column sizes,
bounds) come from the footer by column name, the schema checked as pyiceberg checks it
(`internals.check_file_schema`: nanosecond timestamps, for one, are refused).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

import pyarrow.parquet as pq
from pyiceberg.io import FileIO
from pyiceberg.io.pyarrow import (
    compute_statistics_plan,
    data_file_statistics_from_parquet_metadata,
    parquet_path_to_id_mapping,
)
from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Record
from pyiceberg.utils.concurrent import ExecutorFactory

from resources.catalog.base import CatalogError
from resources.catalog.iceberg.internals import check_file_schema
from resources.catalog.target import PartitionFile

EPOCH = date(1970, 1, 1)


def partition_value(dt: str) -> int:
    """The identity partition value of `dt` (an ISO date): days since 1970-01-01."""
    return (date.fromisoformat(dt) - EPOCH).days


def partition_dt(days: int) -> str:
    """The ISO date of a `dt` partition value."""
    return date.fromordinal(EPOCH.toordinal() + days).isoformat()


def data_files(
    io: FileIO, metadata: TableMetadata, dt: str, files: Sequence[PartitionFile]
) -> list[DataFile]:
    """The entries of `files` in partition `dt` (footers read in parallel), in order. Raises
    `CatalogError` when a file cannot be read, its schema does not fit the table, or it holds
    another row count than its `PartitionFile` says."""
    executor = ExecutorFactory.get_or_create()
    return list(executor.map(lambda f: data_file(io, metadata, dt, f), files))


def data_file(io: FileIO, metadata: TableMetadata, dt: str, file: PartitionFile) -> DataFile:
    """The entry of one file in partition `dt`. Raises as `data_files` does."""
    source = io.new_input(file.url)
    try:
        with source.open() as stream:
            footer = pq.read_metadata(stream)
        size = len(source)
    except OSError as exc:
        raise CatalogError(f"cannot read the Parquet footer of {file.url}: {exc}") from exc
    schema = metadata.schema()
    try:
        check_file_schema(schema, footer.schema.to_arrow_schema(), metadata.format_version)
    except ValueError as exc:
        raise CatalogError(f"{file.url} does not fit the table's schema: {exc}") from exc
    if footer.num_rows != file.rows:
        raise CatalogError(f"{file.url} holds {footer.num_rows} rows, not {file.rows}")
    statistics = data_file_statistics_from_parquet_metadata(
        parquet_metadata=footer,
        stats_columns=compute_statistics_plan(schema, metadata.properties),
        parquet_column_mapping=parquet_path_to_id_mapping(schema),
    )
    return DataFile.from_args(
        content=DataFileContent.DATA,
        file_path=file.url,
        file_format=FileFormat.PARQUET,
        partition=Record(partition_value(dt)),
        file_size_in_bytes=size,
        sort_order_id=None,
        spec_id=metadata.default_spec_id,
        equality_ids=None,
        key_metadata=None,
        **statistics.to_serialized_dict(),
    )
