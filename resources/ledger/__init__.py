"""The ledger: which small objects make up each table partition (Prism's model;
docs/architecture.md).

Holds the model (`model`: small objects, table partitions, commit records), the merge model
(`merge`: ranges chained from the `(None, 0)` sentinel, merge commits, when a merge job is due)
and the `Ledger` interface (`ledger`) that store backends implement beside `LeaseStore`.
May import: `resources.coordination` (a commit is fenced by a lease token), `resources.errors`.
Never Dagster, boto3 or Spark.
"""
