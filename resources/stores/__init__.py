"""Store backends: SQLite (embedded default) and DynamoDB, each one `CoordinationStore`.

Holds: `sqlite/` and `dynamodb/` (each implements `LeaseStore` and `Ledger` on one connection
or client), `settings` (the store settings, declared once) and `build_store`.
May import: `resources.coordination`, `resources.ledger`, `resources.errors`, `resources.retry`,
`resources.settings`. Never Dagster, the CLI or `coordination_assets` (import-linter checks).
"""

from __future__ import annotations

from resources.coordination.items import Clock
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings


def build_store(settings: StoreSettings, clock: Clock | None = None) -> CoordinationStore:
    """Validate, then construct the backend. Nothing touches the store before validation."""
    settings.validate()
    extra = {} if clock is None else {"clock": clock}
    if settings.backend == "sqlite":
        from resources.stores.sqlite.store import SqliteLeaseStore

        return SqliteLeaseStore(
            settings.resolved_sqlite_path(),
            partition_prefix=settings.partition_prefix,
            ttl_seconds=settings.ttl_seconds,
            **extra,
        )
    from resources.stores.dynamodb.store import DynamoDbLeaseStore

    return DynamoDbLeaseStore(settings, **extra)
