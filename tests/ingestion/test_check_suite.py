"""The check registry on both store backends: completeness against a real source directory,
verdicts and severities; the full pipeline through `leasehold check` is in tests/cli."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pyarrow as pa

from resources.check_outcome import CheckOutcome
from resources.coordination import health
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import ItemType, LeaseItem
from resources.coordination.lease_store import LeaseStore
from resources.coordination.source_changes import ACKNOWLEDGED, SourceChange
from resources.ingestion import check_suite
from resources.ingestion.checks import find_unleased_objects
from resources.ingestion.discovery import Discovery
from resources.ingestion.source_listing import Lister, source_lister
from resources.ingestion.unit_progress import add_counts
from resources.ledger.check_scope import CheckScope, with_memory
from resources.ledger.model import SmallObject
from resources.objects.local import LocalObjectStore
from resources.stores.base import CoordinationStore
from resources.streams import ColumnSpec, StreamConfig

STREAM = "events"


def source(tmp_path: Path, keys: list[str]) -> LocalObjectStore:
    for key in keys:
        path = tmp_path / "src" / key
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}\n")
    return LocalObjectStore(tmp_path / "src")


def config(record_id: str | None = None) -> StreamConfig:
    return StreamConfig(
        name=STREAM,
        source="file:///nowhere",
        format="jsonl",
        columns=(ColumnSpec("id", "string"), ColumnSpec("at", "timestamp")),
        event_time="at",
        table="file:///nowhere/table",
        quarantine="file:///nowhere/quarantine",
        record_id=record_id,
    )


def test_completeness_pages_through_the_source_and_splits_at_the_cursor(
    store: LeaseStore, tmp_path: Path
) -> None:
    keys = [f"2026/01/0{d}/part-{i}.jsonl" for d in (1, 2) for i in range(5)]
    lister = source_lister(source(tmp_path, keys))
    found = Discovery(store, STREAM, lister, owner="d1").discover(None)
    assert found.created == 10

    report = find_unleased_objects(store, STREAM, lister, page_size=3)
    assert (report.listed, report.unleased, report.first) == (10, 0, [])
    assert report.cursor == keys[-1]

    # One object discovery passed without leasing it (lost), one it has not reached yet.
    lost, late = "2026/01/01/part-2b.jsonl", "2026/01/03/part-0.jsonl"
    source(tmp_path, [lost, late])
    report = find_unleased_objects(store, STREAM, lister, page_size=3)
    assert (report.listed, report.unleased, report.behind_cursor) == (12, 2, 1)
    assert report.first == [lost, late]
    outcome = check_suite.source_completeness(store, STREAM, lister)
    assert outcome.verdict == "FAIL" and outcome.failed
    assert outcome.summary == (
        f"2 of 12 source objects have no lease item (1 behind the discovery cursor): {lost} "
        "(and 1 more)"
    )
    assert outcome.metadata["first_unleased"] == f"{lost}\n{late}"

    store.create_partitions(store.source_identifier(STREAM), [lost, late])
    outcome = check_suite.source_completeness(store, STREAM, lister)
    assert outcome.passed and outcome.summary == "all 12 source objects listed have a lease item"


def test_a_dead_letter_warns_and_a_stuck_lease_fails(store: LeaseStore, clock) -> None:
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, ["bad", "held"])
    bad = store.acquire(sid, "bad", "w1", 60)
    store.close(bad.token, ReopenBackoff.fixed(0), max_closed_count=0, reason="unreadable")
    warned = check_suite.lease_health(store, STREAM, 60, 1800)
    assert warned.verdict == "WARN" and not warned.failed
    assert warned.summary == (
        "0 stuck, 0 waiting, 1 dead-lettered: events|partition / bad: unreadable"
    )

    store.acquire(sid, "held", "w1", 60)
    clock.advance(60 + 121)  # expired, and for over twice the ownership timeout since
    failed = check_suite.lease_health(store, STREAM, 60, 1800)
    assert failed.verdict == "FAIL" and failed.severity == "error"
    assert failed.summary.startswith("1 stuck, 0 waiting, 1 dead-lettered: ")


def unit_items(store: LeaseStore) -> list[LeaseItem]:
    return list(store.iter_items(store.source_identifier(STREAM)))


def test_run_all_runs_every_registered_check_writing_only_its_memory(
    store: LeaseStore, tmp_path: Path
) -> None:
    lister = source_lister(source(tmp_path, ["a.jsonl"]))
    store.create_partitions(store.source_identifier(STREAM), ["a.jsonl"])
    store.flush_metrics()
    before = (unit_items(store), store.read_metrics()[store.source_identifier(STREAM)])

    def read_nothing(urls, column):  # type: ignore[no-untyped-def]
        raise AssertionError("no ledger objects, nothing to read")

    outcomes = check_suite.run_all(
        store,
        config(),
        table=STREAM,
        lister=lister,
        read_column=read_nothing,
        ownership_timeout_s=60,
        unassigned_retry_after_s=1800,
    )
    assert [o.name for o in outcomes] == list(check_suite.CHECKS)
    assert [o.verdict for o in outcomes] == ["PASS"] * len(check_suite.CHECKS)
    assert outcomes[1].summary == "skipped: the stream has no record_id"
    store.flush_metrics()
    assert (unit_items(store), store.read_metrics()[store.source_identifier(STREAM)]) == before
    memory = [
        i.partition_key for i in store.iter_items(store.source_identifier(STREAM, ItemType.GLOBAL))
    ]
    # No record_id: unique_record_ids has nothing to remember; changed_sources remembers nothing.
    assert memory == [
        "check/events/lease_health",
        "check/events/rows_reconcile",
        "check/events/source_completeness",
    ]


def test_completeness_keeps_the_first_keys_and_counts_them_all(
    store: LeaseStore, tmp_path: Path
) -> None:
    keys = [f"part-{i:03d}.jsonl" for i in range(60)]
    lister = source_lister(source(tmp_path, keys))
    outcome = check_suite.source_completeness(store, STREAM, lister)
    assert outcome.summary == (
        "60 of 60 source objects have no lease item (0 behind the discovery cursor): "
        "part-000.jsonl (and 59 more)"
    )
    assert outcome.metadata["first_unleased"].splitlines() == keys[:50]
    assert outcome.metadata["discovery_cursor"] == "none"


def completeness(store: LeaseStore, lister: Lister, full: bool = False) -> CheckOutcome:
    return check_suite.run_one(
        "source_completeness",
        store,
        config(),
        table=STREAM,
        lister=lister,
        read_column=lambda urls, column: pa.chunked_array([], pa.string()),
        ownership_timeout_s=60,
        unassigned_retry_after_s=1800,
        full=full,
    )


def test_an_incremental_pass_lists_only_after_what_it_found_held(
    store: LeaseStore, tmp_path: Path
) -> None:
    keys = [f"2026/01/01/part-{i}.jsonl" for i in range(5)]
    objects = source(tmp_path, keys)
    lister = source_lister(objects)
    Discovery(store, STREAM, lister, owner="d1").discover(None)
    first = completeness(store, lister)
    assert first.summary == "all 5 source objects listed have a lease item (full audit)"

    again = completeness(store, lister)
    assert again.passed and again.summary == "all 0 source objects listed have a lease item"

    new = "2026/01/02/part-0.jsonl"
    source(tmp_path, [new])
    waiting = completeness(store, lister)  # after discovery's cursor: waiting, a warning
    assert (waiting.verdict, waiting.summary) == (
        "WARN",
        f"1 of 1 source objects have no lease item (0 behind the discovery cursor): {new}",
    )
    Discovery(store, STREAM, lister, owner="d1").discover(None)
    assert completeness(store, lister).summary.startswith("all 1 source objects listed")

    # One behind the remembered key: only a full pass reads there (reconciliation leases it).
    lost = "2026/01/01/part-2b.jsonl"
    source(tmp_path, [lost])
    assert completeness(store, lister).passed
    audit = completeness(store, lister, full=True)
    assert audit.failed and audit.severity == "error" and lost in audit.summary
    assert completeness(store, lister).summary.startswith("1 of 7 source objects")


def test_the_memory_keeps_the_units_that_reach_past_a_page(
    store: LeaseStore, tmp_path: Path
) -> None:
    """A work unit of many objects may end past where a pass stopped: the next pass resumes
    there and must still see the rest of that unit's objects as held."""
    keys = [f"2026/01/01/part-{i:02d}.jsonl" for i in range(25)]
    lister = source_lister(source(tmp_path, keys))
    discovery = Discovery(store, STREAM, lister, owner="d1", unit_max_objects=10)
    assert discovery.discover(None).created == 3  # units of keys 0-9, 10-19, 20-24
    new = "2026/01/02/part-00.jsonl"
    source(tmp_path, [new])

    # Pages of 7: the fourth (keys 21-24 and the new one) is not all held, so the pass
    # remembers the end of the third (key 20) and the unit of keys 20-24 reaching past it.
    scope = CheckScope(full=True)
    report = find_unleased_objects(store, STREAM, lister, page_size=7, scope=scope)
    assert (report.listed, report.first) == (26, [new])
    assert scope.source_reached == (keys[20], [keys[20]])

    after, covering = scope.source_reached
    resumed = CheckScope(full=False, source_after=after, source_covering=covering)
    report = find_unleased_objects(store, STREAM, lister, page_size=7, scope=resumed)
    assert (report.listed, report.first) == (5, [new])
    # Without the unit carried, keys 21-24 would look unheld: the memory must carry it.
    bare = CheckScope(full=False, source_after=after)
    assert find_unleased_objects(store, STREAM, lister, page_size=7, scope=bare).unleased == 5


def commit_unit(store: LeaseStore, key: str, rows: dict[str, int], *, extra_rows: int = 0) -> None:
    """Commit work unit `key` with `rows` per date, its progress as the runner writes it;
    `extra_rows` makes the progress claim more rows than the ledger gets."""
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, [key])
    lease = store.acquire(sid, key, "w1", 60)
    objects = [
        SmallObject(STREAM, dt, f"file:///lake/{STREAM}/dt={dt}/{key}.parquet", 100, n)
        for dt, n in rows.items()
    ]
    progress: dict[str, Any] = {}
    add_counts(progress, objects, STREAM)
    progress["rows_written"] += extra_rows
    progress["rows_read"] += extra_rows
    store.commit(lease.token, objects, progress_state=json.dumps(progress))


def reconcile_pass(store: LeaseStore, full: bool = False) -> CheckOutcome:
    return with_memory(
        store,
        STREAM,
        STREAM,
        "rows_reconcile",
        lambda scope: check_suite.rows_reconcile(store, STREAM, STREAM, scope),
        full,
    )


def test_rows_reconcile_judges_units_completed_since_from_the_partitions_they_wrote(
    store: LeaseStore, clock
) -> None:
    # Each pass runs past the index-lag window after the commits before it (a pass reads the
    # last minute's completions again: the status index may lag), so none is read twice.
    commit_unit(store, "a", {"2026-01-01": 3, "2026-01-02": 4})
    clock.advance(120)
    first = reconcile_pass(store)
    assert first.passed and first.summary == "1 committed partitions reconcile (full audit)"
    assert first.metadata["table_partitions_read"] == "all"

    commit_unit(store, "b", {"2026-01-03": 5})
    clock.advance(120)
    second = reconcile_pass(store)
    assert second.passed
    assert second.summary == "1 work units completed since the last pass reconcile"
    assert (second.metadata["partitions_checked"], second.metadata["table_partitions_read"]) == (
        1,
        1,
    )

    commit_unit(store, "c", {"2026-01-01": 2, "2026-01-03": 1}, extra_rows=1)
    clock.advance(120)
    failed = reconcile_pass(store)
    assert failed.failed and failed.summary.startswith(
        "1 of 1 committed partitions do not reconcile: c: read 4, quarantined 0 but the "
        "ledger has 3 table rows"
    )
    assert failed.metadata["table_partitions_read"] == 2
    # A failure forgets the memory: the next pass judges every unit again, and still fails.
    again = reconcile_pass(store)
    assert again.failed and again.summary.startswith("1 of 3 committed partitions")
    assert again.metadata["full_audit"] is True


def test_rows_reconcile_reads_the_whole_ledger_for_a_unit_without_its_partitions(
    store: LeaseStore, clock
) -> None:
    commit_unit(store, "a", {"2026-01-01": 3})
    clock.advance(120)
    assert reconcile_pass(store).passed
    # Committed before units kept where they wrote: its rows are found in the whole ledger.
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, ["old"])
    lease = store.acquire(sid, "old", "w1", 60)
    old = SmallObject(STREAM, "2026-01-05", "file:///lake/old.parquet", 100, 7)
    store.commit(
        lease.token,
        [old],
        progress_state=json.dumps({"rows_read": 7, "rows_written": 7, "rows_quarantined": 0}),
    )
    clock.advance(120)
    outcome = reconcile_pass(store)
    assert outcome.passed and outcome.metadata["partitions_checked"] == 1
    assert outcome.metadata["table_partitions_read"] == "all"


def health_pass(store: LeaseStore, full: bool = False) -> CheckOutcome:
    return with_memory(
        store,
        STREAM,
        STREAM,
        "lease_health",
        lambda scope: check_suite.lease_health(store, STREAM, 60, 1800, scope),
        full,
    )


def dead_letter(store: LeaseStore, key: str, why: str) -> None:
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, [key])
    lease = store.acquire(sid, key, "w1", 60)
    store.close(lease.token, ReopenBackoff.fixed(0), max_closed_count=0, reason=why)


def test_lease_health_remembers_dead_letters_and_reads_only_what_completed_since(
    store: LeaseStore, clock
) -> None:
    dead_letter(store, "bad", "unreadable")
    commit_unit(store, "good", {"2026-01-01": 1})
    clock.advance(120)
    first = health_pass(store)
    assert first.verdict == "WARN" and first.metadata["full_audit"] is True
    assert first.metadata["dead_letters"] == 1

    dead_letter(store, "worse", "truncated")
    clock.advance(120)
    second = health_pass(store)
    assert second.verdict == "WARN" and second.metadata["full_audit"] is False
    assert second.metadata["dead_letters"] == 2  # the remembered one and the new one
    assert "bad: unreadable" in second.metadata["details"]
    assert "worse: truncated" in second.metadata["details"]

    # A stuck lease is found by status, whatever the memory; the error forgets it.
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, ["held"])
    store.acquire(sid, "held", "w1", 60)
    clock.advance(60 + 121)
    stuck = health_pass(store)
    assert stuck.verdict == "FAIL" and stuck.metadata["stuck_leases"] == 1
    assert stuck.metadata["dead_letters"] == 2
    assert health_pass(store).metadata["full_audit"] is True


def test_completed_since_reads_every_item_across_pages_of_equal_priorities(
    store: LeaseStore, clock, monkeypatch
) -> None:
    monkeypatch.setattr(health, "COMPLETED_PAGE", 3)
    sid = store.source_identifier(STREAM)
    groups = [["a", "b"], ["c", "d", "e"], ["f"], ["g", "h"]]  # completed in the same ms
    for group in groups:
        for key in group:
            store.create_partitions(sid, [key])
            store.complete(store.acquire(sid, key, "w1", 60).token)
        clock.advance(0.005)
    found = [i.partition_key for i in health.completed_since(store, sid, None, 2**62)]
    assert sorted(found) == [k for g in groups for k in g] and len(found) == 8
    first = [i.priority for i in store.completed_between(sid, None, 2**62, 1)][0]
    later = [i.partition_key for i in health.completed_since(store, sid, first, 2**62)]
    assert sorted(later) == ["c", "d", "e", "f", "g", "h"]


def test_a_file_the_ledger_names_that_is_gone_fails_the_id_check_instead_of_crashing(
    store: LeaseStore, tmp_path: Path
) -> None:
    """A merged or small object moved away under a committed partition: `check --full` once
    crashed with the reader's FileNotFoundError; the partition cannot be vouched for: FAIL."""
    commit_unit(store, "a.jsonl", {"2026-01-01": 2, "2026-01-02": 1})
    lake = LocalObjectStore(tmp_path / "lake")

    def read_column(urls: list[str], column: str) -> pa.ChunkedArray:
        if any("2026-01-02" in u for u in urls):
            return lake.read_column([lake.url("gone.parquet")], column)  # FileNotFoundError
        return pa.chunked_array([pa.array(["x", "y"])])

    outcome = check_suite.unique_record_ids(
        store, STREAM, "id", read_column, CheckScope.everything()
    )
    assert outcome.verdict == "FAIL"
    assert "1 table partitions name a file that cannot be read" in outcome.summary
    assert "dt=2026-01-02: FileNotFoundError" in outcome.summary
    assert outcome.metadata["unreadable_partitions"] == 1
    assert outcome.metadata["table_partitions_checked"] == 1


def test_changed_sources_warns_while_a_change_is_pending_and_passes_once_acknowledged(
    store: CoordinationStore,
) -> None:
    sid = store.source_identifier(STREAM)
    assert check_suite.changed_sources(store, STREAM).verdict == "PASS"
    (change,) = store.record_changes(sid, [SourceChange("a.jsonl", "e2", 3, "e1", 3, "a", 1)])
    outcome = check_suite.changed_sources(store, STREAM)
    assert outcome.verdict == "WARN" and outcome.summary.endswith(": a.jsonl")
    assert f"leasehold changes ack {STREAM}" in outcome.summary
    store.set_change_state(sid, change, ACKNOWLEDGED)
    assert check_suite.changed_sources(store, STREAM).verdict == "PASS"


def test_every_ingestion_check_is_in_the_check_list_of_the_docs() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "concepts" / "checks.md").read_text()
    listed = set(re.findall(r"^\| `([a-z_]+)` \|", page, flags=re.M))
    assert set(check_suite.CHECKS) <= listed
