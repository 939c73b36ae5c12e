"""Rollups computed: batches' partial aggregates (Spark, or pyarrow for a small input),
committed to the rollup state in txid order under the rollup job's lease, published as a small
table, and checked against a full recomputation from the published table.

Holds: `partials` (what a batch contributes per key, and the engines), `runner`
(`RollupRunner`: plan, compute, commit; `due_dates`), `rollup_table` (the rollup's table:
manifest versions and the catalog), `checks` (`rollups_exact`).
May import: everything below the Dagster resources (the ingestion, compaction and publication
layers included: the check reads the published table as an engine does, the table is
published as the stream's is). Never Dagster, the CLI or `coordination_assets` (import-linter
checks).
"""
