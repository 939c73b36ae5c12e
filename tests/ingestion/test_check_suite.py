"""The check registry on both store backends: completeness against a real source directory,
verdicts and severities; the full pipeline through `leasehold check` is in tests/cli."""

from __future__ import annotations

from pathlib import Path

from resources.coordination.backoff import ReopenBackoff
from resources.coordination.lease_store import LeaseStore
from resources.ingestion import check_suite
from resources.ingestion.checks import find_unleased_objects
from resources.ingestion.discovery import Discovery
from resources.ingestion.source_listing import source_lister
from resources.objects.local import LocalObjectStore
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
    assert outcome.passed and outcome.summary == "all 12 source objects have a lease item"


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


def test_run_all_runs_every_registered_check_read_only(store: LeaseStore, tmp_path: Path) -> None:
    lister = source_lister(source(tmp_path, ["a.jsonl"]))
    store.create_partitions(store.source_identifier(STREAM), ["a.jsonl"])
    store.flush_metrics()
    before = (list(store.iter_items()), store.read_metrics())

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
    assert [o.verdict for o in outcomes] == ["PASS"] * 4
    assert outcomes[1].summary == "skipped: the stream has no record_id"
    store.flush_metrics()
    assert (list(store.iter_items()), store.read_metrics()) == before


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
