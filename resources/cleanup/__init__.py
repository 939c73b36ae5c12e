"""Source clean-up without Dagster: archiving or deleting source objects once their rows are
published (docs/operations.md, "Source clean-up").

Holds `planner` (pure: which COMPLETED work units' objects may go now, and how far the cursor
may move), `published` (whether a unit's rows are in the table's published versions, read from
the ledger), `remover` (archive or delete one unit's objects, idempotently) and `cleaner`
(`SourceCleaner`: one bounded, resumable pass under the stream's `cleanup` global-state lease).
Its state's names are in `resources/coordination/cleanup_state.py`, where the checks and
status read them.

May import: `resources.ingestion` (a unit's objects), `resources.stores`, `resources.objects`,
`resources.ledger`, `resources.coordination`, the shared modules. Never Dagster.
"""
