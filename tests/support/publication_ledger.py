"""Helpers the publication ledger's suites share: a publication as a publisher asks the ledger
to record it, and a partition's current publication as stored."""

from __future__ import annotations

from resources.ledger.publication import Publication
from resources.stores.base import CoordinationStore
from tests.support.merge_ledger import DT, TABLE


def publication(
    upper: int, *, switched: bool = False, token: str = "t", dt: str = DT
) -> Publication:
    """What a publisher asks to record; `seq` and `published_at_ms` are the ledger's to set."""
    kind = "merged" if switched else "live"
    return Publication(
        table=TABLE,
        dt=dt,
        seq=0,
        switched=switched,
        upper=upper,
        location=f"file:///lake/{TABLE}/_manifests/dt={dt}/{kind}-{upper}-{token}/",
        files=upper,
        rows=10 * upper,
        bytes=1000 * upper,
        published_at_ms=0,
    )


def published_state(store: CoordinationStore) -> tuple[int, bool, int, int]:
    """The test partition's (current_manifest_version, switched, published_upper,
    publication_seq): everything a publication changes on the partition row."""
    p = store.table_partition(TABLE, DT)
    return (p.current_manifest_version, p.switched, p.published_upper, p.publication_seq)
