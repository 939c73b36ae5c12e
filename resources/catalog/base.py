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

A table's columns only grow. A stream's schema gains columns over time (its versions,
docs/schema-evolution.md) and several publishers, each holding the version it read, write the
same table: `ensure_table` and `add_columns` keep every column the table has, by name, and
append the ones it lacks, so a publisher holding an older version that writes last cannot take
away a column a newer one added. A column the table holds with another type is never retyped:
`ColumnTypeConflictError` names it. Both are read-modify-write steps made safe for concurrent
writers (the local file under its lock, Glue with the table's `VersionId`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from resources.errors import ComponentUnreachableError, LeaseholdError

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


class CatalogUnreachableError(CatalogError, ComponentUnreachableError):
    """A catalog call failed after its bounded retries (endpoint down, throttling): the message
    names the database, where it is, and the call."""

    component = "the catalog"


class ColumnTypeConflictError(CatalogError):
    """The table holds a column with another type than asked for: never retyped."""


@dataclass(frozen=True)
class Column:
    """A table column as the catalog holds it: its name and Hive type."""

    name: str
    type: str
    """A Hive type (`HIVE_TYPES` values)."""


@dataclass(frozen=True)
class TableDefinition:
    """A table as the catalog holds it: name, columns in order, root URL."""

    name: str
    columns: tuple[Column, ...]
    location: str
    """The table's root URL (where its objects live); partitions are located by manifests."""


@dataclass(frozen=True)
class CatalogPartition:
    """A date partition in the catalog: where its manifest version is, and the publication it was
    set from."""

    table: str
    dt: str
    location: str
    """The manifest version's `symlink/` directory URL (ends with `/`)."""
    seq: int
    """The publication `seq` this location was set from."""


class Catalog(ABC):
    """Tables and their partitions' manifest locations: a JSON file (`LocalCatalog`) or the
    Glue Data Catalog (`GlueCatalog`). Every write is idempotent.

    Errors, as each method's "Raises" names them: `CatalogError` names the catalog and what
    failed — it cannot be read or written (Glue: still failing after the bounded retry; the
    file: unreadable or corrupt), or a table the call needs does not exist —, and
    `ColumnTypeConflictError` (a `CatalogError`) refuses to retype a column."""

    @abstractmethod
    def ensure_table(self, table: TableDefinition) -> None:
        """Create the table (and, for Glue, its database) if missing. If it exists: set its
        location to `table`'s and its columns to its own followed by those of `table` it lacks
        (`grown_columns`: none removed, whatever `table` holds). Partitions are left as they
        are. Idempotent. Raises `ColumnTypeConflictError` (nothing written) when the table
        holds one of `table`'s columns with another type, `CatalogError` when the catalog
        cannot be read or written."""

    @abstractmethod
    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        """Append to `table` (which must exist) the `columns` it lacks, by name, in their
        order; never drop, reorder or retype one. Returns the columns appended (none: nothing
        written). Idempotent, and safe against another writer changing the table at the same
        moment (neither's columns are lost). Raises `ColumnTypeConflictError` naming each
        column the table holds with another type (nothing written), `CatalogError` when the
        table does not exist or the catalog cannot be read or written."""

    @abstractmethod
    def table(self, name: str) -> TableDefinition | None:
        """The table as the catalog holds it (location and columns, in order), None if there
        is no such table. Read-only. Raises `CatalogError` when the catalog cannot be
        read."""

    @abstractmethod
    def tables(self) -> list[str]:
        """Table names, sorted (Glue: the managed ones). Read-only. Raises `CatalogError`
        when the catalog cannot be read."""

    @abstractmethod
    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        """Point partition `dt` of `table` (which must exist) at `location`, set from
        publication `seq`: create it if missing, replace it if its `seq` is lower. Returns True
        if it changed; False (nothing written) if it already has `seq` or a higher one, so a
        replayed or late publication never moves a partition back. Raises `CatalogError` when
        the table does not exist or the catalog cannot be read or written."""

    @abstractmethod
    def partition(self, table: str, dt: str) -> CatalogPartition | None:
        """Partition `dt` of `table` (its location and the publication `seq` it was set
        from), None if it has none. Read-only. Raises `CatalogError` when the table does not
        exist (a missing table is an error, not a missing partition) or the catalog cannot be
        read."""

    @abstractmethod
    def partitions(self, table: str) -> list[CatalogPartition]:
        """Every partition of `table`, by dt. Read-only. Raises `CatalogError` when the table
        does not exist or the catalog cannot be read."""


def grown_columns(
    table: str, existing: Sequence[Column], wanted: Sequence[Column]
) -> tuple[Column, ...]:
    """`existing` followed by the `wanted` columns it lacks (by name, in `wanted`'s order): a
    table's columns after it was asked for `wanted`. Raises `ColumnTypeConflictError` naming
    every column of `wanted` that `existing` holds with another type."""
    held = {c.name: c.type for c in existing}
    conflicts = [c for c in wanted if held.get(c.name, c.type) != c.type]
    if conflicts:
        raise ColumnTypeConflictError(
            f"table {table!r} holds "
            + ", ".join(f"column {c.name!r} as {held[c.name]}, not {c.type}" for c in conflicts)
            + " (a column is never retyped)"
        )
    new: list[Column] = []
    for c in wanted:
        if c.name not in held:
            held[c.name] = c.type
            new.append(c)
    return (*existing, *new)
