"""Garbage collection keeps every file a retained manifest, the current chain or an unpublished
small object needs, and deletes the rest only once it is older than the safety delay
(docs/architecture.md). Publications are recorded by hand through the real ledger (SQLite; DynamoDB
too for the full lifecycle) with real manifest files; time is the fake clock's, files' ages
are set against it."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from resources.catalog.base import CatalogError, TableDefinition
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.catalog.target import PublicationTarget
from resources.coordination.items import ItemType
from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.ledger.publication import MAX_UNRECORDED_AGE_MS, retained
from resources.objects.base import ObjectInfo, ObjectStoreError
from resources.objects.local import LocalObjectStore
from resources.publication.garbage import (
    EXPIRED_MANIFEST,
    MERGED_SMALL,
    ORPHAN,
    ORPHAN_METADATA,
    SUPERSEDED_MERGED,
    GarbageCollector,
    GcPlan,
)
from resources.publication.manifest import read_spectrum
from resources.rollup.cursor import RollupCursor, rollup_id
from resources.rollup.spec import parse_rollups
from resources.stores.base import CoordinationStore
from tests.support.fakes import FakeClock, StoreFactory
from tests.support.publication_lake import DT, TABLE, Lake, stream_config

DELAY_S = 3600.0


@pytest.fixture
def clock() -> FakeClock:
    """Starts at the real now: files' mtimes are real, and their ages are judged against it."""
    return FakeClock(start=time.time())


@pytest.fixture
def backend() -> str:
    return "sqlite"


@pytest.fixture
def lake(make_store: StoreFactory, tmp_path: Path, clock: FakeClock) -> Lake:
    store = make_store(ttl="P1D")
    clock.now = time.time()  # the real now again, however long the store took to set up
    return Lake(store, LocalObjectStore(tmp_path / "table"))


def gc(lake: Lake, clock: FakeClock, target: PublicationTarget | None = None) -> GarbageCollector:
    return GarbageCollector(
        stream_config(lake.objects.root_url),
        lake.store,
        lake.objects,
        safety_delay_s=DELAY_S,
        clock_ms=lambda: int(clock.now * 1000),
        target=target,
    )


def plan(lake: Lake, clock: FakeClock) -> GcPlan:
    """The plan, checked against the one rule nothing may break: no file a retained
    publication's manifest names (nor the manifest itself) is ever a deletion."""
    p = gc(lake, clock).plan()
    deleted = {d.key for d in p.deletions}
    store: CoordinationStore = lake.store
    now = int(clock.now * 1000)
    for tp in store.table_partitions(TABLE):
        for pub in retained(store.publications(TABLE, tp.dt), now, int(DELAY_S * 1000)):
            version = lake.key(pub.location)
            assert not {k for k in deleted if k.startswith(version)}, pub
            named = {lake.key(e.url) for e in read_spectrum(lake.objects, pub.location)}
            assert not named & deleted, pub
    return p


def deletions(p: GcPlan) -> dict[str, str]:
    return {d.key: d.reason for d in p.deletions}


def age_all(clock: FakeClock) -> None:
    """Every file written so far becomes older than the safety delay."""
    clock.advance(DELAY_S + 10)


def test_a_superseded_merged_object_goes_only_after_the_delay(lake: Lake, clock: FakeClock) -> None:
    lake.ingest(100, 100)
    first = lake.key(lake.merge(0, 2))
    lake.close()
    switched = lake.publish(True, 2)  # names `first`
    lake.ingest(100)
    age_all(clock)
    assert first not in deletions(plan(lake, clock))  # in the chain, and current

    second = lake.key(lake.merge(0, 3))  # the open range rewritten: `first` leaves the chain
    age_all(clock)
    assert first not in deletions(plan(lake, clock))  # the current manifest names it
    newest = lake.publish(True, 3)
    clock.advance(DELAY_S - 1)
    assert first not in deletions(plan(lake, clock))  # `switched` is still retained

    clock.advance(2)
    found = deletions(plan(lake, clock))
    assert found[first] == SUPERSEDED_MERGED
    assert second not in found
    old_version = lake.key(switched.location)
    assert {k: r for k, r in found.items() if k.startswith("_manifests/")} == {
        old_version + "manifest.json": EXPIRED_MANIFEST,
        old_version + "symlink/manifest": EXPIRED_MANIFEST,
    }
    assert not {k for k in found if k.startswith(lake.key(newest.location))}


def test_small_objects_go_once_a_switched_publication_covers_them_and_older_versions_expired(
    lake: Lake, clock: FakeClock
) -> None:
    small = [lake.key(o.url) for o in lake.ingest(100, 200, 300)]
    live = lake.publish(False, 3)
    age_all(clock)
    assert deletions(plan(lake, clock)) == {}  # published live: every small object is read

    lake.merge(0, 3)
    lake.close()
    age_all(clock)
    assert deletions(plan(lake, clock)) == {}  # merged, not switched: still the live manifest

    lake.publish(True, 3)
    delayed = [lake.key(o.url) for o in lake.ingest(50)]  # id 4, after the switch
    age_all(clock)
    clock.advance(-20)
    assert deletions(plan(lake, clock)) == {}  # the live version is retained through the delay

    clock.advance(20)
    p = plan(lake, clock)
    assert set(small) <= set(deletions(p))
    assert {deletions(p)[k] for k in small} == {MERGED_SMALL}
    assert delayed[0] not in deletions(p)  # above the published upper
    assert p.forget == {DT: live.seq + 1}


def test_never_a_file_a_retained_manifest_names(lake: Lake, clock: FakeClock) -> None:
    lake.ingest(100, 100)
    first = lake.merge(0, 2)
    lake.close()
    pub = lake.publish(True, 2)
    lake.ingest(100)
    lake.merge(0, 3)  # `first` is out of the chain, but the current manifest still names it
    age_all(clock)
    age_all(clock)
    found = deletions(plan(lake, clock))
    assert lake.key(first) not in found
    assert not {k for k in found if k.startswith(lake.key(pub.location))}
    # The small objects are covered by the switched version's merged object: they may go.
    assert {r for r in found.values()} == {MERGED_SMALL}


def test_fresh_orphans_stay_and_old_ones_go(lake: Lake, clock: FakeClock) -> None:
    lake.ingest(100)
    orphans = {
        f"dt={DT}/att-dead.parquet": ORPHAN,  # an ingestion attempt that never committed
        "dt=2026-01-09/att-dead.parquet": ORPHAN,  # a date the ledger never heard of
        "stray.txt": ORPHAN,
        f"merged/dt={DT}/7-dead/part-0-1.parquet": SUPERSEDED_MERGED,  # a fenced merge
        f"_manifests/dt={DT}/live-1-dead/manifest.json": EXPIRED_MANIFEST,  # a stale publish
    }
    for key in orphans:
        lake.objects.put_bytes(key, b"o" * 7)
    clock.advance(DELAY_S - 5)
    assert deletions(plan(lake, clock)) == {}
    clock.advance(10)
    assert deletions(plan(lake, clock)) == orphans  # the ledger's small object is unpublished


def test_a_file_committed_after_the_listing_but_before_the_ledger_read_is_kept(
    lake: Lake, clock: FakeClock
) -> None:
    """The root is listed first, the ledger read second: an old file whose commit lands
    between the two is known to the ledger read (the other order would take it for an old
    orphan and delete a committed object)."""
    lake.ingest(100)
    written = lake.write_small(100)  # an attempt that has written and not committed yet
    key = lake.key(written[0].url)
    age_all(clock)
    real = lake.objects.list_prefix
    committed: list[RegisteredObject] = []

    def list_then_commit(prefix: str) -> Iterator[ObjectInfo]:
        yield from real(prefix)
        if not committed:  # the commit lands right after the listing
            committed.extend(lake.commit(written))

    lake.objects.list_prefix = list_then_commit  # type: ignore[method-assign]
    p = plan(lake, clock)
    assert [lake.key(o.url) for o in committed] == [key]
    assert key not in deletions(p)
    assert deletions(p) == {}


def test_dry_run_deletes_nothing_and_reports_the_same(lake: Lake, clock: FakeClock) -> None:
    small = [lake.key(o.url) for o in lake.ingest(100, 200)]
    live = lake.publish(False, 2)
    merged = lake.key(lake.merge(0, 2, size=250))
    lake.close()
    current = lake.publish(True, 2)
    orphan = "dt=2026-01-02/att-dead.parquet"
    lake.objects.put_bytes(orphan, b"o" * 7)
    age_all(clock)
    before = {o.key: o.size for o in lake.objects.list_prefix("")}
    expired = {k: n for k, n in before.items() if k.startswith(lake.key(live.location))}

    dry = gc(lake, clock).collect(dry_run=True)
    assert set(lake.keys()) == set(before)
    assert len(lake.store.publications(TABLE, DT)) == 2
    assert dry.dry_run and dry.ok

    wet = gc(lake, clock).collect()
    assert (dry.files, dry.bytes, dry.by_reason) == (wet.files, wet.bytes, wet.by_reason)
    assert dry.forgotten_publications == wet.forgotten_publications == 1
    assert not wet.dry_run and wet.ok
    assert wet.by_reason == {
        MERGED_SMALL: (2, 300),
        EXPIRED_MANIFEST: (2, sum(expired.values())),
        ORPHAN: (1, 7),
    }
    assert (wet.files, wet.bytes) == (5, 307 + sum(expired.values()))
    gone = set(small) | set(expired) | {orphan}
    assert lake.keys() == set(before) - gone
    assert merged in lake.keys() and lake.key(current.location) + "manifest.json" in lake.keys()
    # forget_publications ran once the files were gone: only the current record is left.
    assert lake.store.publications(TABLE, DT) == [current]
    again = gc(lake, clock).collect()
    assert (again.files, again.forgotten_publications) == (0, 0)


class FailingDeletes(LocalObjectStore):
    def __init__(self, root: Path, failing: str) -> None:
        super().__init__(root)
        self.failing = failing

    def delete(self, key: str) -> None:
        if key == self.failing:
            raise ObjectStoreError(f"{self.url(key)}: access denied")
        super().delete(key)


def test_a_failed_deletion_is_logged_counted_and_forgets_nothing(
    lake: Lake, clock: FakeClock, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    small = [lake.key(o.url) for o in lake.ingest(100, 200)]
    lake.publish(False, 2)
    lake.merge(0, 2)
    lake.close()
    lake.publish(True, 2)
    age_all(clock)
    lake.objects = FailingDeletes(tmp_path / "table", failing=small[0])
    with caplog.at_level(logging.INFO, logger="resources.publication.garbage"):
        report = gc(lake, clock).collect()
    assert (report.ok, report.failed) == (False, 1)
    assert small[0] in report.errors[0] and "FAILED deletions: 1" in report.describe()
    assert report.files == 3  # the other small object and the expired version's two files
    assert report.forgotten_publications == 0
    assert len(lake.store.publications(TABLE, DT)) == 2
    assert small[0] in lake.keys() and small[1] not in lake.keys()
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert any(small[0] in r.getMessage() for r in errors)
    assert any("small object merged and published" in r.getMessage() for r in caplog.records)


def test_an_unreadable_retained_manifest_stops_the_plan(lake: Lake, clock: FakeClock) -> None:
    lake.ingest(100)
    pub = lake.publish(False, 1)
    lake.objects.put_bytes("stray.txt", b"x")
    lake.objects.delete(lake.key(pub.location) + "manifest.json")
    age_all(clock)
    with pytest.raises(LeaseholdError, match="cannot read retained publication"):
        gc(lake, clock).collect()
    assert "stray.txt" in lake.keys()


@pytest.mark.parametrize("backend", ["sqlite", "dynamodb"])
def test_the_whole_lifecycle_on_each_backend(lake: Lake, clock: FakeClock) -> None:
    """Live, switched, rewritten and republished: each file goes exactly when nothing retained
    needs it, and the history shrinks to the current record."""
    small = [lake.key(o.url) for o in lake.ingest(100, 100)]
    p1 = lake.publish(False, 2)
    first = lake.key(lake.merge(0, 2))
    lake.close()
    p2 = lake.publish(True, 2)
    delayed = [lake.key(o.url) for o in lake.ingest(100)]
    second = lake.key(lake.merge(0, 3))
    clock.advance(DELAY_S / 2)
    p3 = lake.publish(True, 3)
    # p1 expired (p2 current for the delay), p2 not yet. The files' ages are real ones: a
    # minute of margin for the real time the ingests and merges above took (DynamoDB on a busy
    # machine took over a second, and the objects then looked younger than the delay).
    clock.advance(DELAY_S / 2 + 60)
    first_run = gc(lake, clock).collect()
    assert lake.keys().isdisjoint(small + delayed)  # covered by p3, never named by p1
    assert {first, second} <= lake.keys()
    assert first_run.forgotten_publications == 1
    assert lake.store.publications(TABLE, DT) == [p2, p3]

    clock.advance(DELAY_S / 2)
    second_run = gc(lake, clock).collect()
    assert first not in lake.keys()
    assert second_run.by_reason[SUPERSEDED_MERGED] == (1, 500)
    assert lake.store.publications(TABLE, DT) == [p3]
    version = lake.key(p3.location)
    assert lake.keys() == {second, version + "manifest.json", version + "symlink/manifest"}
    assert not (lake.keys() & {lake.key(p.location) + "manifest.json" for p in (p1, p2)})


def test_a_source_or_quarantine_under_the_table_root_is_refused(lake: Lake) -> None:
    config = replace(stream_config(lake.objects.root_url), quarantine=lake.objects.url("q"))
    with pytest.raises(LeaseholdError, match="quarantine"):
        GarbageCollector(config, lake.store, lake.objects, safety_delay_s=DELAY_S)
    beside = replace(config, quarantine=lake.objects.root_url + "_quarantine")
    GarbageCollector(beside, lake.store, lake.objects, safety_delay_s=DELAY_S)


def test_an_unrecorded_manifest_stays_while_a_paused_publisher_could_still_record_it(
    lake: Lake, clock: FakeClock
) -> None:
    """The ledger refuses a version written more than MAX_UNRECORDED_AGE_MS ago; until twice
    that, a manifest no record names may still become current, whatever the safety delay."""
    lake.ingest(100)
    key = f"_manifests/dt={DT}/live-1-paused/manifest.json"
    lake.objects.put_bytes(key, b"{}")
    short = GarbageCollector(
        stream_config(lake.objects.root_url),
        lake.store,
        lake.objects,
        safety_delay_s=60.0,
        clock_ms=lambda: int(clock.now * 1000),
    )
    clock.advance(2 * MAX_UNRECORDED_AGE_MS / 1000 - 5)
    assert key not in deletions(short.plan())
    clock.advance(10)
    assert deletions(short.plan())[key] == EXPIRED_MANIFEST


def test_small_objects_a_rollup_has_not_consumed_are_kept(lake: Lake, clock: FakeClock) -> None:
    spec = parse_rollups({"per_id": {"aggregates": {"n": "count"}}}, {"id": "long"})[0]
    small = [lake.key(o.url) for o in lake.ingest(100, 200, 300)]
    lake.merge(0, 3)
    lake.close()
    lake.publish(True, 3)
    sid = lake.store.source_identifier(rollup_id(TABLE, spec), ItemType.ROLLUP_JOB)
    lake.store.create_partitions(sid, [DT])
    job = lake.store.acquire(sid, DT, "rollup", 60)
    lake.store.renew(job.token, 60, json.dumps(RollupCursor(1, (1, 3)).state()))
    age_all(clock)
    collector = gc(lake, clock)
    collector.config = replace(collector.config, rollups=(spec,))
    found = deletions(collector.plan())
    assert small[0] in found and not {small[1], small[2]} & set(found)  # ids 2, 3 still needed

    lake.store.renew(job.token, 60, json.dumps(RollupCursor(3).state()))
    assert set(small) <= set(deletions(collector.plan()))


class HistoryTarget(HiveManifestsTarget):
    """A target with a history of its own (as an Iceberg table has): what its retained
    snapshots reference and where its metadata lives, or a history that cannot be read."""

    def __init__(
        self,
        referenced: set[str],
        prefix: str,
        broken: bool = False,
        in_use: set[str] | None = None,
    ) -> None:
        super().__init__(LocalCatalog(Path("/nowhere/catalog.json")))
        self.referenced, self.prefix, self.broken = referenced, prefix, broken
        self.in_use = in_use

    def table(self, name: str) -> TableDefinition | None:
        return TableDefinition(name, (), "")

    def referenced_files(self, table: str) -> set[str] | None:
        if self.broken:
            raise CatalogError("the table's manifests cannot be read")
        return self.referenced

    def metadata_prefix(self, table: str) -> str | None:
        return self.prefix

    def metadata_files(self, table: str) -> set[str] | None:
        return self.in_use


def test_files_a_retained_snapshot_references_and_the_tables_metadata_stay(
    lake: Lake, clock: FakeClock
) -> None:
    small = lake.ingest(100, 200, 300)
    lake.publish(False, 3)
    lake.merge(0, 3)
    lake.close()
    lake.publish(True, 3)
    metadata = lake.objects.put_bytes("metadata/00001-x.metadata.json", b"{}")
    age_all(clock)
    age_all(clock)  # the live version is no longer retained by the ledger's rule
    without = deletions(plan(lake, clock))
    assert {lake.key(o.url) for o in small} <= set(without)
    assert without[lake.key(metadata)] == ORPHAN

    # An older snapshot still serves the small objects: a reader may time-travel to it.
    target = HistoryTarget({o.url for o in small}, lake.objects.url("metadata/"))
    found = deletions(gc(lake, clock, target).plan())
    assert not {lake.key(o.url) for o in small} & set(found)
    assert lake.key(metadata) not in found

    broken = gc(lake, clock, HistoryTarget(set(), "", broken=True))
    with pytest.raises(CatalogError, match="cannot be read"):
        broken.plan()  # a history not read whole deletes nothing


def test_table_metadata_no_commit_landed_with_goes_after_the_delay(
    lake: Lake, clock: FakeClock
) -> None:
    """Under the target's metadata prefix, what its current state names stays; what a killed
    or refused commit wrote there goes once older than the safety delay, as any orphan."""
    lake.ingest(100)
    current = lake.objects.put_bytes("metadata/00002-b.metadata.json", b"{}")
    listed = lake.objects.put_bytes("metadata/snap-1.avro", b"list")
    killed = lake.objects.put_bytes("metadata/m-killed.avro", b"manifest")
    prefix = lake.objects.url("metadata/")
    target = HistoryTarget(set(), prefix, in_use={current, listed})
    clock.advance(DELAY_S - 5)
    assert deletions(gc(lake, clock, target).plan()) == {}  # a commit may still be running
    clock.advance(10)
    assert deletions(gc(lake, clock, target).plan()) == {lake.key(killed): ORPHAN_METADATA}

    unnamed = HistoryTarget(set(), prefix)  # a target that cannot name its files: all stay
    assert not deletions(gc(lake, clock, unnamed).plan())
