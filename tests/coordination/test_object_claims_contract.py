"""Object claims, on both store backends: written in batches, replaced by key, read by key,
apart from the lease items (no status, no TTL, no lease reader sees them)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from resources.coordination.items import ATTR
from resources.coordination.object_claims import ObjectClaim
from resources.stores.base import CoordinationStore
from resources.stores.sqlite.store import SqliteLeaseStore
from tests.support.fakes import FakeClock, StoreFactory
from tests.support.ttl_sweep import sweep_expired

pytestmark = pytest.mark.contract


def test_claims_are_written_in_batches_and_read_by_key(store: CoordinationStore) -> None:
    sid = store.source_identifier("events")
    claims = [ObjectClaim(f"k/{i:04d}", f"k/{i - i % 100:04d}", i) for i in range(260)]
    store.claim_objects(sid, claims)
    asked = [f"k/{i:04d}" for i in range(250, 270)] + ["k/0000", "k/0000", "odd | key ü"]
    found = store.object_claims(sid, asked)
    assert sorted(found) == sorted({f"k/{i:04d}" for i in range(250, 260)} | {"k/0000"})
    assert found["k/0259"] == ObjectClaim("k/0259", "k/0200", 259)
    assert store.object_claims(store.source_identifier("other"), ["k/0000"]) == {}
    assert store.object_claims(sid, []) == {}


def test_a_claim_is_replaced_and_never_seen_as_a_lease_item(store: CoordinationStore) -> None:
    sid = store.source_identifier("events")
    store.claim_objects(sid, [ObjectClaim("a b|c", "x", 1)])
    store.claim_objects(sid, [ObjectClaim("a b|c", "y", 2)])
    assert store.object_claims(sid, ["a b|c"]) == {"a b|c": ObjectClaim("a b|c", "y", 2)}
    assert list(store.iter_items(sid)) == []
    assert store.missing_keys(sid, ["a b|c"]) == ["a b|c"]
    assert sid not in store.source_identifiers()


def test_claims_outlive_the_ttl(make_store: StoreFactory, clock: FakeClock) -> None:
    store = make_store(ttl="PT1S")
    sid = store.source_identifier("events")
    store.create_partitions(sid, ["k"])
    store.claim_objects(sid, [ObjectClaim("k", "k", 3)])
    clock.advance(3600)
    assert sweep_expired(store) == 1  # the lease item, not the claim
    assert store.object_claims(sid, ["k"]) == {"k": ObjectClaim("k", "k", 3)}


def test_a_claim_keeps_its_fingerprint_and_one_without_reads_as_unknown(
    store: CoordinationStore,
) -> None:
    sid = store.source_identifier("events")
    store.claim_objects(sid, [ObjectClaim("k", "k", 3, "abc123"), ObjectClaim("old", "old", 4)])
    found = store.object_claims(sid, ["k", "old"])
    assert found == {"k": ObjectClaim("k", "k", 3, "abc123"), "old": ObjectClaim("old", "old", 4)}
    assert found["old"].etag == ""  # unknown: sizes are compared


def test_a_sqlite_file_whose_claims_predate_fingerprints_reads_and_upgrades(
    tmp_path: Path,
) -> None:
    path = tmp_path / "old.db"
    store = SqliteLeaseStore(path)
    sid = store.source_identifier("events")
    db = sqlite3.connect(path)
    db.execute(  # the table as it was before fingerprints
        f"CREATE TABLE object_claims ({ATTR['sid']} TEXT NOT NULL, {ATTR['key']} TEXT NOT NULL, "
        f"unit TEXT NOT NULL, size INTEGER NOT NULL, PRIMARY KEY ({ATTR['sid']}, {ATTR['key']}))"
    )
    db.execute("INSERT INTO object_claims VALUES (?, 'a', 'a', 7)", (sid,))
    db.commit()
    db.close()
    assert store.object_claims(sid, ["a"]) == {"a": ObjectClaim("a", "a", 7)}
    store.claim_objects(sid, [ObjectClaim("b", "b", 1, "e1")])
    assert store.object_claims(sid, ["a", "b"]) == {
        "a": ObjectClaim("a", "a", 7),
        "b": ObjectClaim("b", "b", 1, "e1"),
    }
