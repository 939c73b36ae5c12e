"""`Publisher` in one process on both store backends, with real Spark merges: live publication
and republication, the switch (only once closed and merged), delayed objects after the next
merge, a stale publisher refused, a crash after recording repaired, and a catalog that never
moves back. Every published state is read back through the catalog, as an engine reads it,
and judged by the publication checks."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.catalog.base import Column, TableDefinition
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.ledger.model import SmallObject
from resources.publication import checks
from resources.publication import publisher as publisher_module
from resources.publication.manifest import catalog_location, read_spectrum
from resources.publication.outcome import CATALOG_REPAIRED, FAILED, PUBLISHED, UP_TO_DATE
from resources.publication.publisher import Publisher
from resources.publication.reader import (
    PartitionNotPublishedError,
    TableNotPublishedError,
    partition_files,
    read_partition,
)
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import read_version, version_metadata
from resources.schema.versions import SchemaOrigin
from tests.publication.conftest import DT, World
from tests.support.merge_child import TABLE, commit_source, epoch_us, event_ids


class Crash(Exception):
    """Stands for the process dying at a step (not a LeaseholdError: nothing catches it)."""


def crash_at(step: str):  # type: ignore[no-untyped-def]
    def on_step(reached: str, dt: str) -> None:
        if reached == step:
            raise Crash(f"{step} {dt}")

    return on_step


def assert_serves_exactly_what_was_committed(world: World, dt: str = DT) -> None:
    """The catalog's partition is the ledger's current publication, its files hold exactly the
    committed rows of the ids it covers, and every check passes."""
    current = world.current(dt)
    partition = world.catalog.partition(TABLE, dt)
    assert partition is not None
    assert (partition.location, partition.seq) == (catalog_location(current.location), current.seq)
    assert world.read(dt) == world.expected(dt, upto=current.upper)
    assert current.rows == sum(world.expected(dt, upto=current.upper).values())
    outcomes = checks.run_all(world.config, world.store, world.objects, world.target)
    assert [o.name for o in outcomes] == list(checks.CHECKS)
    assert [o.summary for o in outcomes if not o.passed] == []


def test_a_partition_is_published_live_after_ingestion_and_again_after_more_commits(
    world: World,
) -> None:
    world.ingest(3)
    publisher = world.publisher()
    assert publisher.due() == [DT]
    (first,) = publisher.publish([DT])
    assert first.outcome == PUBLISHED and not first.switched_now
    p = first.publication
    assert p is not None and (p.seq, p.switched, p.upper, p.files) == (1, False, 3, 3)
    assert p.rows == sum(world.expected().values())
    assert [e.url for e in read_spectrum(world.objects, p.location)] == partition_files(
        world.target, TABLE, DT
    )
    assert_serves_exactly_what_was_committed(world)
    assert publisher.due() == []
    assert world.publish().outcome == UP_TO_DATE

    world.ingest(2)
    assert publisher.due() == [DT]
    second = world.publish()
    assert second.outcome == PUBLISHED and second.publication is not None
    assert (second.publication.seq, second.publication.upper) == (2, 5)
    assert second.publication.location != p.location  # a new version, never an overwrite
    assert [e.url for e in read_spectrum(world.objects, p.location)] == [
        o.url for o in world.store.ledger_objects(TABLE, DT)[:3]
    ]  # the old version is intact for a reader holding it
    assert world.read() == world.expected()
    assert_serves_exactly_what_was_committed(world)


def test_the_switch_waits_for_the_close_and_a_merge_covering_every_live_id(
    world: World,
) -> None:
    world.ingest(3)
    world.merge()  # merged, not closed: still live
    assert world.publish().publication.switched is False  # type: ignore[union-attr]
    world.ingest(1)
    world.close()  # live ids 1..4, the chain ends at 3: not yet
    live = world.publish()
    assert live.outcome == PUBLISHED and live.publication is not None
    assert (live.publication.switched, live.publication.upper) == (False, 4)
    assert world.publish().outcome == UP_TO_DATE
    assert_serves_exactly_what_was_committed(world)

    world.merge()  # the open range rewritten: (0, 4]
    assert world.publisher().due() == [DT]
    switched = world.publish()
    assert switched.outcome == PUBLISHED and switched.switched_now
    p = switched.publication
    assert p is not None and (p.switched, p.upper, p.files, p.manifest_version) == (True, 4, 1, 4)
    (merged,) = [r for r in world.store.merge_ranges(TABLE, DT) if not r.is_sentinel]
    assert partition_files(world.target, TABLE, DT) == [merged.url]
    assert world.read() == world.expected()
    assert_serves_exactly_what_was_committed(world)


def test_a_closed_partition_never_merged_stays_live(world: World) -> None:
    world.ingest(2)
    world.close()
    first = world.publish()
    assert first.outcome == PUBLISHED and first.publication is not None
    assert first.publication.switched is False
    assert world.publisher().due() == [] and world.publish().outcome == UP_TO_DATE
    tp = world.store.table_partition(TABLE, DT)
    assert tp is not None and not tp.switched and tp.current_manifest_version == 0
    assert_serves_exactly_what_was_committed(world)


def test_delayed_objects_are_published_after_the_next_merge(world: World) -> None:
    world.ingest(3)
    world.close()
    world.merge()
    assert world.publish().switched_now
    world.ingest(2)  # delayed: committed after the close
    assert all(o.delayed for o in world.store.ledger_objects(TABLE, DT)[3:])
    assert world.publisher().due() == []  # switched: only a merge makes it due again
    assert world.publish().outcome == UP_TO_DATE
    assert world.read() == world.expected(upto=3)  # not visible yet

    world.merge()
    again = world.publish()
    assert again.outcome == PUBLISHED and not again.switched_now
    assert again.publication is not None and (again.publication.seq, again.publication.upper) == (
        2,
        5,
    )
    assert world.read() == world.expected()
    assert_serves_exactly_what_was_committed(world)


def test_a_slower_publisher_of_an_older_version_is_refused(world: World) -> None:
    world.ingest(2)
    racer: dict[str, object] = {}

    def overtaken(step: str, dt: str) -> None:
        if step == "written":  # the slow one wrote live up to 2; meanwhile 2 more commits
            world.ingest(2)
            racer["outcome"] = world.publish(dt)

    slow = world.publisher(on_step=overtaken).publish_one(DT)
    assert racer["outcome"].outcome == PUBLISHED  # type: ignore[attr-defined]
    assert slow.outcome == UP_TO_DATE and "not newer" in slow.message
    current = world.current()
    assert (current.seq, current.upper) == (1, 4)
    orphans = [
        p.parent
        for p in Path(world.lake.table_dir, "_manifests", f"dt={DT}").glob("*/manifest.json")
        if f"file://{p.parent}/" != current.location
    ]
    assert len(orphans) == 1 and orphans[0].name.startswith("live-0000000000000000002-")
    assert_serves_exactly_what_was_committed(world)


def test_a_crash_after_recording_is_repaired_by_the_next_run(world: World) -> None:
    world.ingest(2)
    with pytest.raises(Crash):
        world.publisher(on_step=crash_at("recorded")).publish_one(DT)
    assert world.current().seq == 1 and world.catalog.table(TABLE) is None
    assert not checks.run_one(
        "catalog_current", world.config, world.store, world.objects, world.target
    ).passed
    publisher = world.publisher()
    assert publisher.due() == [DT]  # nothing new to publish, but the catalog lags
    repaired = publisher.publish_one(DT)
    assert repaired.outcome == CATALOG_REPAIRED and repaired.publication == world.current()
    assert publisher.due() == []
    assert_serves_exactly_what_was_committed(world)

    # Again with a catalog partition one version behind.
    world.ingest(1)
    with pytest.raises(Crash):
        world.publisher(on_step=crash_at("recorded")).publish_one(DT)
    assert world.catalog.partition(TABLE, DT).seq == 1  # type: ignore[union-attr]
    assert world.publish().outcome == CATALOG_REPAIRED
    assert world.read() == world.expected()
    assert_serves_exactly_what_was_committed(world)


def test_a_crash_after_writing_leaves_an_orphan_and_the_next_run_publishes(world: World) -> None:
    world.ingest(2)
    with pytest.raises(Crash):
        world.publisher(on_step=crash_at("written")).publish_one(DT)
    assert world.store.publications(TABLE, DT) == []
    assert world.catalog.table(TABLE) is None
    published = world.publish()
    assert published.outcome == PUBLISHED and published.publication is not None
    assert published.publication.seq == 1
    assert_serves_exactly_what_was_committed(world)


def test_the_catalog_never_moves_back_to_an_older_version(world: World) -> None:
    world.ingest(2)
    late: dict[str, object] = {}

    def overtaken(step: str, dt: str) -> None:
        if step == "recorded":  # seq 1 recorded; another run publishes seq 2 before we catalog
            world.ingest(1)
            late["outcome"] = world.publish(dt)

    slow = world.publisher(on_step=overtaken).publish_one(DT)
    assert slow.outcome == PUBLISHED and slow.publication is not None
    assert slow.publication.seq == 1
    assert late["outcome"].publication.seq == 2  # type: ignore[attr-defined]
    partition = world.catalog.partition(TABLE, DT)
    assert partition is not None and partition.seq == 2  # the slow seq 1 was refused
    assert world.read() == world.expected()
    older = catalog_location(world.store.publications(TABLE, DT)[0].location)
    assert not world.catalog.publish_partition(TABLE, DT, older, 1)
    assert_serves_exactly_what_was_committed(world)


def test_due_lists_every_partition_to_publish_by_date_and_failures_do_not_raise(
    world: World,
) -> None:
    for dt in ("2027-01-14", DT, "2027-01-13"):
        world.ingest(1, dt)
    publisher = world.publisher()
    assert publisher.due() == ["2027-01-13", "2027-01-14", DT]
    outcomes = list(publisher.publish(publisher.due() + ["2027-02-01"]))
    assert [o.outcome for o in outcomes] == [PUBLISHED] * 3 + [FAILED]
    assert "no such table partition" in outcomes[-1].message
    assert publisher.due() == []
    for dt in ("2027-01-13", "2027-01-14", DT):
        assert_serves_exactly_what_was_committed(world, dt)
    assert [c.name for c in world.catalog.table(TABLE).columns] == [  # type: ignore[union-attr]
        "event_id", "user_id", "amount", "event_time",
    ]  # fmt: skip


def test_reading_what_was_never_published_says_so(world: World) -> None:
    with pytest.raises(TableNotPublishedError):
        read_partition(world.target, TABLE, DT)
    world.ingest(1)
    world.publish()
    with pytest.raises(PartitionNotPublishedError):
        partition_files(world.target, TABLE, "2027-01-16")
    assert read_partition(world.target, TABLE, DT, limit=1).num_rows == 1


def test_a_half_read_merge_chain_is_refused_and_published_next_time(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A DynamoDB Query may see half of a merge commit that rewrote the open range: the old
    range and its replacement both. Publishing that would serve rows twice."""
    world.ingest(2)
    world.merge()
    world.ingest(1)
    world.close()
    old = world.store.merge_ranges(TABLE, DT)
    world.merge()  # (0, 2] rewritten as (0, 3]
    whole = world.store.merge_ranges(TABLE, DT)
    monkeypatch.setattr(world.store, "merge_ranges", lambda table, dt: [*old, whole[-1]])
    refused = world.publish()
    assert refused.outcome == FAILED and "the merge chain is not valid now" in refused.message
    assert world.store.publications(TABLE, DT) == []
    monkeypatch.undo()
    assert world.publish().switched_now
    assert_serves_exactly_what_was_committed(world)


class ReadThenWriteCatalog(LocalCatalog):
    """Glue's behaviour: `publish_partition` reads the partition, then writes unconditionally.
    `between` runs once between the two, where a racing publisher's whole publication lands."""

    def __init__(self, path: Path, between: Callable[[], None]) -> None:
        super().__init__(path)
        self.between: Callable[[], None] | None = between

    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        before = self.partition(table, dt) if self.table(table) else None
        if self.between is not None:
            between, self.between = self.between, None
            between()
        if before is not None and before.seq >= seq:
            return False
        # Written over whatever is there now: the racer's newer partition is lost.
        self._mutate(lambda data: data["tables"][table]["partitions"].pop(dt, None) or True)
        return super().publish_partition(table, dt, location, seq)


def test_a_publisher_that_wrote_an_older_version_over_a_newer_one_puts_the_newer_back(
    world: World,
) -> None:
    world.ingest(2)

    def racer() -> None:
        world.ingest(1)
        newer = world.publish()  # seq 2, recorded and cataloged while ours is mid-write
        assert newer.outcome == PUBLISHED and newer.publication is not None
        assert newer.publication.seq == 2

    slow = Publisher(
        world.config,
        world.store,
        world.objects,
        HiveManifestsTarget(ReadThenWriteCatalog(world.catalog.path, racer)),
    )
    outcome = slow.publish_one(DT)
    assert outcome.outcome == PUBLISHED and outcome.publication is not None
    assert outcome.publication.seq == 1
    partition = world.catalog.partition(TABLE, DT)
    assert partition is not None and partition.seq == 2  # put forward after the lost update
    assert_serves_exactly_what_was_committed(world)


# -- schema versions ----------------------------------------------------------------------------

V2_ADDED = (ColumnSpec("country", "string"), ColumnSpec("device", "string"))


class RecordingCatalog(LocalCatalog):
    """The local catalog, noting each write and the table's columns when it was made."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.calls: list[tuple[str, int | None, list[str]]] = []

    def _columns(self) -> list[str]:
        table = self.table(TABLE)
        return [] if table is None else [c.name for c in table.columns]

    def ensure_table(self, table: TableDefinition) -> None:
        super().ensure_table(table)
        self.calls.append(("ensure_table", None, self._columns()))

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        added = super().add_columns(table, columns)
        self.calls.append(("add_columns", None, self._columns()))
        return added

    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        self.calls.append(("publish_partition", seq, self._columns()))  # before it lands
        return super().publish_partition(table, dt, location, seq)


def ingest_version_2(world: World, count: int) -> None:
    """`count` source objects written with schema version 2 (the 4 columns, then `country`
    and a nested `device` as JSON text), each committed on its own."""
    for _ in range(count):
        key, rows = f"src/{world.n:04d}", world.rng.randint(2, 5)
        world.n += 1
        ids = event_ids(key, DT, rows)
        table = pa.table(
            {
                "event_id": ids,
                "user_id": [f"user-{world.rng.randrange(50)}" for _ in ids],
                "amount": [1.5] * rows,
                "event_time": pa.array(
                    [epoch_us(DT) + n for n in range(rows)], pa.timestamp("us", tz="UTC")
                ),
                "country": ["DE"] * rows,
                "device": ['{"os": "ios", "model": {"name": "x"}}'] * rows,
            }
        )
        path = world.lake.table_dir / f"dt={DT}" / f"{key.replace('/', '-')}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata(version_metadata(2)), path)
        small = SmallObject(TABLE, DT, f"file://{path}", path.stat().st_size, rows)
        (o,) = commit_source(world.store, key, [small], merge_after_s=600.0)
        world.committed[(DT, o.object_id)] = ids


def test_new_columns_reach_the_catalog_before_the_files_holding_them_and_stay(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version 1 objects published; the stream gains `country` and `device` (version 2) and
    objects holding them are published: the catalog table has the new columns before the
    partition names those files. A publisher that followed version 1 and writes after does not
    take them away; the switch to the merged object (version 2, read by name) keeps them."""
    catalog = RecordingCatalog(world.catalog.path)
    publisher = Publisher(world.config, world.store, world.objects, HiveManifestsTarget(catalog))
    v1_names = world.config.column_names
    world.ingest(2)
    assert publisher.publish_one(DT).outcome == PUBLISHED  # seq 1: version 1's columns
    assert catalog.calls == [("ensure_table", None, v1_names), ("publish_partition", 1, v1_names)]

    v2_names = [*v1_names, "country", "device"]
    world.store.record_schema(
        TABLE, [*world.config.columns, *V2_ADDED], SchemaOrigin(object_key="src/0002")
    )
    ingest_version_2(world, 2)
    catalog.calls.clear()
    second = publisher.publish_one(DT)
    assert second.outcome == PUBLISHED and second.publication is not None
    assert catalog.calls == [("add_columns", None, v2_names), ("publish_partition", 2, v2_names)]
    for url in partition_files(world.target, TABLE, DT):  # every file's columns declared
        assert set(pq.read_schema(url[len("file://") :]).names) <= set(v2_names)
    table = world.catalog.table(TABLE)
    assert table is not None and [(c.name, c.type) for c in table.columns[-2:]] == [
        ("country", "string"),
        ("device", "string"),
    ]

    # A publisher that followed the stream before version 2 was recorded writes last.
    v1_config = world.config
    monkeypatch.setattr(publisher_module, "followed_config", lambda store, config: v1_config)
    older = Publisher(world.config, world.store, world.objects, HiveManifestsTarget(catalog))
    world.ingest(1)
    catalog.calls.clear()
    assert older.publish_one(DT).outcome == PUBLISHED  # seq 3, after its ensure_table
    assert catalog.calls[0][0] == "ensure_table"
    assert [c.name for c in world.catalog.table(TABLE).columns] == v2_names  # type: ignore[union-attr]
    monkeypatch.undo()

    world.close()
    world.merge()
    switched = publisher.publish_one(DT)
    assert switched.outcome == PUBLISHED and switched.switched_now
    (merged,) = partition_files(world.target, TABLE, DT)
    assert read_version(pq.read_schema(merged[len("file://") :])) == 2
    rows = read_partition(world.target, TABLE, DT)
    assert rows.column_names == v2_names
    by_country = Counter(rows.column("country").to_pylist())
    v2_rows = sum(len(ids) for (_, i), ids in world.committed.items() if i in (3, 4))
    assert by_country == Counter({"DE": v2_rows, None: rows.num_rows - v2_rows})
    assert [c.name for c in world.catalog.table(TABLE).columns] == v2_names  # type: ignore[union-attr]
    assert_serves_exactly_what_was_committed(world)
