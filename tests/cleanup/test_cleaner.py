"""A clean-up pass on both store backends (`[sqlite]`, `[dynamodb]` on the loopback server), a
local source and archive: only what is published and old enough goes, never a dead letter, the
cursor resumes and stops where it must, and passes are bounded and idempotent."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from resources.cleanup.cleaner import SourceCleaner
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.cleanup_state import CLEANUP_STATE, read_cleanup_state
from resources.ingestion.unit_progress import TABLE_PARTITIONS
from resources.ingestion.work_units import UnitObject, WorkUnit
from resources.ledger.model import SmallObject
from resources.ledger.publication import Publication
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.source_settings import ARCHIVE, DELETE, SourceCleanupSettings
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig, load_streams
from tests.support.fakes import FakeClock
from tests.support.pipeline_env import STREAM, write_streams

DAY = 86400.0


@pytest.fixture
def source(tmp_path: Path) -> ObjectStore:
    return object_store_for(f"file://{tmp_path / 'source'}")


@pytest.fixture
def archive(tmp_path: Path) -> ObjectStore:
    return object_store_for(f"file://{tmp_path / 'archive'}")


def config(tmp_path: Path, mode: str) -> StreamConfig:
    path = write_streams(tmp_path / "streams.yaml", f"file://{tmp_path / 'source'}", "file:///t")
    cleanup = SourceCleanupSettings(
        mode, "P1D", f"file://{tmp_path / 'archive'}" if mode == ARCHIVE else None
    )
    return dataclasses.replace(load_streams(path)[STREAM], source_cleanup=cleanup)


def cleaner(
    store: CoordinationStore,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
    mode: str = DELETE,
    per_pass: int = 100,
) -> SourceCleaner:
    return SourceCleaner(
        config(tmp_path, mode),
        store,
        source,
        archive if mode == ARCHIVE else None,
        objects_per_pass=per_pass,
        owner="cleaner-1",
        timeout_s=60,
    )


def ingest(
    store: CoordinationStore,
    source: ObjectStore,
    key: str,
    objects: int = 2,
    dts: tuple[str, ...] = ("2026-01-01",),
    fingerprints: bool = False,
) -> list[str]:
    """A unit of `objects` source objects, committed (one small object per date) and
    COMPLETED; returns its keys. Its objects are listed by size alone, as before fingerprints,
    unless `fingerprints`."""
    keys = [f"{key}/{i}.jsonl" for i in range(objects)]
    for k in keys:
        source.put_bytes(k, b'{"x": 1}\n')
    sid = store.source_identifier(STREAM)
    etags = [(source.info(k) or pytest.fail(k)).etag if fingerprints else "" for k in keys]
    unit = WorkUnit(keys[0], tuple(UnitObject(k, 9, e) for k, e in zip(keys, etags, strict=True)))
    store.create_partitions(sid, [unit.key], progress_states=[unit.progress_state()])
    item = store.acquire(sid, unit.key, "ingester", 60)
    small = [SmallObject(STREAM, dt, f"file:///t/{key}-{dt}.parquet", 100, 5) for dt in dts]
    progress = {
        **json.loads(unit.progress_state()),
        TABLE_PARTITIONS: [f"{STREAM}|{d}" for d in dts],
    }
    store.commit(item.token, small, progress_state=json.dumps(progress))
    return keys


def publish(store: CoordinationStore, dt: str = "2026-01-01") -> None:
    """Publish every id committed to `dt` so far (live)."""
    upper = store.table_partition(STREAM, dt).next_object_id - 1
    store.record_publication(
        Publication(STREAM, dt, 0, False, upper, f"file:///t/_manifests/{upper}/", upper, 5, 100, 0)
    )


def present(objects: ObjectStore) -> list[str]:
    return [o.key for o in objects.list_after(None, 1000)]


def test_only_published_units_go_once_after_has_passed(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    first = ingest(store, source, "a")
    publish(store)
    clock.advance(10)
    second = ingest(store, source, "b")  # committed after the publication: not published
    run = cleaner(store, tmp_path, source, archive)
    report = run.run_pass()
    assert report.units == 0 and report.waiting is None  # younger than `after`: not read
    assert present(source) == first + second
    clock.advance(DAY + 10)
    report = run.run_pass()
    assert present(source) == second, "the unit whose rows are not published stays"
    assert report.removed.deleted == 2 and report.waiting is not None
    assert report.waiting[0] == second[0] and "not published yet" in report.waiting[1]
    publish(store)
    report = run.run_pass()
    assert present(source) == [] and report.removed.deleted == 2
    state = read_cleanup_state(store, STREAM)
    assert (state.deleted, state.gone, state.bytes, state.passes) == (4, 0, 4 * 9, 3)
    again = run.run_pass()  # idempotent: nothing left after the cursor
    assert again.units == 0 and read_cleanup_state(store, STREAM).deleted == 4


def test_a_dead_letter_is_never_cleaned(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    sid = store.source_identifier(STREAM)
    source.put_bytes("dead/0.jsonl", b"x")
    unit = WorkUnit("dead/0.jsonl", (UnitObject("dead/0.jsonl", 1),))
    store.create_partitions(sid, [unit.key], progress_states=[unit.progress_state()])
    item = store.acquire(sid, unit.key, "ingester", 60)
    store.close(item.token, ReopenBackoff(1, 1), max_closed_count=0, reason="unreadable")
    assert store.get(sid, unit.key).dead_letter_reason is not None
    later = ingest(store, source, "b")
    publish(store)
    clock.advance(DAY + 1)
    report = cleaner(store, tmp_path, source, archive).run_pass()
    assert present(source) == ["dead/0.jsonl"]
    assert report.passed_over == 1 and report.units == 1 and later[0] not in present(source)


def test_archive_copies_under_the_same_key_then_deletes(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    keys = ingest(store, source, "2026/01/01/batch 1", 3)
    publish(store)
    clock.advance(DAY + 1)
    report = cleaner(store, tmp_path, source, archive, ARCHIVE).run_pass()
    assert present(source) == [] and present(archive) == keys
    assert report.removed.archived == 3 and read_cleanup_state(store, STREAM).archived == 3


def test_passes_are_bounded_resumable_and_a_dry_run_changes_nothing(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    units = []
    for i in range(5):  # a millisecond apart: units completing together are one group
        units.append(ingest(store, source, f"u{i}", 2))
        clock.advance(0.001)
    publish(store)
    clock.advance(DAY + 1)
    run = cleaner(store, tmp_path, source, archive, per_pass=3)
    dry = run.run_pass(dry_run=True)
    assert [d.key for d in dry.due] == units[0] + units[1]  # whole units: 4 objects for 3
    assert present(source) == sorted(k for u in units for k in u)
    assert store.read_global_state(STREAM, CLEANUP_STATE) == {}
    run.run_pass()
    assert present(source) == sorted(k for u in units[2:] for k in u)
    # Someone deleted one of the next objects meanwhile: it counts as done.
    source.delete(units[2][0])
    run.run_pass()
    run.run_pass()
    assert present(source) == []
    state = read_cleanup_state(store, STREAM)
    assert (state.deleted, state.gone, state.cleaned) == (9, 1, 10)


def test_a_held_lease_means_another_pass_is_running(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    ingest(store, source, "a")
    publish(store)
    clock.advance(DAY + 1)
    assert store.acquire_global_state(STREAM, CLEANUP_STATE, "other", 60) is not None
    report = cleaner(store, tmp_path, source, archive).run_pass()
    assert report.busy and len(present(source)) == 2
    clock.advance(61)  # its holder died: the lease expires and the next pass takes over
    assert cleaner(store, tmp_path, source, archive).run_pass().removed.deleted == 2


def test_a_unit_committed_in_several_transactions_waits_for_every_date(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    """An earlier transaction of the unit wrote a date its commit record does not name: the
    ledger is read for it, and the unit waits until that date is published too."""
    sid = store.source_identifier(STREAM)
    source.put_bytes("big/0.jsonl", b"x")
    unit = WorkUnit("big/0.jsonl", (UnitObject("big/0.jsonl", 1),))
    store.create_partitions(sid, [unit.key], progress_states=[unit.progress_state()])
    item = store.acquire(sid, unit.key, "ingester", 60)
    first = SmallObject(STREAM, "2026-01-02", "file:///t/big-2.parquet", 100, 5)
    store.commit(item.token, [first], complete=False)
    last = SmallObject(STREAM, "2026-01-01", "file:///t/big-1.parquet", 100, 5)
    slots = [f"{STREAM}|2026-01-01", f"{STREAM}|2026-01-02"]
    progress = {**json.loads(unit.progress_state()), TABLE_PARTITIONS: slots}
    store.commit(item.token, [last], progress_state=json.dumps(progress))
    publish(store, "2026-01-01")
    clock.advance(DAY + 1)
    run = cleaner(store, tmp_path, source, archive)
    report = run.run_pass()
    assert report.waiting is not None and "dt=2026-01-02" in report.waiting[1]
    assert present(source) == ["big/0.jsonl"]
    publish(store, "2026-01-02")
    assert run.run_pass().removed.deleted == 1


def test_completeness_says_how_many_objects_were_cleaned_up(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
) -> None:
    """The units still hold the objects that went (discovery never leases them again), and
    the check says why the source lists fewer objects than the units hold."""
    from resources.ingestion import check_suite
    from resources.ingestion.source_listing import source_lister

    ingest(store, source, "a", 3)
    clock.advance(1)
    kept = ingest(store, source, "b", 1)
    publish(store)
    clock.advance(DAY - 0.5)
    cleaner(store, tmp_path, source, archive).run_pass()
    assert present(source) == kept
    outcome = check_suite.source_completeness(store, STREAM, source_lister(source))
    assert outcome.passed and outcome.metadata["objects_cleaned_up"] == 3
    assert outcome.metadata["objects_listed"] == 1
    assert outcome.summary.endswith("; 3 more were cleaned up (archived or deleted)")


@pytest.mark.parametrize("mode", [DELETE, ARCHIVE])
@pytest.mark.parametrize(
    ("fingerprints", "body"),
    [(False, b'{"x": 1, "y": "uploaded again"}\n'), (True, b'{"x": 2}\n')],
    ids=["sizes-other-size", "etags-same-size"],
)
def test_an_object_rewritten_since_it_was_ingested_is_kept(
    store: CoordinationStore,
    clock: FakeClock,
    tmp_path: Path,
    source: ObjectStore,
    archive: ObjectStore,
    mode: str,
    fingerprints: bool,
    body: bytes,
) -> None:
    """A unit listed by sizes alone (before fingerprints) tells a rewrite of another size; one
    listed with fingerprints tells one of as many bytes too."""
    keys = ingest(store, source, "a", fingerprints=fingerprints)
    publish(store)
    path = tmp_path / "source" / keys[1]
    mtime = path.stat().st_mtime_ns
    source.put_bytes(keys[1], body)  # never ingested
    os.utime(path, ns=(mtime + 10**9, mtime + 10**9))
    clock.advance(DAY + 10)
    report = cleaner(store, tmp_path, source, archive, mode).run_pass()
    assert present(source) == [keys[1]] and path.read_bytes() == body
    assert report.removed.changed == 1 and report.removed.kept == (keys[1],)
    assert f"1 kept: changed since they were ingested, never removed ({keys[1]};" in (
        report.describe()
    )
    assert present(archive) == ([keys[0]] if mode == ARCHIVE else [])
