"""A replacement unit (`on_change: replace`) through the runner, on both store backends: its
new content and a retraction marker on every date the replaced unit's rows and its own are on,
in ONE transaction; it waits (closed, retried) while the unit it replaces has not completed;
one that would not fit one transaction is refused with the reason, nothing committed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.outcomes import COMMITTED, UNREADABLE
from resources.ingestion.replacement import ReplacementMarkers
from resources.ingestion.work_units import UnitObject, WorkUnit, version_unit_key
from resources.ledger.retraction_marker import retraction_of
from resources.objects.local import LocalObjectStore
from tests.ingestion.test_ingestion_runner import make_runner
from tests.ingestion.test_unit_commits import STREAM, UnitReader, create_unit

pytestmark = pytest.mark.contract
NEW = version_unit_key("b", "e2")


def replacement(store: LeaseStore, replaces: str = "a") -> None:
    unit = WorkUnit(NEW, (UnitObject("b", 10, "e2"),), replaces=replaces)
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, [unit.key], progress_states=[unit.progress_state()])


def runner(store: LeaseStore, tmp_path: Path, read: UnitReader):  # type: ignore[no-untyped-def]
    r = make_runner(store, tmp_path, read)
    r.replacements = ReplacementMarkers(store, LocalObjectStore(tmp_path / "table"), STREAM, STREAM)
    return r


def markers(store: LeaseStore) -> dict[str, tuple]:
    found = {}
    for o in store.ledger_objects(STREAM):  # type: ignore[attr-defined]
        r = retraction_of(o.sources)
        if r is not None:
            assert o.row_count == 0 and o.source_partition_key == NEW
            found[o.dt] = (r.group, r.dates, r.unit, r.key, r.only_object)
    return found


def test_a_replacement_commits_its_rows_and_a_marker_on_every_date_together(
    store: LeaseStore, tmp_path: Path
) -> None:
    create_unit(store, ["a", "b"])
    dates = {"a": ["2026-01-01"], "b": ["2026-01-01", "2026-01-02"]}
    assert next(runner(store, tmp_path, UnitReader(dates, set())).ingest(["a"])).ok
    replacement(store)
    moved = UnitReader({"b": ["2026-01-03"]}, set())
    (outcome,) = runner(store, tmp_path, moved).ingest([NEW])
    assert outcome.outcome == COMMITTED, outcome.message
    every = ("2026-01-01", "2026-01-02", "2026-01-03")
    assert markers(store) == {
        "2026-01-01": (NEW, every, "a", "b", False),
        "2026-01-02": (NEW, every, "a", "b", False),
        "2026-01-03": (NEW, every, None, "b", False),
    }
    # One transaction: the unit's only commit record holds its row and the three markers.
    item = store.get(store.source_identifier(STREAM), NEW)
    assert item is not None and item.status is PartitionStatus.COMPLETED
    assert json.loads(item.progress_state or "{}")["small_objects"] == 4


def test_a_replacement_waits_for_the_unit_it_replaces(store: LeaseStore, tmp_path: Path) -> None:
    create_unit(store, ["a"])  # never ingested
    replacement(store)
    (outcome,) = runner(store, tmp_path, UnitReader({"b": ["2026-01-01"]}, set())).ingest([NEW])
    assert outcome.outcome == UNREADABLE and "waits for unit 'a'" in outcome.message
    assert markers(store) == {} and not store.ledger_objects(STREAM)  # type: ignore[attr-defined]


def test_a_replacement_over_one_transaction_is_refused(store: LeaseStore, tmp_path: Path) -> None:
    create_unit(store, ["a"])
    many = [f"2026-02-{d:02d}" for d in range(1, 29)]
    assert next(runner(store, tmp_path, UnitReader({"a": many}, set())).ingest(["a"])).ok
    replacement(store)
    (outcome,) = runner(store, tmp_path, UnitReader({"b": many}, set())).ingest([NEW])
    assert outcome.outcome == UNREADABLE and "more than one transaction holds" in outcome.message
    assert markers(store) == {}
