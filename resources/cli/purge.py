"""`leasehold purge-expired`: delete the items whose TTL passed, where the backend does not
expire them itself (SQLite; DynamoDB's TTL does)."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from resources.stores import open_existing_store
from resources.stores.settings import settings_from_env


def cmd_purge(args: argparse.Namespace) -> int:
    store = open_existing_store(settings_from_env(), read_only=False)
    try:
        purge = getattr(store, "purge_expired", None)
        if purge is None:
            print(f"the {store.backend} backend expires items itself (DynamoDB TTL)")
            return 0
        print(f"deleted {purge()} expired items")
        return 0
    finally:
        store.close_store()


def add_purge_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    purge = add("purge-expired", help="delete items whose TTL passed (SQLite)")
    purge.set_defaults(fn=cmd_purge)
