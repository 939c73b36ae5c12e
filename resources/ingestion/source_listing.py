"""A stream's source, listed as lease partition keys: the one mapping discovery and checks share.

A listed object's key is what a work unit lists it by (a unit is keyed by its first object's
key; the Dagster partition key is derived from that one, `partition_keys`). Discovery lists
after its cursor through a `Lister`; reconciliation and the completeness check page through all
of it with the same lister, so they can never disagree about which key an object has.
"""

from __future__ import annotations

from collections.abc import Iterator

from resources.ingestion.discovery import ListedObject, Lister
from resources.objects.base import ObjectStore


def source_lister(source: ObjectStore) -> Lister:
    """List `source` in key order after a cursor; the new cursor is the last key listed."""

    def list_after(after: str | None, limit: int) -> tuple[list[ListedObject], str | None]:
        listed = [ListedObject(o.key, o.size, o.etag) for o in source.list_after(after, limit)]
        return listed, listed[-1].key if listed else after

    return list_after


def listing_pages(
    lister: Lister, page_size: int = 1000, after: str | None = None
) -> Iterator[list[str]]:
    """Every key the lister has after `after` (None: from the first), one page at a time (a
    whole listing at once would hold millions of keys): until a page comes back empty."""
    cursor = after
    while True:
        listed, cursor = lister(cursor, page_size)
        if not listed:
            return
        yield [o.key for o in listed]
