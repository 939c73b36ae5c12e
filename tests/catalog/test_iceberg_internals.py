"""What `resources.catalog.iceberg.internals` relies on in pyiceberg 0.12 to keep a switch's
cost flat as snapshots accumulate: its staged metadata equals pyiceberg's own (without the deep
copy), a switch never runs pyiceberg's deep-copying `update_table_metadata`, and a table loaded
after this process committed it is not parsed again — while another writer's commit is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pyiceberg import serializers
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.table import update as pyiceberg_update
from pyiceberg.table.snapshots import Snapshot
from pyiceberg.table.update import SetPropertiesUpdate, update_table_metadata

from resources.catalog.base import Column, TableDefinition
from resources.catalog.iceberg import internals
from resources.catalog.iceberg.catalogs import NAMESPACE, open_catalog
from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PartitionSwitch
from tests.support.target_lake import TargetSpec, rows, write_file

COLUMNS = (Column("id", "string"), Column("ts", "timestamp"), Column("n", "bigint"))


def local(tmp_path: Path) -> TargetSpec:
    settings = CatalogSettings(iceberg_catalog_path=str(tmp_path / "c.db"))
    return TargetSpec(settings, "iceberg", f"file://{tmp_path}/lake/events")


def opened(spec: TargetSpec, **kwargs: object) -> IcebergTarget:
    target = IcebergTarget(open_catalog(spec.settings), **kwargs)  # type: ignore[arg-type]
    target.ensure_table(TableDefinition("events", COLUMNS, spec.root))
    return target


def switched(spec: TargetSpec, target: IcebergTarget, n: int) -> list:
    files = [write_file(spec, f"f{i}.parquet", rows(f"f{i}", 1)) for i in range(n)]
    for i, f in enumerate(files):
        target.switch("events", [PartitionSwitch(f"2024-01-0{1 + i % 3}", i + 1, "v/", (f,))])
    return files


def test_staged_metadata_equals_pyicebergs_own(tmp_path: Path) -> None:
    """The same updates (properties, an expiry, a snapshot and its ref, as a switch stages
    them) give the same metadata as pyiceberg's `update_table_metadata`, and it shares the
    snapshots it did not change with the base instead of copying them."""
    spec = local(tmp_path)
    target = opened(spec, max_snapshots=3)
    files = switched(spec, target, 4)
    table = target.load("events")
    tx = internals.transaction(table)
    tx.set_properties({"leasehold.seq.2024-01-01": "9"})
    internals.stage_expiry(tx, [table.metadata.snapshots[0].snapshot_id])
    internals.stage_overwrite(tx, [], [], {"run": "x"})
    updates = (*tx._updates, SetPropertiesUpdate(updates={"k": "v"}))
    ours = internals.staged_metadata(table.metadata, updates, table.metadata_location)
    theirs = update_table_metadata(
        table.metadata, updates, metadata_location=table.metadata_location
    )
    assert ours == theirs.model_copy(update={"last_updated_ms": ours.last_updated_ms})
    assert ours.snapshots != table.metadata.snapshots and ours.properties["k"] == "v"
    assert ours.last_updated_ms >= table.metadata.last_updated_ms
    assert ours.snapshots[1] is table.metadata.snapshots[2]  # shared, not copied
    assert len(files) == 4


def test_a_switch_never_deep_copies_the_metadata(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pyiceberg's `update_table_metadata` deep-copies every retained snapshot and a commit
    reaches it about twenty times (`Transaction.table_metadata`, the catalog's staging): a
    switch at 500 snapshots cost 5x one at 50. Neither path runs it for a switch; the staged
    state is computed once per update."""
    spec = local(tmp_path)
    target = opened(spec, max_snapshots=3)
    files = switched(spec, target, 4)
    extra = write_file(spec, "g.parquet", rows("g", 1))
    copies: list[int] = []
    staged: list[int] = []
    real, ours = pyiceberg_update.update_table_metadata, internals.staged_metadata
    for module in ("pyiceberg.table", "pyiceberg.catalog", "pyiceberg.table.update"):
        monkeypatch.setattr(
            f"{module}.update_table_metadata",
            lambda *a, **k: copies.append(1) or real(*a, **k),
        )
    monkeypatch.setattr(internals, "staged_metadata", lambda *a: staged.append(1) or ours(*a))
    # Sets the seqs, expires the oldest snapshot, deletes one file and adds one.
    assert target.switch("events", [PartitionSwitch("2024-01-01", 9, "v/", (extra,))])
    assert copies == []
    assert 1 <= len(staged) <= 5, len(staged)
    assert len(target.snapshots("events")) == 3
    assert target.data_files("events", "2024-01-01") == [extra]
    assert target.read("events").num_rows == 3 and len(files) == 4


def test_a_table_this_process_committed_is_not_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A metadata file is never rewritten, so the one this process wrote (or read) is not
    parsed again; one another writer committed is read from storage, whatever was held."""
    spec = local(tmp_path)
    target = opened(spec)
    switched(spec, target, 3)
    parsed: list[str] = []
    real = serializers.FromInputFile.table_metadata
    monkeypatch.setattr(
        serializers.FromInputFile,
        "table_metadata",
        staticmethod(lambda f, *a: parsed.append(f.location) or real(f, *a)),
    )
    before = target.load("events")
    assert parsed == []  # the metadata this process just wrote
    plain = SqlCatalog("leasehold", uri=f"sqlite:///{tmp_path / 'c.db'}")  # another writer
    other = plain.load_table((NAMESPACE, "events"))
    assert parsed == [before.metadata_location]  # pyiceberg's own catalog parses
    other.transaction().set_properties({"written": "elsewhere"}).commit_transaction()
    after = target.load("events")
    assert after.metadata_location != before.metadata_location
    assert after.metadata.properties["written"] == "elsewhere"
    assert parsed[-1] == after.metadata_location  # read from storage: not held here
    assert target.switch("events", [PartitionSwitch("2024-01-01", 99, "v/", ())]) == ["2024-01-01"]
    assert target.load("events").metadata.properties["written"] == "elsewhere"


def test_parsed_metadata_holds_the_most_recent_few() -> None:
    held = internals.ParsedMetadata(size=2)
    marker = object()
    held.put("a", marker)  # type: ignore[arg-type]
    held.put("b", marker)  # type: ignore[arg-type]
    assert held.get("a") is marker  # now the most recent
    held.put("c", marker)  # type: ignore[arg-type]
    assert held.get("b") is None and held.get("a") is marker and held.get("c") is marker


def test_the_metadata_file_written_is_pyicebergs_json_with_the_snapshots_text_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each metadata file holds the JSON value pyiceberg would write for its metadata, also
    after expiry rewrote a retained snapshot (its parent cleared); only the snapshots a commit
    added or changed are serialised."""
    spec = local(tmp_path)
    target = opened(spec, max_snapshots=3)
    switched(spec, target, 3)
    dumped: list[int] = []
    real = Snapshot.model_dump_json
    monkeypatch.setattr(
        Snapshot, "model_dump_json", lambda self, **k: dumped.append(1) or real(self, **k)
    )
    for seq in range(10, 14):
        dumped.clear()
        target.switch("events", [PartitionSwitch("2024-01-01", seq, "v/", ())])
        table = target.load("events")
        written = json.loads(Path(table.metadata_location[len("file://") :]).read_text())
        assert written == json.loads(table.metadata.model_dump_json())
        assert written["snapshots"][0].get("parent-snapshot-id") is None  # rewritten by expiry
        assert len(written["snapshots"]) == 3
        assert len(dumped) <= 2, dumped  # the new snapshot, and the one expiry rewrote
