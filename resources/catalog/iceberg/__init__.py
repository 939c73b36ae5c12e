"""Iceberg tables as a publication target (`table_format: iceberg`, issue 33).

Holds `catalogs` (opening pyiceberg's SQL catalog on SQLite, its Glue or REST catalog from
`CatalogSettings`, and `IcebergCatalog.call`: bounded retries, then `CatalogUnreachableError`),
`schema` (Hive column types <-> Iceberg types; a table's schema, `dt` partition spec and
properties), `files` (a data file's `DataFile` entry from its Parquet footer, in its `dt`
partition), `switching` (what one switch commits, decided on the table as it is now; which
snapshots expire with it), `history` (snapshots, time travel, reads), `target`
(`IcebergTarget`, the `PublicationTarget`) and `internals` (the only module that uses
pyiceberg's private API, written against pyiceberg 0.12).

May import: `resources.catalog` (`base`, `target`, `settings`, `glue_items`, `glue`),
`resources.retry`, `resources.settings`, `resources.errors`; pyiceberg, pyarrow, boto3. Never
Dagster, the ledger or the stores.
"""
