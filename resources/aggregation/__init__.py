"""Rollups computed: batches' partial aggregates (Spark, or Arrow on one machine), committed
to the rollup state in txid order under the rollup job's lease, checked against a full
recomputation from the published table.

Holds: `partials` (what a batch contributes per key), `runner` (`RollupRunner`: plan, compute,
commit), `recompute` (the from-scratch reference and the check that compares).
May import: everything below the Dagster resources (the ingestion, compaction and publication
layers included: the check reads the published table as an engine does). Never Dagster, the
CLI or `coordination_assets` (import-linter checks).
"""
