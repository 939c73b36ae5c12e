"""Ingestion without Dagster: discovery, the exactly-once runner, the Spark source reader, checks.

Holds `work_units` (a lease item's objects: how a listing is cut into units, and which unit
holds a listed object), `discovery` (list after a cursor, create work units, plan range runs),
`reconciliation` (objects behind the cursor), `runner` (`IngestionRunner`: the commit protocol
of docs/architecture.md over chunks of units) and its parts `unit_commit` (one unit's commit),
`large_objects` (large objects chunk by chunk), `outcomes` (`PartitionOutcome`) and
`unit_progress` (a unit's progress fields); `batch_results` (what the reader hands the runner:
`SourceBatchResult`, `StagedFile`, `ChunkRead`); the reader, whose Spark tasks do the I/O:
`task_reader` (driver: plans, runs the job, follows the schema, reads metadata back),
`split_plan` (units cut into parts, parts packed into tasks), `line_census` (a large object's
byte ranges cut at line ends), `split_task` (executor: fetch, parse, write straight to the
stores), `record_parser` with `record_lines`, `record_values`, `record_csv`, `record_rescue`
(bytes to rows and quarantine records by Spark's JSON rules, no Spark), `csv_records` (CSV
record splitting), `field_scan` (fields outside the schema), `table_objects` (one table
object), `source_files` (a large object's chunks), `executor_probe` (the doctor's task);
`checks` (rows reconcile, unique ids, unleased source objects) and `check_suite` (every check
as one registry, for Dagster and `leasehold check`), `source_listing` (a source listed as lease
partition keys), `partition_keys` (source key <-> Dagster partition key) and `sample_data`.
May import: `resources.coordination`, `resources.ledger`, `resources.stores`,
`resources.objects`, `resources.spark`, the shared modules; pyspark and pyarrow. Never Dagster.
"""
