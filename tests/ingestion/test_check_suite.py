"""The check registry on both store backends: completeness against a real source directory,
verdicts and severities; the full pipeline through `leasehold check` is in tests/cli."""

from __future__ import annotations

from pathlib import Path

from resources.check_outcome import CheckOutcome
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import ItemType, LeaseItem
from resources.coordination.lease_store import LeaseStore
from resources.ingestion import check_suite
from resources.ingestion.checks import find_unleased_objects
from resources.ingestion.discovery import Discovery
from resources.ingestion.source_listing import Lister, source_lister
from resources.ledger.check_scope import CheckScope
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
    assert [o.verdict for o in outcomes] == ["PASS"] * 4
    assert outcomes[1].summary == "skipped: the stream has no record_id"
    store.flush_metrics()
    assert (unit_items(store), store.read_metrics()[store.source_identifier(STREAM)]) == before
    memory = [
        i.partition_key for i in store.iter_items(store.source_identifier(STREAM, ItemType.GLOBAL))
    ]
    assert memory == ["check/events/source_completeness"]  # no record_id: nothing to remember


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
        read_column=lambda urls, column: [],
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
