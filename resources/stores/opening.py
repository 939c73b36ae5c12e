"""How a command opens the store: create what is missing, or only use what exists.

A run creates its store (the SQLite file and schema, the DynamoDB table): the embedded default
needs no setup. A command that only looks — `leasehold status`, `leasehold check` — must not:
started in the wrong directory, or with a table name mistyped, it would create an empty store
and report "nothing there" about data that is somewhere else. Those open the store as it is
and fail with `StoreNotFoundError` naming where they looked.
"""

from __future__ import annotations

import enum


class Opening(enum.Enum):
    """How a store is opened: created when missing, required to exist, or read-only."""

    CREATE = "create"
    """Create the file and schema, or the table, when missing (and check an existing one)."""
    EXISTING = "existing"
    """The store must exist; writes allowed (`leasehold purge-expired`)."""
    READ_ONLY = "read_only"
    """The store must exist; opened for reading only where the backend can (SQLite)."""
