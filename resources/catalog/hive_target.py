"""`HiveManifestsTarget`: `table_format: manifests` — each date a Hive partition of a `Catalog`
(the local catalog file or Glue) pointing at a manifest version's `symlink/` directory, read by
Athena, Trino and Presto through `SymlinkTextInputFormat` (docs/concepts/table-formats.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from resources.catalog.base import Catalog, CatalogPartition, Column, TableDefinition
from resources.catalog.target import (
    MANIFESTS,
    PartitionSwitch,
    PublicationTarget,
    PublishedPartition,
)

SYMLINK_DIR = "symlink/"
"""Where in a manifest version directory the Hive symlink manifest lives: the partition's
location (`resources.publication.manifest` writes it)."""


def symlink_location(version_url: str) -> str:
    """What a Hive partition points at: the version's `symlink/` directory."""
    return version_url + SYMLINK_DIR


class HiveManifestsTarget(PublicationTarget):
    """Publication through a Hive catalog's partitions: `switch` points each partition at its
    switch's manifest version, one partition after the other (a Hive catalog has no
    multi-partition commit); `Catalog.publish_partition` refuses a lower `seq`."""

    table_format = MANIFESTS

    def __init__(self, catalog: Catalog) -> None:
        self.catalog = catalog

    def ensure_table(self, table: TableDefinition) -> None:
        self.catalog.ensure_table(table)

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        return self.catalog.add_columns(table, columns)

    def table(self, name: str) -> TableDefinition | None:
        return self.catalog.table(name)

    def partitions(self, table: str) -> list[PublishedPartition]:
        return [_published(p) for p in self.catalog.partitions(table)]

    def partition(self, table: str, dt: str) -> PublishedPartition | None:
        found = self.catalog.partition(table, dt)
        return None if found is None else _published(found)

    def switch(
        self,
        table: str,
        switches: Sequence[PartitionSwitch],
        *,
        summary: Mapping[str, str] | None = None,
    ) -> list[str]:
        """`summary` is not kept: a Hive partition has no snapshot to hold it."""
        return sorted(
            s.dt
            for s in switches
            if self.catalog.publish_partition(table, s.dt, symlink_location(s.version_url), s.seq)
        )


def _published(partition: CatalogPartition) -> PublishedPartition:
    location = partition.location
    version = location[: -len(SYMLINK_DIR)] if location.endswith(SYMLINK_DIR) else ""
    return PublishedPartition(partition.table, partition.dt, partition.seq, location, version)
