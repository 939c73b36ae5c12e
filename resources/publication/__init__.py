"""Publication without Dagster: manifests, switching, readers and garbage collection
(docs/architecture.md).

Holds `manifest` (a version's two immutable manifests: Redshift Spectrum JSON and Hive symlink
text, and where a version's files go), `publisher` (`Publisher`: for each table partition whose
publication is due, build its manifest from the ledger, write it under a new path, record it in
the ledger, point the catalog at it; repair a catalog that lags), `reader` (resolve a partition
through the catalog and its manifest, as an external engine does), `garbage` (`GarbageCollector`:
what no retained manifest and no ledger state needs, after the safety delay), `deduped_files`
(what a publication serves under a dedupe policy, and its key index), `current_keys` (a date's
current publication as a merge uses it) and `checks` (the publication checks' registry).

May import: `resources.catalog`, `resources.stores`, `resources.objects`, `resources.ledger`,
`resources.coordination`, the shared modules; pyarrow. Never Dagster, never
`resources.ingestion` or `resources.compaction` (siblings).
"""
