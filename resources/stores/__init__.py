"""Store backends: SQLite (embedded default) and DynamoDB, each one `CoordinationStore`.

Holds: `sqlite/` and `dynamodb/` (each implements `LeaseStore` and `Ledger` on one connection
or client), `settings` (the store settings, declared once), `opening` (create a store, or
only open an existing one) and `build_store` / `open_existing_store`.
May import: `resources.coordination`, `resources.ledger`, `resources.errors`, `resources.retry`,
`resources.settings`. Never Dagster, the CLI or `coordination_assets` (import-linter checks).
"""

from __future__ import annotations

from typing import Any

from resources.coordination.items import Clock
from resources.stores.base import CoordinationStore
from resources.stores.opening import Opening
from resources.stores.settings import StoreSettings

__all__ = ["CoordinationStore", "Opening", "build_store", "open_existing_store"]


def build_store(
    settings: StoreSettings, clock: Clock | None = None, *, opening: Opening = Opening.CREATE
) -> CoordinationStore:
    """Validate, then construct the backend. Nothing touches the store before validation;
    unless `opening` is `Opening.CREATE`, nothing is created (`StoreNotFoundError`)."""
    settings.validate()
    extra: dict[str, Any] = {} if clock is None else {"clock": clock}
    if settings.backend == "sqlite":
        from resources.stores.sqlite.store import SqliteLeaseStore

        return SqliteLeaseStore(
            settings.resolved_sqlite_path(),
            partition_prefix=settings.partition_prefix,
            ttl_seconds=settings.ttl_seconds,
            opening=opening,
            location=settings.location(),
            **extra,
        )
    from resources.stores.dynamodb.store import DynamoDbLeaseStore

    return DynamoDbLeaseStore(settings, opening=opening, **extra)


def open_existing_store(
    settings: StoreSettings, clock: Clock | None = None, *, read_only: bool = True
) -> CoordinationStore:
    """The configured store as it is, for commands that look rather than run: raises
    `StoreNotFoundError` naming where it looked (the SQLite path and the variable that set
    it, or the table, region and endpoint) instead of creating an empty one."""
    return build_store(
        settings, clock, opening=Opening.READ_ONLY if read_only else Opening.EXISTING
    )
