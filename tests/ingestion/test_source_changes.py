"""Listing discovery and a source object rewritten in place, on both store backends: the
reconciliation pass sees its new fingerprint (whatever its size), records the change once, and
ignores it or makes its new version a unit of its own, once (`on_change`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from resources.coordination.source_changes import APPENDED, PENDING, REPLACED
from resources.ingestion.discovery import Discovery
from resources.ingestion.reconciliation import ReconcileState, ReconcileStep, Reconciliation
from resources.ingestion.source_changes import ChangeHandler
from resources.ingestion.source_listing import source_lister
from resources.ingestion.work_units import (
    UnitObject,
    WorkUnit,
    replaced_by,
    unit_of,
    version_unit_key,
)
from resources.objects.local import LocalObjectStore
from resources.stores.base import CoordinationStore

STREAM = "events"
KEYS = ["2026/a.jsonl", "2026/b.jsonl", "2026/c.jsonl"]


@pytest.fixture
def source(tmp_path: Path) -> LocalObjectStore:
    root = tmp_path / "source"
    for key in KEYS:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b'{"id": "1"}\n')
    return LocalObjectStore(root)


def discover(store: CoordinationStore, source: LocalObjectStore) -> str | None:
    """Every object made a unit of its own; returns the discovery cursor."""
    found = Discovery(store, STREAM, source_lister(source), "node-a").discover(None)
    assert found.created == len(KEYS)
    return found.cursor


def rewrite(source: LocalObjectStore, key: str, body: bytes) -> str:
    """New content under `key`, its mtime a second later; returns its new fingerprint."""
    path = source.root / key
    before = path.stat().st_mtime_ns
    path.write_bytes(body)
    os.utime(path, ns=(before + 10**9, before + 10**9))
    info = source.info(key)
    assert info is not None
    return info.etag


def reconcile(
    store: CoordinationStore, source: LocalObjectStore, cursor: str | None, on_change: str
) -> ReconcileStep:
    """One whole pass (due at once)."""
    return Reconciliation(
        store, STREAM, source_lister(source), interval_s=0, max_objects=100, on_change=on_change
    ).step(ReconcileState(), cursor)


@pytest.mark.parametrize("body", [b'{"id": "2"}\n', b'{"id": "22"}\n'], ids=["same", "other"])
def test_ignore_records_a_rewrite_of_any_size_once_and_reads_nothing(
    store: CoordinationStore, source: LocalObjectStore, body: bytes
) -> None:
    cursor = discover(store, source)
    assert reconcile(store, source, cursor, "ignore").changed == 0  # nothing changed yet
    etag = rewrite(source, KEYS[1], body)
    for _ in range(2):  # seen again: the same record, nothing made
        step = reconcile(store, source, cursor, "ignore")
        assert (step.changed, step.created) == (1, [])
    (change,) = store.source_changes(store.source_identifier(STREAM))
    assert (change.key, change.etag, change.size, change.state) == (
        KEYS[1],
        etag,
        len(body),
        PENDING,
    )
    assert (change.unit, change.was_size) == (KEYS[1], 12)
    assert len(list(store.iter_items(store.source_identifier(STREAM)))) == len(KEYS)


@pytest.mark.parametrize("body", [b'{"id": "2"}\n', b'{"id": "22"}\n'], ids=["same", "other"])
def test_append_makes_the_new_version_a_unit_once(
    store: CoordinationStore, source: LocalObjectStore, body: bytes
) -> None:
    sid = store.source_identifier(STREAM)
    cursor = discover(store, source)
    etag = rewrite(source, KEYS[1], body)
    step = reconcile(store, source, cursor, "append")
    version = version_unit_key(KEYS[1], etag)
    assert (step.changed, step.created) == (1, [version])
    item = store.get(sid, version)
    assert item is not None
    assert unit_of(item).objects == (UnitObject(KEYS[1], len(body), etag),)
    assert [c.state for c in store.source_changes(sid)] == [APPENDED]
    # The next pass finds the version held: no change, nothing made.
    again = reconcile(store, source, cursor, "append")
    assert (again.changed, again.created) == (0, [])
    # Rewritten once more: another version, another unit.
    newer = rewrite(source, KEYS[1], b'{"id": "3"}\n')
    assert reconcile(store, source, cursor, "append").created == [version_unit_key(KEYS[1], newer)]


def test_replace_makes_a_unit_that_names_the_unit_it_replaces(
    store: CoordinationStore, source: LocalObjectStore
) -> None:
    sid = store.source_identifier(STREAM)
    cursor = discover(store, source)
    etag = rewrite(source, KEYS[2], b'{"id": "7"}\n')
    version = version_unit_key(KEYS[2], etag)
    assert reconcile(store, source, cursor, "replace").created == [version]
    item = store.get(sid, version)
    assert item is not None and replaced_by(item.progress) == (KEYS[2], KEYS[2])
    assert [c.state for c in store.source_changes(sid)] == [REPLACED]
    # Rewritten again: the next replacement replaces the last version's unit.
    newer = rewrite(source, KEYS[2], b'{"id": "77"}\n')
    (again,) = reconcile(store, source, cursor, "replace").created
    item = store.get(sid, again)
    assert again == version_unit_key(KEYS[2], newer)
    assert item is not None and replaced_by(item.progress) == (version, KEYS[2])


def test_a_pending_change_is_appended_once_the_stream_appends(
    store: CoordinationStore, source: LocalObjectStore
) -> None:
    cursor = discover(store, source)
    etag = rewrite(source, KEYS[0], b'{"id": "9"}\n')
    assert reconcile(store, source, cursor, "ignore").created == []
    assert reconcile(store, source, cursor, "append").created == [version_unit_key(KEYS[0], etag)]
    # A handler that died after creating the unit, before recording it: done again, harmlessly.
    sid = store.source_identifier(STREAM)
    (change,) = store.source_changes(sid)
    store.set_change_state(sid, change, PENDING)
    made = ChangeHandler(store, STREAM, "append").handle([change])
    assert made == [version_unit_key(KEYS[0], etag)]
    assert [c.state for c in store.source_changes(sid)] == [APPENDED]
    assert len(list(store.iter_items(sid))) == len(KEYS) + 1


def test_a_unit_recorded_without_fingerprints_compares_sizes(
    store: CoordinationStore, source: LocalObjectStore
) -> None:
    sid = store.source_identifier(STREAM)
    old = [WorkUnit(k, (UnitObject(k, 12),)) for k in KEYS]  # as written before fingerprints
    store.create_partitions(sid, KEYS, progress_states=[u.progress_state() for u in old])
    rewrite(source, KEYS[0], b'{"id": "2"}\n')  # same size: not told apart
    assert reconcile(store, source, KEYS[-1], "ignore").changed == 0
    rewrite(source, KEYS[0], b'{"id": "22"}\n')
    assert reconcile(store, source, KEYS[-1], "ignore").changed == 1
