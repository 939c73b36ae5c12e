"""An Iceberg table's metadata over time: expiry by count and by age (never a branch or tag
head), the files expired snapshots leave on storage deleted (never a data file, never one a
retained snapshot names), another engine's expiry between plan and commit retried, small
manifests merged, and the files leasehold's GC must keep (`referenced_files`,
`metadata_prefix`, `metadata_files`)."""

from __future__ import annotations

import time
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from pyiceberg.manifest import ManifestFile
from pyiceberg.table import Table

from resources.catalog.base import CatalogError
from resources.catalog.iceberg import internals
from resources.catalog.iceberg.files import data_file
from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PartitionFile, PartitionSwitch
from tests.catalog.test_iceberg_target import opened
from tests.support.target_lake import TargetSpec, rows, write_file


def local_spec(tmp_path: Path) -> TargetSpec:
    settings = CatalogSettings(iceberg_catalog_path=str(tmp_path / "c.db"))
    return TargetSpec(settings, "iceberg", f"file://{tmp_path}/lake/events")


def on_storage(spec: TargetSpec, prefix: str) -> set[str]:
    """Every file under `prefix` but the metadata.json files (bounded by pyiceberg)."""
    if prefix.startswith("s3://"):
        bucket, _, key = prefix[len("s3://") :].partition("/")
        s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=spec.s3_endpoint_url)
        pages = s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=key)
        found = {f"s3://{bucket}/{o['Key']}" for p in pages for o in p.get("Contents", [])}
    else:
        found = {f"file://{p}" for p in Path(prefix[len("file://") :]).iterdir()}
    return {f for f in found if not f.endswith((".metadata.json", "/"))}  # "/": S3 folders


def named(table: Table) -> set[str]:
    """The manifest lists and manifests of every retained snapshot."""
    out: set[str] = set()
    for s in table.metadata.snapshots:
        out.add(s.manifest_list)
        out.update(m.manifest_path for m in s.manifests(table.io))
    return out


def switch_one(target: IcebergTarget, dt: str, seq: int, f: PartitionFile) -> int:
    """Switch `dt` to `f`; the id of the snapshot committed."""
    assert target.switch("events", [PartitionSwitch(dt, seq, "v/", (f,))]) == [dt]
    return target.snapshots("events")[-1].snapshot_id


def test_metadata_on_storage_stays_bounded(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    target = opened(spec, max_snapshots=4)
    prefix = f"{spec.root}/metadata/"
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(40)]
    state: dict[str, str] = {}
    expected: dict[int, list[str]] = {}
    counts = []
    for i, f in enumerate(files):
        dt = f"2024-01-{1 + i % 3:02d}"
        sid = switch_one(target, dt, i + 1, f)
        state[dt] = f"f{i}-0"
        expected[sid] = sorted(state.values())
        counts.append(len(list(Path(prefix[len("file://") :]).iterdir())))
    table = target.load("events")
    assert on_storage(spec, prefix) == named(table)  # nothing else left behind
    assert max(counts[30:]) <= max(counts[20:30]), counts  # flat, not growing with switches
    assert counts[-1] <= 21 + 4 + 4 * 4  # metadata.json kept, lists, manifests (≤ 4 each)
    retained = [s.snapshot_id for s in target.snapshots("events")]
    assert len(retained) == 4
    for sid in retained:  # each still plans and reads (its manifest list and manifests)
        read = target.read("events", snapshot_id=sid).column("id").to_pylist()
        assert sorted(read) == expected[sid]
    assert all(Path(f.url[len("file://") :]).exists() for f in files)  # no data file deleted


def test_another_engine_expiring_between_plan_and_commit_is_a_retry(
    iceberg_spec: TargetSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = opened(iceberg_spec, max_snapshots=3)
    other = opened(iceberg_spec)
    files = [write_file(iceberg_spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(4)]
    for i in range(3):
        switch_one(target, "2024-01-01", i + 1, files[i])
    oldest = target.snapshots("events")[0].snapshot_id
    before = target.load("events")
    expired_files = {before.metadata.snapshots[0].manifest_list} | {
        m.manifest_path for m in before.metadata.snapshots[0].manifests(before.io)
    }
    real_commit, commits = internals.commit, []

    def racing(tx: Any, producer: internals.LeaseholdOverwrite) -> Table:
        commits.append(1)
        if len(commits) == 1:  # planned, expiring `oldest`: another engine expires it first
            other.load("events").maintenance.expire_snapshots().by_id(oldest).commit()
        return real_commit(tx, producer)

    monkeypatch.setattr(internals, "commit", racing)
    sid = switch_one(target, "2024-01-01", 4, files[3])
    assert len(commits) == 2  # re-planned on the new head
    assert [s.snapshot_id for s in target.snapshots("events")][-1] == sid
    assert target.data_files("events", "2024-01-01") == [files[3]]
    table = target.load("events")
    # The failed attempt's files went with it; the expired snapshot's may stay (the other
    # engine expired it: only a commit's own expiry deletes files).
    left = on_storage(iceberg_spec, f"{iceberg_spec.root}/metadata/") - named(table)
    assert left <= expired_files, left


def test_snapshots_older_than_the_retention_expire_but_never_a_head(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    now = [time.time()]
    target = opened(spec, retention_s=60, clock=lambda: now[0])
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(5)]
    s1, s2, s3 = (switch_one(target, f"2024-01-0{i + 1}", 1, files[i]) for i in range(3))
    table = target.load("events")
    table.manage_snapshots().create_tag(s1, "audit").commit()
    assert [s.snapshot_id for s in target.snapshots("events")] == [s1, s2, s3]  # all young

    now[0] += 3600
    s4 = switch_one(target, "2024-01-04", 1, files[3])
    # s2 expired by age; s1 is a tag's head, s3 was the current snapshot when s4 was planned.
    assert [s.snapshot_id for s in target.snapshots("events")] == [s1, s3, s4]
    now[0] += 3600
    s5 = switch_one(target, "2024-01-05", 1, files[4])
    assert [s.snapshot_id for s in target.snapshots("events")] == [s1, s4, s5]
    assert target.read("events", snapshot_id=s1).column("id").to_pylist() == ["f0-0"]
    assert on_storage(spec, f"{spec.root}/metadata/") == named(target.load("events"))


def test_many_small_switches_keep_the_current_manifests_few(tmp_path: Path) -> None:
    spec = local_spec(tmp_path)
    target = opened(spec, max_snapshots=5)
    table = target.load("events")
    assert table.metadata.properties["commit.manifest-merge.enabled"] == "true"
    with table.transaction() as tx:
        tx.set_properties({"commit.manifest.min-count-to-merge": "5"})
    counts = []
    for i in range(24):  # each switch a new date: one more manifest with a live file
        dt = (date(2024, 1, 1) + timedelta(days=i)).isoformat()
        switch_one(target, dt, 1, write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)))
        table = target.load("events")
        counts.append(len(table.current_snapshot().manifests(table.io)))  # type: ignore[union-attr]
    assert max(counts) < 5, counts  # merged once 5 would be listed
    assert target.read("events").num_rows == 24
    assert on_storage(spec, f"{spec.root}/metadata/") == named(table)


def test_referenced_files_and_the_metadata_prefix(iceberg_spec: TargetSpec) -> None:
    target = opened(iceberg_spec, max_snapshots=3)
    a, b, c, d = (write_file(iceberg_spec, f"{x}.parquet", rows(x, 1)) for x in "abcd")
    for seq, (dt, f) in enumerate(
        [("2024-01-01", a), ("2024-01-01", b), ("2024-01-02", c), ("2024-01-01", d)], start=1
    ):
        switch_one(target, dt, seq, f)
    # a's snapshot expired (3 kept): b is still referenced by the oldest retained one.
    assert target.referenced_files("events") == {b.url, c.url, d.url}
    prefix = target.metadata_prefix("events")
    assert prefix == f"{iceberg_spec.root}/metadata/"
    assert all(p.startswith(prefix) for p in named(target.load("events")))
    with pytest.raises(CatalogError, match="clicks"):
        target.referenced_files("clicks")
    with pytest.raises(CatalogError, match="clicks"):
        target.metadata_prefix("clicks")
    with pytest.raises(CatalogError, match="clicks"):
        target.metadata_files("clicks")


def test_metadata_files_name_what_landed_and_not_what_a_killed_commit_wrote(
    iceberg_spec: TargetSpec,
) -> None:
    """Everything under `metadata/` is named by the table's current metadata, except what a
    writer wrote and never swapped in (here: staged, then abandoned, as a publisher SIGKILLed
    before the catalog's swap leaves it): that is what leasehold's GC may take for an orphan."""
    target = opened(iceberg_spec, max_snapshots=3)
    files = [write_file(iceberg_spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(5)]
    for i, f in enumerate(files[:4]):
        switch_one(target, f"2024-01-0{1 + i % 2}", i + 1, f)
    table = target.load("events")
    prefix = target.metadata_prefix("events")
    in_use = target.metadata_files("events")
    assert named(table) | {table.metadata_location} <= in_use
    everything = on_storage(iceberg_spec, prefix) | {table.metadata_location}
    assert everything <= in_use  # nothing left behind by the commits that landed

    tx = internals.transaction(table)  # a commit that never lands
    from_killed = internals.stage_overwrite(tx, [], [table_file(table, files[4])], {})
    written = set(from_killed._written_manifests) | {tx.table_metadata.snapshots[-1].manifest_list}
    assert written <= on_storage(iceberg_spec, prefix)
    assert not written & target.metadata_files("events")
    assert target.metadata_files("events") == in_use


def table_file(table: Table, f: PartitionFile) -> Any:
    return data_file(table.io, table.metadata, "2024-01-03", f)


def test_referenced_files_reads_each_manifest_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = local_spec(tmp_path)
    target = opened(spec, max_snapshots=6)
    for i in range(8):
        switch_one(target, f"2024-01-0{1 + i % 2}", i + 1, write_file(spec, f"f{i}.parquet",
                   rows(f"f{i}", 1)))  # fmt: skip
    real, read = ManifestFile.fetch_manifest_entry, []

    def counting(self: ManifestFile, *args: Any, **kwargs: Any) -> Any:
        read.append(self.manifest_path)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(ManifestFile, "fetch_manifest_entry", counting)
    found = target.referenced_files("events")
    table = target.load("events")
    assert sorted(read) == sorted({m for m in named(table) if "snap-" not in m})
    # f0 went with the expired snapshots; f1 (2024-01-02) is live in the oldest retained one.
    assert found == {f"file://{tmp_path}/lake/events/data/f{i}.parquet" for i in range(1, 8)}


def test_referenced_files_reads_again_when_expiry_removed_what_it_planned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = local_spec(tmp_path)
    target = opened(spec, max_snapshots=2)
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(4)]
    for i in range(3):
        switch_one(target, "2024-01-01", i + 1, files[i])
    stale = target.load("events")
    switch_one(target, "2024-01-01", 4, files[3])  # expires a snapshot `stale` holds
    real_load, loads = target.load, []

    def load(table: str) -> Table:
        loads.append(table)
        return stale if len(loads) == 1 else real_load(table)

    monkeypatch.setattr(target, "load", load)
    assert target.referenced_files("events") == {files[2].url, files[3].url}
    assert len(loads) == 3  # stale, checked (moved on), read again

    current = real_load("events")
    Path(current.metadata.snapshots[0].manifest_list[len("file://") :]).unlink()
    monkeypatch.setattr(target, "load", real_load)
    with pytest.raises(CatalogError, match="files referenced by 'events'"):
        target.referenced_files("events")  # a retained snapshot's list is gone: no partial set
