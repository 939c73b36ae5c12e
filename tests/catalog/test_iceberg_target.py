"""What only the Iceberg target has: one snapshot per call, time travel, polars, schema growth
read back, expiry and manifests that keep metadata flat, never a data file deleted, a catalog
that is down; and `internals`' reliance on pyiceberg 0.12."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import polars as pl
import pytest
from pyiceberg.table import Table
from pyiceberg.table.update.snapshot import _OverwriteFiles

from resources.catalog.base import CatalogUnreachableError, Column, TableDefinition
from resources.catalog.iceberg import internals
from resources.catalog.iceberg.catalogs import open_catalog
from resources.catalog.iceberg.files import data_file
from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PartitionSwitch
from resources.retry import RetryPolicy
from tests.support.aws_server import free_port
from tests.support.target_lake import TargetSpec, rows, write_file

COLUMNS = (Column("id", "string"), Column("ts", "timestamp"), Column("n", "bigint"))


def opened(spec: TargetSpec, **kwargs: object) -> IcebergTarget:
    catalog = open_catalog(spec.settings, s3_endpoint_url=spec.s3_endpoint_url)
    target = IcebergTarget(catalog, **kwargs)  # type: ignore[arg-type]
    target.ensure_table(TableDefinition("events", COLUMNS, spec.root))
    return target


def test_one_snapshot_per_call_and_time_travel(iceberg_spec: TargetSpec) -> None:
    target = opened(iceberg_spec)
    a, b = (write_file(iceberg_spec, f"{x}.parquet", rows(x, 2)) for x in "ab")
    c = write_file(iceberg_spec, "c.parquet", rows("c", 3))
    first = [
        PartitionSwitch("2024-01-01", 1, "v/", (a,)),
        PartitionSwitch("2024-01-02", 1, "v/", (b,)),
    ]
    assert target.switch("events", first, summary={"run": "one"}) == ["2024-01-01", "2024-01-02"]
    assert target.switch("events", [PartitionSwitch("2024-01-01", 2, "v/", (c,))]) == ["2024-01-01"]
    old, new = target.snapshots("events")
    assert old.seqs == {"2024-01-01": 1, "2024-01-02": 1} and old.summary["run"] == "one"
    assert new.seqs == {"2024-01-01": 2} and new.operation == "overwrite"
    assert target.data_files("events", "2024-01-01", old.snapshot_id) == [a]
    assert target.data_files("events", "2024-01-01") == [c]
    assert target.read("events", "2024-01-01", old.snapshot_id).column("id").to_pylist() == [
        "a-0",
        "a-1",
    ]
    assert target.read("events").num_rows == 5
    assert target.snapshot_as_of("events", new.committed_at_ms) == new
    assert target.snapshot_as_of("events", old.committed_at_ms - 1) is None
    s3 = {"aws_endpoint_url": iceberg_spec.s3_endpoint_url, "aws_region": "us-east-1",
          "aws_allow_http": "true"} if iceberg_spec.s3_endpoint_url else None  # fmt: skip
    frame = pl.scan_iceberg(target.load("events"), storage_options=s3).collect().sort("id")
    assert frame["id"].to_list() == ["b-0", "b-1", "c-0", "c-1", "c-2"]
    assert [str(d) for d in frame["dt"].to_list()] == ["2024-01-02"] * 2 + ["2024-01-01"] * 3


def test_a_column_added_later_reads_as_null_in_older_files(iceberg_spec: TargetSpec) -> None:
    target = opened(iceberg_spec)
    old = write_file(iceberg_spec, "old.parquet", rows("old", 1))
    target.switch("events", [PartitionSwitch("2024-01-01", 1, "v/", (old,))])
    assert target.add_columns("events", [Column("country", "string")]) == [
        Column("country", "string")
    ]
    new = write_file(iceberg_spec, "new.parquet", rows("new", 1, country=["fr"]))
    target.switch("events", [PartitionSwitch("2024-01-01", 2, "v/", (old, new))])
    read = target.read("events", "2024-01-01", columns=["id", "country"]).sort_by("id")
    assert read.to_pylist() == [{"id": "new-0", "country": "fr"}, {"id": "old-0", "country": None}]


def waiting_once(
    real: Callable[[str], Table], barrier: threading.Barrier, loads: list[str]
) -> Callable[[str], Table]:
    """`real`, but the first call waits at `barrier` after loading."""
    mine: list[str] = []

    def load(table: str) -> Table:
        found = real(table)
        loads.append(table)
        mine.append(table)
        if len(mine) == 1:
            barrier.wait()
        return found

    return load


def test_columns_added_at_once_by_two_writers_both_land(
    iceberg_spec: TargetSpec, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both writers load the same schema before either commits: the second commit is refused,
    re-planned on the new schema, and lands."""
    opened(iceberg_spec)
    writers = [opened(iceberg_spec) for _ in range(2)]
    both_loaded = threading.Barrier(2, timeout=60)
    loads: list[str] = []
    for w in writers:
        monkeypatch.setattr(w, "load", waiting_once(w.load, both_loaded, loads))
    wanted = [Column("country", "string"), Column("device", "string")]
    with ThreadPoolExecutor(2) as pool:
        pairs = zip(writers, wanted, strict=True)
        racing = [pool.submit(w.add_columns, "events", [c]) for w, c in pairs]
        added = [r.result() for r in racing]
    assert added == [[wanted[0]], [wanted[1]]]
    assert len(loads) >= 3  # one of them loaded again after its commit was refused
    columns = iceberg_spec.open().table("events").columns  # type: ignore[union-attr]
    assert columns[:3] == COLUMNS and sorted(columns[3:], key=lambda c: c.name) == wanted


def test_metadata_stays_flat_and_no_data_file_is_deleted(tmp_path: Path) -> None:
    spec = TargetSpec(CatalogSettings(iceberg_catalog_path=str(tmp_path / "c.db")), "iceberg",
                      f"file://{tmp_path}/lake/events")  # fmt: skip
    target = opened(spec, max_snapshots=5)
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(40)]
    counts = []
    for i, f in enumerate(files):
        dt = f"2024-01-{1 + i % 3:02d}"
        assert target.switch("events", [PartitionSwitch(dt, i + 1, "v/", (f,))]) == [dt]
        table = target.load("events")
        counts.append(len(table.current_snapshot().manifests(table.io)))  # type: ignore[union-attr]
    assert len(target.snapshots("events")) == 5
    # Per snapshot: at most one manifest per live date plus this switch's deletions.
    assert max(counts[5:]) <= 4, counts
    assert all(Path(f.url[len("file://") :]).exists() for f in files)  # Iceberg deleted none
    metadata = list((tmp_path / "lake/events/metadata").glob("*.metadata.json"))
    assert len(metadata) <= 21  # previous-versions-max 20, plus the current one
    assert target.read("events").num_rows == 3


def test_plain_pyiceberg_overwrite_keeps_delete_only_manifests(tmp_path: Path) -> None:
    """Why `internals.LeaseholdOverwrite` exists (pyiceberg 0.12): if this starts failing,
    pyiceberg drops them itself and the override can go."""
    assert internals.INSTALLED.startswith(internals.WRITTEN_AGAINST)
    assert issubclass(internals.LeaseholdOverwrite, _OverwriteFiles)
    spec = TargetSpec(CatalogSettings(iceberg_catalog_path=str(tmp_path / "c.db")), "iceberg",
                      f"file://{tmp_path}/lake/events")  # fmt: skip
    target = opened(spec)
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(6)]
    table = target.load("events")
    for f in files:
        entry = data_file(table.io, table.metadata, "2024-01-01", f)
        with table.transaction() as tx, tx.update_snapshot().overwrite() as ov:
            for task in table.scan().plan_files():
                ov.delete_data_file(task.file)
            ov.append_data_file(entry)
        table = target.load("events")
    manifests = table.current_snapshot().manifests(table.io)  # type: ignore[union-attr]
    assert len(manifests) == len(files)  # one live, the rest only DELETED entries: kept


def test_a_catalog_that_is_down_fails_quickly(tmp_path: Path) -> None:
    settings = CatalogSettings(catalog="glue", glue_endpoint_url=f"http://127.0.0.1:{free_port()}")
    quick = RetryPolicy(max_attempts=3, base_delay_s=0.001, max_delay_s=0.005)
    started = time.monotonic()
    with pytest.raises(CatalogUnreachableError, match="after 3 attempts") as err:
        open_catalog(settings, retry=quick).ensure_namespace()
    assert "Iceberg Glue catalog 'leasehold'" in str(err.value)
    assert time.monotonic() - started < 30


def test_a_namespace_another_process_created_between_check_and_insert_is_fine(
    tmp_path: Path,
) -> None:
    """Found by tests/chaos/test_iceberg_publishers.py: two publishers creating the SQL
    catalog's namespace at once; the second's insert failed on the unique key (the check
    before it had seen no namespace) and its publication failed."""
    settings = CatalogSettings(iceberg_catalog_path=str(tmp_path / "c.db"))
    other, mine = open_catalog(settings), open_catalog(settings)
    seen_missing = [False]
    exists = mine.catalog.namespace_exists

    def raced(namespace: object) -> bool:
        if not seen_missing[0]:  # the check sees none; the other creates it right after
            seen_missing[0] = True
            other.ensure_namespace()
            return False
        return exists(namespace)  # type: ignore[arg-type]

    mine.catalog.namespace_exists = raced  # type: ignore[method-assign]
    mine.ensure_namespace()
    assert seen_missing[0] and exists(mine.namespace)
