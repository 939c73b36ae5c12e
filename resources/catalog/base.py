"""The `Catalog` interface, shared by the local catalog file and AWS Glue.

A catalog holds what an external engine needs to read a table: its columns, its partition key
`dt`, and per partition the location of the manifest version it must read. A partition's
location is the `symlink/` directory of a manifest version (Hive's `SymlinkTextInputFormat`:
Athena, Trino and Presto read every file in that directory as a list of data-file URLs), never
a prefix of data files. Each partition carries the publication `seq` it was set from;
`publish_partition` never replaces a partition with a lower `seq`, so a slow publisher cannot
move a partition back to an older version (Glue has no conditional update: the check is
read-then-write there: after every write the publisher checks the partition against the
ledger's current publication and puts it forward again if a racing writer moved it back).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from resources.errors import LeaseholdError

PARTITION_KEY = "dt"

SYMLINK_INPUT_FORMAT = "org.apache.hadoop.hive.ql.io.SymlinkTextInputFormat"
OUTPUT_FORMAT = "org.apache.hadoop.hive.ql.io.HiveIgnoreKeyTextOutputFormat"
PARQUET_SERDE = "org.apache.hadoop.hive.ql.io.parquet.serde.ParquetHiveSerDe"

HIVE_TYPES = {
    "string": "string",
    "long": "bigint",
    "int": "int",
    "double": "double",
    "boolean": "boolean",
    "timestamp": "timestamp",
    "date": "date",
}
"""streams.yaml column types -> Hive/Glue column types."""


class CatalogError(LeaseholdError):
    """The catalog could not be read or written (after bounded retries), or refused a value."""


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    """A Hive type (`HIVE_TYPES` values)."""


@dataclass(frozen=True)
class TableDefinition:
    name: str
    columns: tuple[Column, ...]
    location: str
    """The table's root URL (where its objects live); partitions are located by manifests."""


@dataclass(frozen=True)
class CatalogPartition:
    table: str
    dt: str
    location: str
    """The manifest version's `symlink/` directory URL (ends with `/`)."""
    seq: int
    """The publication `seq` this location was set from."""


class Catalog(ABC):
    """Tables and their partitions' manifest locations. Every write is idempotent."""

    @abstractmethod
    def ensure_table(self, table: TableDefinition) -> None:
        """Create the table (and, for Glue, its database) if missing; if it exists with other
        columns or location, update it to `table`. Partitions are left as they are."""

    @abstractmethod
    def table(self, name: str) -> TableDefinition | None: ...

    @abstractmethod
    def tables(self) -> list[str]:
        """Table names, sorted."""

    @abstractmethod
    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        """Point partition `dt` of `table` (which must exist) at `location`, set from
        publication `seq`: create it if missing, replace it if its `seq` is lower. Returns True
        if it changed; False (nothing written) if it already has `seq` or a higher one."""

    @abstractmethod
    def partition(self, table: str, dt: str) -> CatalogPartition | None: ...

    @abstractmethod
    def partitions(self, table: str) -> list[CatalogPartition]:
        """Every partition of `table`, by dt."""
