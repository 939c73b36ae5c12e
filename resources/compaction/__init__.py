"""Compaction without Dagster: closing table partitions, planning and running merges.

Holds `closing` (when a table partition closes: its day ended in the stream's time zone plus
`merge.close_grace`), `merge_planner` (`MergePlanner`: which small objects one merge takes, and
whether it rewrites the open range or opens a new one), `merge_writer` (the merge itself, in
pyarrow when it fits in memory, else on Spark's DataFrame API: exact ledger URLs in, one object
sorted by event time out),
`merge_runner` (`MergeRunner`: the job lease with its heartbeats, the merge and its fenced
commit, for many table partitions per run) and `checks` (the compaction checks' registry).
May import: `resources.coordination`, `resources.ledger`, `resources.stores`,
`resources.objects`, `resources.spark`, the shared modules; pyspark and pyarrow. Never Dagster,
never `resources.ingestion` (a sibling).
"""
