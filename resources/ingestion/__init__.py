"""Ingestion without Dagster: discovery, the exactly-once runner, the Spark source reader, checks.

Holds `work_units` (a lease item's objects: how a listing is cut into units, and which unit
holds a listed object), `discovery` (list after a cursor, create work units, plan range runs),
`reconciliation` (objects behind the cursor), `runner` (`IngestionRunner`: the commit protocol
of docs/architecture.md over chunks of units) and its parts `unit_commit` (one unit's commit),
`large_objects` (large objects chunk by chunk), `outcomes` (`PartitionOutcome`) and
`unit_progress` (a unit's progress fields); `batch_results` (what the reader hands the
runner: `SourceBatchResult`, `StagedFile`), `source_reader` (one
Spark read per chunk) and what it is built from: `spark_rows` (the rows of a read, off Spark),
`schema_following` (the schema followed as it reads), `read_plan` (the Spark expressions),
`source_files` (local objects before Spark sees them, and chunks of large ones),
`table_objects` (Arrow rows cut into one Parquet object per unit and date) and `quarantine`
(bad records);
`checks` (rows reconcile, unique ids, unleased source objects) and `check_suite` (every check
as one registry, for Dagster and `leasehold check`), `source_listing` (a source listed as lease
partition keys), `partition_keys` (source key <-> Dagster partition key) and `sample_data`.
May import: `resources.coordination`, `resources.ledger`, `resources.stores`,
`resources.objects`, `resources.spark`, the shared modules; pyspark and pyarrow. Never Dagster.
"""
