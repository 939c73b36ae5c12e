"""Catalogs: where query engines look a table partition up (docs/architecture.md).

Holds `base` (the `Catalog` interface: tables with their schema, partitions `dt=...` whose
location is a manifest version's `symlink/` directory and whose `seq` only ever grows;
`TableDefinition`, `CatalogPartition`, `CatalogError`, Hive column types), `local` (the
embedded default: one JSON file under the data directory, written atomically under a file
lock), `glue` (AWS Glue through boto3; `glue_items`: its names, tables and partitions),
`settings` (`CatalogSettings`, which one and where), `target` (`PublicationTarget`, what
publication switches partitions through), `hive_target` (`HiveManifestsTarget`: Hive partitions
of a `Catalog`), `iceberg` (`IcebergTarget`: Iceberg tables through pyiceberg, one snapshot per
switch) and `opening` (`catalog_for`, `target_for`).

May import: `resources.retry`, `resources.settings`, `resources.errors`; boto3, pyiceberg
(`iceberg` only), pyarrow. Never Dagster, the ledger or the stores: a catalog only records what
the publisher decided.
"""
