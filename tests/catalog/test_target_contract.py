"""One contract for every `PublicationTarget`: Hive manifests (local catalog file, Glue) and
Iceberg (SQL catalog on SQLite, Glue with tables on `s3://`), all over real HTTP or real files
(`tests/catalog/conftest.py`). Creators and switchers racing are separate OS processes."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

import pytest

from resources.catalog.base import CatalogError, Column, ColumnTypeConflictError, TableDefinition
from resources.catalog.hive_target import symlink_location
from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.target import PartitionFile, PartitionSwitch, PublicationTarget
from tests.support import target_lake
from tests.support.target_lake import TargetSpec, rows, write_file

COLUMNS = (Column("id", "string"), Column("ts", "timestamp"), Column("n", "bigint"))


def events(spec: TargetSpec, *extra: Column) -> TableDefinition:
    return TableDefinition("events", (*COLUMNS, *extra), spec.root + "/")


def version(dt: str, seq: int) -> str:
    return f"file:///lake/events/_manifests/dt={dt}/v{seq:06d}/"


def switch(spec: TargetSpec, dt: str, seq: int, *files: PartitionFile) -> PartitionSwitch:
    return PartitionSwitch(dt, seq, version(dt, seq), files)


def content(target: PublicationTarget, dt: str) -> object:
    """What partition `dt` is made of: its files (Iceberg) or its manifest version (Hive)."""
    if isinstance(target, IcebergTarget):
        return sorted(f.url for f in target.data_files("events", dt))
    found = target.partition("events", dt)
    return None if found is None else found.location


def expected(target: PublicationTarget, sw: PartitionSwitch) -> object:
    if isinstance(target, IcebergTarget):
        return sorted(f.url for f in sw.files)
    return symlink_location(sw.version_url)


def snapshot_count(target: PublicationTarget) -> int | None:
    return len(target.snapshots("events")) if isinstance(target, IcebergTarget) else None


def test_create_grow_and_refuse_a_retype(spec: TargetSpec) -> None:
    target = spec.open()
    assert target.table("events") is None
    target.ensure_table(events(spec))
    target.ensure_table(events(spec))
    assert spec.open().table("events").columns == COLUMNS  # type: ignore[union-attr]
    spec.open().ensure_table(events(spec, Column("country", "string")))
    spec.open().ensure_table(events(spec))  # an older definition written last removes nothing
    asked = [Column("device", "string"), Column("id", "string")]
    assert target.add_columns("events", asked) == [Column("device", "string")]
    assert target.add_columns("events", asked) == []
    grown = (*COLUMNS, Column("country", "string"), Column("device", "string"))
    assert spec.open().table("events").columns == grown  # type: ignore[union-attr]
    with pytest.raises(ColumnTypeConflictError, match=r"'n' as bigint, not string"):
        target.add_columns("events", [Column("extra", "int"), Column("n", "string")])
    with pytest.raises(ColumnTypeConflictError, match=r"'ts' as timestamp, not date"):
        target.ensure_table(events(spec, Column("more", "int")).__class__(
            "events", (Column("ts", "date"), Column("more", "int")), spec.root + "/"))  # fmt: skip
    assert spec.open().table("events").columns == grown  # type: ignore[union-attr]
    with pytest.raises(CatalogError, match="clicks"):
        target.add_columns("clicks", [Column("x", "string")])
    with pytest.raises(CatalogError, match="clicks"):
        target.partitions("clicks")
    with pytest.raises(CatalogError, match="clicks"):
        target.switch("clicks", [switch(spec, "2024-01-01", 1)])


def test_creators_in_several_processes_all_succeed(spec: TargetSpec, tmp_path: Path) -> None:
    """Processes ensure the table at once, each with a column of its own: none fails, and
    every column lands."""
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    names = [f"c{i}" for i in range(3)]
    children = []
    for name in names:
        definition = dataclasses.asdict(events(spec, Column(name, "string")))
        args = (spec.as_json(), json.dumps(definition), go, str(tmp_path / name))
        children.append(ctx.Process(target=target_lake.ensure_in_child, args=args))
    for c in children:
        c.start()
    go.set()
    for c in children:
        c.join(180)
        assert c.exitcode == 0
    columns = spec.open().table("events").columns  # type: ignore[union-attr]
    assert columns[:3] == COLUMNS and sorted(c.name for c in columns[3:]) == names


def test_switch_is_idempotent_and_never_goes_back(spec: TargetSpec) -> None:
    target = spec.open()
    target.ensure_table(events(spec))
    dt = "2024-03-05"
    a, b = write_file(spec, "a.parquet", rows("a", 3)), write_file(spec, "b.parquet", rows("b", 2))
    c = write_file(spec, "c.parquet", rows("c", 4))
    assert target.partition("events", dt) is None and target.partitions("events") == []

    assert target.switch("events", [switch(spec, dt, 2, a, b)]) == [dt]
    assert content(target, dt) == expected(target, switch(spec, dt, 2, a, b))
    assert target.partition("events", dt).seq == 2  # type: ignore[union-attr]
    before = snapshot_count(target)

    assert target.switch("events", [switch(spec, dt, 2, a, b)]) == []  # replayed
    assert target.switch("events", [switch(spec, dt, 1, c)]) == []  # older
    assert snapshot_count(target) == before  # nothing committed
    assert content(spec.open(), dt) == expected(target, switch(spec, dt, 2, a, b))

    newer = switch(spec, dt, 5, b, c)  # b stays, a goes, c comes
    assert target.switch("events", [newer]) == [dt]
    assert content(spec.open(), dt) == expected(target, newer)
    assert [(p.dt, p.seq) for p in spec.open().partitions("events")] == [(dt, 5)]


def test_several_dates_in_one_call(spec: TargetSpec) -> None:
    target = spec.open()
    target.ensure_table(events(spec))
    files = {
        dt: write_file(spec, f"{dt}.parquet", rows(dt, 2)) for dt in ("2024-01-02", "2024-01-01")
    }
    switches = [switch(spec, dt, 3, f) for dt, f in files.items()]
    assert target.switch("events", switches, summary={"run": "r1"}) == sorted(files)
    for s in switches:
        assert content(target, s.dt) == expected(target, s)
    assert [(p.dt, p.seq) for p in target.partitions("events")] == [
        ("2024-01-01", 3), ("2024-01-02", 3)]  # fmt: skip


def test_the_same_date_twice_is_one_change(spec: TargetSpec) -> None:
    target, other = spec.open(), spec.open()
    target.ensure_table(events(spec))
    a = write_file(spec, "a.parquet", rows("a", 1))
    before = snapshot_count(target)
    assert target.switch("events", [switch(spec, "2024-01-01", 4, a)]) == ["2024-01-01"]
    assert other.switch("events", [switch(spec, "2024-01-01", 4, a)]) == []
    if before is not None:
        assert snapshot_count(target) == before + 1


def test_processes_switching_different_dates_at_once_all_land(
    spec: TargetSpec, tmp_path: Path
) -> None:
    target = spec.open()
    target.ensure_table(events(spec))
    dts = ["2024-02-01", "2024-02-02", "2024-02-03"]
    wanted = {dt: switch(spec, dt, 1, write_file(spec, f"{dt}.parquet", rows(dt, 2))) for dt in dts}
    ctx = multiprocessing.get_context("spawn")
    go = ctx.Event()
    children = [
        ctx.Process(
            target=target_lake.switch_in_child,
            args=(
                spec.as_json(),
                "events",
                target_lake.switches_json([wanted[dt]]),
                go,
                str(tmp_path / dt),
            ),
        )  # fmt: skip
        for dt in dts
    ]
    for c in children:
        c.start()
    go.set()
    for c in children:
        c.join(180)
        assert c.exitcode == 0
    assert [json.loads((tmp_path / dt).read_text()) for dt in dts] == [[dt] for dt in dts]
    again = spec.open()
    for dt in dts:
        assert content(again, dt) == expected(again, wanted[dt])
    assert snapshot_count(again) in (None, len(dts))  # Iceberg: one snapshot per committer
