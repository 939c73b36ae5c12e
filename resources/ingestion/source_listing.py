"""A stream's source, listed as lease partition keys: the one mapping discovery and checks share.

A listed object's key *is* its source partition key, the key of its lease item (the Dagster
partition key is derived from that one, `partition_keys`). Discovery lists after its cursor
through a `Lister`; the completeness check pages through all of it with the same lister, so
the two can never disagree about which key an object has.
"""

from __future__ import annotations

from collections.abc import Iterator

from resources.ingestion.discovery import Lister
from resources.objects.base import ObjectStore


def source_lister(source: ObjectStore) -> Lister:
    """List `source` in key order after a cursor; the new cursor is the last key listed."""

    def list_after(after: str | None, limit: int) -> tuple[list[str], str | None]:
        keys = [o.key for o in source.list_after(after, limit)]
        return keys, keys[-1] if keys else after

    return list_after


def listing_pages(lister: Lister, page_size: int = 1000) -> Iterator[list[str]]:
    """Every key the lister has, from the first, one page at a time (a whole listing at
    once would hold millions of keys): until a page comes back empty."""
    cursor: str | None = None
    while True:
        keys, cursor = lister(cursor, page_size)
        if not keys:
            return
        yield keys
