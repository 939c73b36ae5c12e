"""`PublicationTarget`: where publication makes a table partition current for query engines.

A stream's `table_format` chooses one (docs/concepts/table-formats.md):
- `manifests` (`HiveManifestsTarget`): each date a Hive partition of the catalog (the local file
  or Glue) pointing at a manifest version's `symlink/` directory; partitions switch one by one.
- `iceberg` (`IcebergTarget`, `resources.catalog.iceberg`): an Apache Iceberg table (SQL
  catalog on SQLite, Glue or a REST catalog); the dates one publication run switches change in
  ONE snapshot, with history.

Both hold, per date, the publication `seq` that is current, and never replace it with a lower
one (a slow or replayed publisher cannot move a date back), so `switch` is idempotent. The
files a switch names are already written (small objects, merged objects) and are never
rewritten: a switch changes only metadata. Leasehold's own manifest version of each
publication is written under both formats: it is the ledger's record of what a publication
holds (garbage collection and the checks read it); under `iceberg` it is just not what engines
read.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from resources.catalog.base import Column, TableDefinition

MANIFESTS = "manifests"
ICEBERG = "iceberg"
TABLE_FORMATS = (ICEBERG, MANIFESTS)


@dataclass(frozen=True)
class PartitionFile:
    """A data file a partition is made of: its URL (the one form every writer uses: Iceberg
    compares paths as strings), size in bytes and rows."""

    url: str
    size: int
    rows: int


@dataclass(frozen=True)
class PartitionSwitch:
    """Make `files` the whole content of partition `dt`, as publication `seq`."""

    dt: str
    seq: int
    """The publication's `seq` (a rollup table: its state position); only ever grows per dt."""
    version_url: str
    """Leasehold's manifest version directory of this publication (ends with `/`)."""
    files: tuple[PartitionFile, ...]


@dataclass(frozen=True)
class PublishedPartition:
    """A date partition as the target serves it now."""

    table: str
    dt: str
    seq: int
    """The `seq` of the switch that made it current."""
    location: str
    """`manifests`: the manifest version's `symlink/` directory; `iceberg`: the table's root
    (an engine plans the date's files from the current snapshot)."""
    version_url: str = ""
    """Leasehold's manifest version directory of the publication served (ends with `/`; ""
    when the target does not know it)."""


@dataclass(frozen=True)
class TableSnapshot:
    """One committed snapshot of an Iceberg table (a `manifests` table keeps none)."""

    snapshot_id: int
    committed_at_ms: int
    operation: str
    """Iceberg's: `append`, `overwrite`, ..."""
    seqs: Mapping[str, int] = field(default_factory=dict)
    """dt -> seq of each date this snapshot switched (from its summary)."""
    summary: Mapping[str, str] = field(default_factory=dict)


class PublicationTarget(ABC):
    """A table's partitions as query engines read them. Every write is idempotent and safe
    against other writers doing the same at the same moment (other processes, other hosts).

    Errors: `CatalogError` (from `resources.catalog.base`) names the catalog and what failed —
    unreachable after bounded retries with jitter (`CatalogUnreachableError`), a table the call
    needs missing, a corrupt catalog —, `ColumnTypeConflictError` refuses to retype a column."""

    table_format: str
    """`iceberg` or `manifests`."""

    @abstractmethod
    def ensure_table(self, table: TableDefinition) -> None:
        """Create the table if missing (several processes creating it at once all succeed);
        if it exists, append the columns of `table` it lacks, by name (never drop, reorder or
        retype one). Partitions are left as they are. Raises `ColumnTypeConflictError`
        (nothing written), `CatalogError`."""

    @abstractmethod
    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        """Append to `table` (which must exist) the `columns` it lacks, by name, in order.
        Returns those appended (none: nothing written). Idempotent and safe against a
        concurrent writer (neither's columns are lost). Raises `ColumnTypeConflictError`,
        `CatalogError` (also when the table does not exist)."""

    @abstractmethod
    def table(self, name: str) -> TableDefinition | None:
        """The table's location and columns in order (`dt` is the partition key, not a
        column), None if there is no such table. Read-only. Raises `CatalogError`."""

    @abstractmethod
    def partitions(self, table: str) -> list[PublishedPartition]:
        """Every published partition of `table`, by dt. Read-only. Raises `CatalogError`
        (also when the table does not exist)."""

    @abstractmethod
    def partition(self, table: str, dt: str) -> PublishedPartition | None:
        """Partition `dt` as served now, None if it has none. Read-only. Raises
        `CatalogError` (also when the table does not exist)."""

    @abstractmethod
    def switch(
        self,
        table: str,
        switches: Sequence[PartitionSwitch],
        *,
        summary: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Make each switch's files the whole of its partition, where the partition's current
        `seq` is lower than the switch's (or it has none); a switch at or below the current
        `seq` is skipped. `iceberg`: every applied switch in ONE snapshot (with `summary` and
        the dts' seqs in its summary), retried on a concurrent commit (re-planned against the
        new head, bounded, with jitter); `manifests`: partition by partition. The table must
        exist. Returns the dts changed, sorted (none: nothing committed). Raises
        `CatalogError`."""

    def referenced_files(self, table: str) -> set[str] | None:
        """The URLs of every file the target's retained history still serves, which garbage
        collection must keep beyond what the ledger names; None when the target keeps no
        history of its own (`manifests`: a Hive partition serves only its current manifest,
        which the ledger records). Read-only. Raises `CatalogError`."""
        return None

    def metadata_prefix(self, table: str) -> str | None:
        """The URL prefix (ending with `/`) under the table's root where the target keeps its
        own metadata; None when it keeps none there. Garbage collection deletes a file under
        it only when `metadata_files` does not name it and it is older than the safety delay
        (a commit that never landed wrote it). Read-only. Raises `CatalogError`."""
        return None

    def metadata_files(self, table: str) -> set[str] | None:
        """The URLs of every metadata file the table's current state names (for Iceberg: the
        current metadata file and those its log names, each retained snapshot's manifest list
        and the manifests they name, statistics files); None when the target keeps no
        metadata of its own. Read-only. Raises `CatalogError` (never a partial set)."""
        return None
