"""The ledger: which small objects make up each table partition (Prism's model, ARCHITECTURE §6).

Holds the model (`model`: small objects, table partitions, commit records) and the `Ledger`
interface (`ledger`) that store backends implement beside `LeaseStore`. Merge ranges, merge
jobs and manifest versions will live here.
May import: `resources.coordination` (a commit is fenced by a lease token), `resources.errors`.
Never Dagster, boto3 or Spark.
"""
