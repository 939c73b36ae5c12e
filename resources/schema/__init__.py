"""A stream's schema as it evolves (docs/schema-evolution.md): versions, evolution modes,
field types.

Holds `columns` (a column and the types it may have), `versions` (a schema version — the full
column list, what it added, where it was first seen — and the rule that turns a request for
columns into the next version, or into the one that already holds them), `modes` (what a stream
does with a field its schema does not hold: `add`, `rescue`, `fail`, `ignore`) and
`field_types` (the column type of a new field from its values, with the widening rules),
`parquet_meta` (the version an object was written with, in its Parquet metadata) and `arrow`
(a version's columns as Arrow, and objects of several versions read by name against them). Pure
domain: the store items that record versions, the reader that finds new fields and every
consumer that follows versions build on it. A shared module's layer: the stream configuration
holds a stream's mode and first version.
May import: `resources.errors`, pyarrow. Never Dagster, boto3 or Spark.
"""
