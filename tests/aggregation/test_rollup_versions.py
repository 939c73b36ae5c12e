"""A rollup on columns added to the stream later (streams.yaml edited by hand: a new schema
version), over a partition whose objects span both versions: the rollup reads the older
objects' rows with those columns null (counted, no value to a sum or a max, a null key), and
the rollup check's from-scratch recomputation — over the published files and the small objects
above them — reads them the same way and agrees."""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.aggregation import checks
from resources.aggregation.partials import ArrowPartials
from resources.aggregation.runner import ROLLED_UP, RollupRunner
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.ledger.model import SmallObject
from resources.publication.outcome import PUBLISHED
from resources.publication.publisher import Publisher
from resources.rollup.cursor import rollup_id
from resources.rollup.spec import parse_rollups
from resources.schema.columns import ColumnSpec
from resources.schema.parquet_meta import version_metadata
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import followed_config, latest_columns
from resources.streams import StreamConfig
from tests.support.merge_child import (
    TABLE,
    Lake,
    commit_source,
    epoch_us,
    event_ids,
    write_small,
)

DT = "2027-01-15"
ADDED = (ColumnSpec("country", "string"), ColumnSpec("score", "long"))


class Partition:
    """One table partition of the `events` stream, its objects written and committed one by
    one in either version; the rows of each kept, to judge the rollup by hand."""

    def __init__(self, lake: Lake, store: CoordinationStore) -> None:
        self.lake, self.store = lake, store
        self.rng = random.Random(5)
        self.n = 0
        self.rows: list[dict[str, object]] = []

    def version_1(self) -> None:
        key, rows = f"src/{self.n:04d}", self.rng.randint(2, 4)
        self.n += 1
        small = write_small(self.lake, key, DT, rows, self.rng)
        commit_source(self.store, key, [small], merge_after_s=600.0)
        self.rows += [{"country": None, "score": None}] * rows

    def version_2(self, country: str | None, scores: list[int | None]) -> None:
        key = f"src/{self.n:04d}"
        self.n += 1
        ids = event_ids(key, DT, len(scores))
        table = pa.table(
            {
                "event_id": ids,
                "user_id": [f"user-{i}" for i in range(len(ids))],
                "amount": [1.0] * len(ids),
                "event_time": pa.array(
                    [epoch_us(DT) + i for i in range(len(ids))], pa.timestamp("us", tz="UTC")
                ),
                "country": pa.array([country] * len(ids), pa.string()),
                "score": pa.array(scores, pa.int64()),
            }
        )
        path = self.lake.table_dir / f"dt={DT}" / f"{key.replace('/', '-')}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table.replace_schema_metadata(version_metadata(2)), path)
        small = SmallObject(TABLE, DT, f"file://{path}", path.stat().st_size, len(ids))
        commit_source(self.store, key, [small], merge_after_s=600.0)
        self.rows += [{"country": country, "score": s} for s in scores]

    def expected(self) -> dict[str, tuple[object, ...]]:
        """(events, sum(score), max(score)) per country, from the rows as written."""
        out: dict[str, tuple[object, ...]] = {}
        for country in {r["country"] for r in self.rows}:
            scores = [r["score"] for r in self.rows if r["country"] == country]
            values = [s for s in scores if s is not None]
            key = "[null]" if country is None else f'["{country}"]'
            out[key] = (len(scores), sum(values), max(values) if values else None)
        return out


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(
        settings={}, root=str(tmp_path), max_objects=1000, max_bytes=1 << 30, interval="PT10M",
        timeout_s=60, renew_s=15,
    )  # fmt: skip


def by_country(config: StreamConfig) -> StreamConfig:
    """`config` as streams.yaml reads once `country` and `score` were added to its schema by
    hand, with a rollup on them."""
    columns = (*config.columns, *ADDED)
    declared = {
        "group_by": ["country"],
        "aggregates": {"events": "count", "score": "sum(score)", "best": "max(score)"},
    }
    (spec,) = parse_rollups({"by_country": declared}, {c.name: c.type for c in columns})
    return replace(config, columns=columns, rollups=(spec,))


def test_a_rollup_on_later_columns_reads_older_objects_as_no_value_and_checks_exact(
    lake: Lake, store: CoordinationStore, tmp_path: Path
) -> None:
    partition = Partition(lake, store)
    before = lake.config()
    followed_config(store, before)  # version 1: what the stream's runs followed so far
    partition.version_1()
    partition.version_1()

    config = by_country(before)
    assert followed_config(store, config).schema_version == 2  # the hand edit: version 2
    partition.version_2("DE", [3, None, 8])
    partition.version_2(None, [2])
    catalog = HiveManifestsTarget(LocalCatalog(tmp_path / "catalog.json"))
    published = Publisher(config, store, lake.objects(), catalog).publish_one(DT)
    assert published.outcome == PUBLISHED  # ids 1-4, read through the catalog by the check
    partition.version_1()  # above what is published: read as small objects by the check
    partition.version_2("FR", [None])

    (spec,) = config.rollups
    schema = latest_columns(store, config)
    assert [c.name for c in schema][-2:] == ["country", "score"]
    outcomes = RollupRunner(
        store,
        lake.objects(),
        TABLE,
        spec,
        lambda input_bytes: ArrowPartials(schema),
        owner="test",
        timing=lake.timing(),
        work_dir=tmp_path / "work",
        max_objects_per_batch=2,  # batches of older objects only, and of both versions
    ).run([DT])
    assert [(o.outcome, o.upto) for o in outcomes] == [(ROLLED_UP, 6)]

    state = {k: s.value for k, s in store.rollup_states(rollup_id(TABLE, spec), DT).items()}
    assert state == partition.expected()
    assert state['["FR"]'] == (1, 0, None)  # a sum of no value is 0, a max of none None
    [check] = checks.run_all(config, store, lake.objects(), catalog, full=True)
    assert check.passed, check.summary
    assert check.metadata["judged"] == 1
