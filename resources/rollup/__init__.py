"""Exactly-once rollups beside the tables: Storm's transactional and opaque rules (issue 22).

Holds `aggregates` (what a rollup computes per key: count, sum, min, max, and how two partial
results combine), `state` (one key's stored state and the rule that applies a batch's partial
result to it, by the batch's transaction id), `batches` (a table partition's committed ids
cut into batches, and `StrictOrder`: their results commit in txid order, a failed commit's
successors computed again) and `spec` (a rollup as `streams.yaml` declares it). Pure domain,
so the rules are tested without a store, Spark or Dagster; the store items, the runner and the
Dagster asset build on them. A shared module's layer: the stream configuration holds its
rollups' declarations.
May import: `resources.errors`. Never Dagster, boto3 or Spark.
"""
