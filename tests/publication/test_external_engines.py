"""Acceptance: engines that are not ours read a published partition and count exactly the
committed rows — DuckDB through the Hive symlink manifest the catalog points at (the directory
listed and every file in it read as a list of data files, as `SymlinkTextInputFormat` does) and
Spark through the Redshift Spectrum manifest (`spark.read.parquet` of its entries). Both before
the switch (live small objects) and after it (merged objects plus a delayed object merged and
republished). Local files only: DuckDB gets plain paths, no network, no extension."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb

from resources.publication.manifest import SPECTRUM_NAME, version_url_of
from tests.publication.conftest import DT, World
from tests.support.merge_child import TABLE


def local(url: str) -> str:
    assert url.startswith("file://"), url
    return url[len("file://") :]


def duckdb_count(world: World, dt: str) -> int:
    """Catalog -> symlink/ directory -> every manifest file in it -> the Parquet files."""
    partition = world.catalog.partition(TABLE, dt)
    assert partition is not None
    directory = Path(local(partition.location))
    paths = [
        local(line)
        for manifest in sorted(directory.iterdir())
        if not manifest.name.startswith((".", "_"))
        for line in manifest.read_text().splitlines()
        if line.strip()
    ]
    with duckdb.connect() as con:
        (count,) = con.execute("SELECT count(*) FROM read_parquet(?)", [paths]).fetchone()  # type: ignore[misc]
        (distinct,) = con.execute(  # type: ignore[misc]
            "SELECT count(DISTINCT event_id) FROM read_parquet(?)", [paths]
        ).fetchone()
    assert distinct == count
    return int(count)


def spark_count(world: World, spark: Any, dt: str) -> int:
    """Catalog -> the version directory -> its Spectrum manifest's entries -> Spark."""
    partition = world.catalog.partition(TABLE, dt)
    assert partition is not None
    spectrum = Path(local(version_url_of(partition.location))) / SPECTRUM_NAME
    entries = json.loads(spectrum.read_text())["entries"]
    assert all(e["mandatory"] and e["meta"]["content_length"] > 0 for e in entries)
    return int(spark.read.parquet(*[local(e["url"]) for e in entries]).count())


def committed_rows(world: World, dt: str) -> int:
    return sum(o.row_count for o in world.store.ledger_objects(TABLE, dt))


def test_duckdb_and_spark_count_the_committed_rows(world: World, spark: Any) -> None:
    world.ingest(3)
    world.publish()
    assert duckdb_count(world, DT) == spark_count(world, spark, DT) == committed_rows(world, DT)

    world.close()
    world.merge()
    assert world.publish().switched_now
    world.ingest(2)  # delayed
    world.merge()
    world.publish()
    assert world.current().switched and world.current().upper == 5
    assert duckdb_count(world, DT) == spark_count(world, spark, DT) == committed_rows(world, DT)
    assert committed_rows(world, DT) == sum(world.expected().values())
