"""A table to publish, in one process: small objects committed through the real fenced commit,
merged by the real Spark `MergeWriter` (following the stream's schema version, as the lake's
merges do), published to the local catalog file, on the
parametrized store backend (the store's clock is the fake one)."""

from __future__ import annotations

import io
import random
from collections import Counter
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.compaction.merge_runner import MERGED, MergeOutcome, MergeRunner
from resources.compaction.merge_writer import MergeWriter
from resources.ledger.model import RegisteredObject, SmallObject
from resources.ledger.provenance import Sources
from resources.ledger.publication import Publication
from resources.ledger.retraction_marker import Retraction, marker_sources
from resources.objects.base import ObjectStore
from resources.publication.current_keys import current_keys
from resources.publication.deduped_files import DedupedFiles
from resources.publication.outcome import PublicationOutcome
from resources.publication.publisher import Publisher
from resources.publication.reader import read_partition
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import followed_config
from resources.streams import StreamConfig
from tests.support.merge_child import TABLE, Lake, commit_source, epoch_us, event_ids, write_small

DT = "2027-01-15"
"""The fake clock's day (it starts at 2027-01-15 08:00 UTC)."""


class World:
    """One stream's table and everything that acts on it. Every event id committed is kept per
    date: the account published rows are judged against, independent of the store."""

    def __init__(self, lake: Lake, store: CoordinationStore, catalog_path: Path, spark: Any):
        self.lake, self.store, self.spark = lake, store, spark
        self.config: StreamConfig = lake.config()
        self.objects: ObjectStore = lake.objects()
        self.catalog = LocalCatalog(catalog_path)
        self.target = HiveManifestsTarget(self.catalog)
        self.rng = random.Random(11)
        self.committed: dict[tuple[str, int], list[str]] = {}
        """(dt, ledger id) -> the event ids of that small object."""
        self.n = 0

    def ingest(self, count: int, dt: str = DT) -> None:
        """`count` source objects of a few rows each on `dt`, each committed on its own."""
        for _ in range(count):
            key, rows = f"src/{self.n:04d}", self.rng.randint(2, 5)
            self.n += 1
            small = write_small(self.lake, key, dt, rows, self.rng)
            (o,) = commit_source(self.store, key, [small], merge_after_s=600.0)
            self.committed[(dt, o.object_id)] = event_ids(key, dt, rows)

    def merge(self, dt: str = DT) -> list[MergeOutcome]:
        keys = DedupedFiles(self.config, self.objects)
        runner = MergeRunner(
            config=self.config, table=TABLE, store=self.store, objects=self.objects,
            owner="merger", timing=self.lake.timing(),
            write=MergeWriter(
                self.spark, self.config, follow=lambda: followed_config(self.store, self.config)
            ).write,
            work_dir=Path(self.lake.root) / "work",
            served=partial(current_keys, self.store, keys, TABLE),
        )  # fmt: skip
        outcomes = list(runner.merge([dt]))
        assert [o.outcome for o in outcomes][-1] == MERGED, [o.describe() for o in outcomes]
        return outcomes

    def close(self, dt: str = DT) -> None:
        assert self.store.close_partition(TABLE, dt) is not None

    def publisher(self, on_step: Callable[[str, str], None] | None = None) -> Publisher:
        return Publisher(self.config, self.store, self.objects, self.target, on_step=on_step)

    def publish(self, dt: str = DT) -> PublicationOutcome:
        return self.publisher().publish_one(dt)

    def current(self, dt: str = DT) -> Publication:
        return self.store.publications(TABLE, dt)[-1]

    def read(self, dt: str = DT) -> Counter[str]:
        """The event ids an engine reading the catalog sees."""
        rows = read_partition(self.target, TABLE, dt)
        return Counter(rows.column("event_id").to_pylist())

    def expected(self, dt: str = DT, upto: int | None = None) -> Counter[str]:
        """The event ids committed on `dt` (in the objects with ids up to `upto`, if given)."""
        return Counter(
            e
            for (d, object_id), ids in self.committed.items()
            if d == dt and (upto is None or object_id <= upto)
            for e in ids
        )


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(
        settings={}, root=str(tmp_path), max_objects=1000, max_bytes=1 << 30, interval="PT10M",
        timeout_s=60, renew_s=15,
    )  # fmt: skip


@pytest.fixture
def world(lake: Lake, store: CoordinationStore, tmp_path: Path, spark: Any) -> World:
    return World(lake, store, tmp_path / "catalog.json", spark)


def commit_keyed(
    world: World,
    dt: str,
    name: str,
    ids: list[str],
    users: list[str],
    amounts: list[float],
    sources: Sources = (),
) -> RegisteredObject:
    """One small object of these records (event times at random in `dt`, seeded by `name`),
    committed by a source partition of its own (`keyed/<name>`), with `sources`."""
    rng = random.Random(name)
    table = pa.table(
        {
            "event_id": ids,
            "user_id": users,
            "amount": pa.array(amounts, pa.float64()),
            "event_time": pa.array(
                [epoch_us(dt) + rng.randrange(86_400_000_000) for _ in ids],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    path = world.lake.table_dir / f"dt={dt}" / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    small = SmallObject(TABLE, dt, f"file://{path}", path.stat().st_size, len(ids), sources=sources)
    (o,) = commit_source(world.store, f"keyed/{name}", [small], merge_after_s=600.0)
    return o


def served_by_date(world: World, dates: set[str]) -> list[tuple[str, str, str]]:
    """(event_id, dt, user_id) of every row an engine reading the catalog sees, sorted."""
    out = []
    for dt in sorted(dates):
        rows = read_partition(world.target, TABLE, dt)
        if not rows.num_rows:  # every key of the date served by another
            continue
        ids, users = rows.column("event_id").to_pylist(), rows.column("user_id").to_pylist()
        out += [(i, dt, u) for i, u in zip(ids, users, strict=True)]
    return sorted(out)


def marker(
    world: World, dt: str, group: str, dates: tuple[str, ...], **retracts: object
) -> SmallObject:
    """A marker on `dt` of the replacement `group` (retracting `retracts`: unit, key)."""
    sink = io.BytesIO()
    pq.write_table(pa.table({}), sink)
    url = world.objects.put_bytes(
        f"_retractions/dt={dt}/{group.replace('/', '_')}.parquet", sink.getvalue()
    )
    retraction = Retraction(group, dates, only_object=True, **retracts)  # type: ignore[arg-type]
    return SmallObject(TABLE, dt, url, len(sink.getvalue()), 0, sources=marker_sources(retraction))


def content(world: World, dt: str, name: str, ids: list[str], users: list[str]) -> SmallObject:
    """An object of `ids` on `dt`, not committed (from `f.jsonl`)."""
    table = pa.table(
        {
            "event_id": ids,
            "user_id": users,
            "amount": pa.array([1.0] * len(ids), pa.float64()),
            "event_time": pa.array(
                [epoch_us(dt) + 3_600_000_000] * len(ids),
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    path = world.lake.table_dir / f"dt={dt}" / f"{name}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, path)
    return SmallObject(
        TABLE, dt, f"file://{path}", path.stat().st_size, len(ids), sources=(("f.jsonl", len(ids)),)
    )


def commit_replacement(world: World, new: SmallObject, earlier: str) -> None:
    """`f.jsonl` rewritten, as one transaction (the replacement `keyed/new`): its new content
    `new` and a retraction marker on each date it touches — `earlier`, where unit `keyed/old`
    ingested it, and the new content's date."""
    group, dates = "keyed/new", tuple(sorted({earlier, new.dt}))
    markers = [marker(world, earlier, group, dates, unit="keyed/old", key="f.jsonl")]
    if new.dt != earlier:
        markers.append(marker(world, new.dt, group, dates, key="f.jsonl"))
    commit_source(world.store, group, [new, *markers], merge_after_s=600.0)
