"""The compaction checks over a fake of the ledger's reads and a real local object store: a
consistent table passes every check, and each way of breaking it fails the check that owns it,
naming the first offender."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.check_outcome import CheckOutcome
from resources.compaction import checks
from resources.coordination.items import ItemType, LeaseItem, PartitionStatus
from resources.ledger import check_scope
from resources.ledger.merge import MergeRange, merged_object_name
from resources.ledger.model import RegisteredObject, TablePartition
from resources.objects.local import LocalObjectStore
from resources.stores.base import CoordinationStore
from resources.streams import ColumnSpec, StreamConfig

TABLE, DT, DT2, DT3 = "events", "2026-01-15", "2026-01-16", "2026-01-17"
NOW_MS = 1_800_000_000_000
TIMEOUT_S = 60.0


@dataclass
class FakeLedger:
    """The few reads the checks make of a `CoordinationStore`, over plain values."""

    partitions: dict[str, TablePartition] = field(default_factory=dict)
    ranges: dict[str, list[MergeRange]] = field(default_factory=dict)
    objects: list[RegisteredObject] = field(default_factory=list)
    jobs: list[LeaseItem] = field(default_factory=list)
    stale_rows: dict[str, TablePartition] = field(default_factory=dict)
    """What `table_partitions` returns instead of the stored row (a read that raced a commit)."""

    def table_partitions(self, table: str) -> list[TablePartition]:
        rows = [self.stale_rows.get(dt, p) for dt, p in sorted(self.partitions.items())]
        return [p for p in rows if p.table == table]

    def table_partition(self, table: str, dt: str) -> TablePartition | None:
        p = self.partitions.get(dt)
        return p if p is not None and p.table == table else None

    def merge_ranges(self, table: str, dt: str) -> list[MergeRange]:
        return list(self.ranges.get(dt, [])) if table == TABLE else []

    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        return [o for o in self.objects if o.table == table and dt in (None, o.dt)]

    def source_identifier(self, stream: str, item_type: ItemType = ItemType.PARTITION) -> str:
        return f"{stream}|{item_type.value}"

    def iter_items(self, source_identifier: str | None = None) -> Iterator[LeaseItem]:
        return iter([i for i in self.jobs if source_identifier in (None, i.source_identifier)])

    def now_ms(self) -> int:
        return NOW_MS

    # The checks' memory (`resources.ledger.check_scope`): global state under no real lease.
    memory: dict[str, dict[str, Any]] = field(default_factory=dict)

    def read_global_state(self, stream: str, name: str) -> dict[str, Any]:
        return dict(self.memory.get(name, {}))

    def acquire_global_state(
        self, stream: str, name: str, owner: str, timeout_s: float
    ) -> SimpleNamespace:
        return SimpleNamespace(token=name)

    def release_global_state(self, token: str, state: dict[str, Any] | None = None) -> None:
        if state is not None:
            self.memory[token] = state


def small(dt: str, object_id: int) -> RegisteredObject:
    return RegisteredObject(
        TABLE, dt, object_id, f"file:///src/{dt}/{object_id}.parquet", 100, object_id * 10,
        "events|partition", f"src-{object_id}", 1, False,
    )  # fmt: skip


def job(
    dt: str, status: PartitionStatus = PartitionStatus.UNASSIGNED, expired_s: float = 0
) -> LeaseItem:
    assigned = status is PartitionStatus.ASSIGNED
    return LeaseItem(
        source_identifier=f"{TABLE}|{ItemType.MERGE_JOB.value}",
        partition_key=dt,
        status=status,
        owner="merger-1" if assigned else None,
        progress_state=None,
        ownership_timeout_ms=NOW_MS - int(expired_s * 1000) if assigned else None,
        reopen_at_ms=None,
        closed_count=0,
        version=1,
        epoch=3,
        priority="0",
        expiration_time=None,
    )


def write_merged(store: LocalObjectStore, dt: str, lower: int, upper: int, rows: int) -> MergeRange:
    local = store.root.parent / "scratch.parquet"
    pq.write_table(pa.table({"id": list(range(rows))}), local)
    url = store.move_file(local, f"merged/dt={dt}/3-abc/{merged_object_name(lower, upper)}")
    size = store.size(store.key_of(url))
    assert size is not None
    return MergeRange(TABLE, dt, lower, upper, url, size, rows, epoch=3, updated_at_ms=NOW_MS)


def sentinel(dt: str) -> MergeRange:
    return MergeRange(TABLE, dt, None, 0, None, 0, 0, 0, NOW_MS)


@pytest.fixture
def lake(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "table")


@pytest.fixture
def ledger(lake: LocalObjectStore) -> FakeLedger:
    """DT: five objects merged in (0, 3] and (3, 5]; DT2: two objects waiting for their job;
    DT3: merged, then one delayed object landed, its job running."""
    return FakeLedger(
        partitions={
            DT: TablePartition(TABLE, DT, next_object_id=6, merged_upper=5),
            DT2: TablePartition(TABLE, DT2, next_object_id=3, merge_due_at_ms=NOW_MS + 1),
            DT3: TablePartition(
                TABLE,
                DT3,
                next_object_id=3,
                last_live_object_id=1,
                merged_upper=1,
                merge_due_at_ms=NOW_MS,
            ),  # fmt: skip
        },
        ranges={
            DT: [sentinel(DT), write_merged(lake, DT, 0, 3, 60), write_merged(lake, DT, 3, 5, 90)],
            DT3: [sentinel(DT3), write_merged(lake, DT3, 0, 1, 10)],
        },
        objects=[small(DT, i) for i in range(1, 6)]
        + [small(DT2, i) for i in (1, 2)]
        + [small(DT3, i) for i in (1, 2)],
        jobs=[job(DT), job(DT3, PartitionStatus.ASSIGNED, expired_s=-30)],
    )


def config() -> StreamConfig:
    return StreamConfig(
        name=TABLE,
        source="file:///nowhere",
        format="jsonl",
        columns=(ColumnSpec("id", "long"), ColumnSpec("at", "timestamp")),
        event_time="at",
        table="file:///nowhere/table",
        quarantine="file:///nowhere/quarantine",
    )


def run_all(
    ledger: FakeLedger, lake: LocalObjectStore, table: str | None = None, full: bool = True
) -> list[CheckOutcome]:
    """Full passes by default: these tests break the table behind the ledger's back, which
    only a full pass sees (the incremental ones are tested at the end)."""
    store = cast(CoordinationStore, ledger)  # only the reads the checks make
    return checks.run_all(
        store, config(), objects=lake, ownership_timeout_s=TIMEOUT_S, table=table, full=full
    )


def run(ledger: FakeLedger, lake: LocalObjectStore, name: str) -> CheckOutcome:
    return {o.name: o for o in run_all(ledger, lake)}[name]


def test_a_consistent_table_passes_every_check(ledger: FakeLedger, lake: LocalObjectStore) -> None:
    outcomes = run_all(ledger, lake)
    assert [o.name for o in outcomes] == list(checks.CHECKS)
    assert [o.verdict for o in outcomes] == ["PASS"] * 4, [o.summary for o in outcomes]
    assert [o.summary for o in outcomes] == [
        "3 table partitions have a valid merge chain (full audit)",
        "all 3 merged objects exist with their recorded length (full audit)",
        "all 3 merge ranges hold exactly the rows of their small objects (full audit)",
        "3 table partitions, 2 with a pending merge job, none stranded, no dead merge",
    ]


def test_a_gap_in_the_chain_fails(ledger: FakeLedger, lake: LocalObjectStore) -> None:
    s, a, b = ledger.ranges[DT]
    ledger.ranges[DT] = [s, a, replace(b, lower=4)]
    outcome = run(ledger, lake, "merge_chain")
    assert outcome.failed
    assert outcome.summary == (
        "1 of 3 table partitions have a broken merge chain: events dt=2026-01-15: (4, 5] does "
        "not start where (0, 3] ends"
    )


def test_a_chain_past_the_committed_ids_or_off_its_row_fails(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    ledger.partitions[DT] = replace(ledger.partitions[DT], next_object_id=5)
    ledger.partitions[DT3] = replace(ledger.partitions[DT3], merged_upper=2)
    outcome = run(ledger, lake, "merge_chain")
    assert outcome.failed
    assert outcome.summary == (
        "2 of 3 table partitions have a broken merge chain: events dt=2026-01-15: the chain "
        "reaches 5, past the last committed id 4 (and 1 more)"
    )
    assert (
        "events dt=2026-01-17: merged_upper is 2, the chain ends at 1"
        in (outcome.metadata["details"])
    )


def test_a_row_read_before_a_racing_merge_is_judged_again(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    # The row was read before objects 4 and 5 were committed and merged: an old snapshot, not
    # a broken chain.
    ledger.stale_rows[DT] = replace(ledger.partitions[DT], next_object_id=4, merged_upper=3)
    assert run(ledger, lake, "merge_chain").passed


def test_a_missing_or_truncated_merged_object_fails(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    first, second = ledger.ranges[DT][1:]
    lake.delete(lake.key_of(second.url or ""))
    outcome = run(ledger, lake, "merged_objects_exist")
    assert outcome.failed
    assert outcome.summary == (
        f"1 of 3 merged objects are missing or wrong: events dt=2026-01-15 (3, 5]: {second.url} "
        "does not exist"
    )
    lake.put_bytes(lake.key_of(first.url or ""), b"PAR1")
    assert (
        f"(0, 3]: {first.url} is 4 bytes, the ledger records {first.content_length}"
        in (run(ledger, lake, "merged_objects_exist").metadata["details"])
    )


def test_a_merged_object_outside_the_table_fails(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    r = ledger.ranges[DT3][1]
    ledger.ranges[DT3][1] = replace(r, url="s3://elsewhere/part.parquet")
    outcome = run(ledger, lake, "merged_objects_exist")
    assert outcome.failed and "events dt=2026-01-17 (0, 1]: no merged object under" in (
        outcome.summary
    )


def test_rows_must_match_the_small_objects_and_the_footer(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    s, a, b = ledger.ranges[DT]
    # (0, 3] records 61 rows: its small objects hold 60 and so does its object's footer.
    ledger.ranges[DT] = [s, replace(a, row_count=61), b]
    outcome = run(ledger, lake, "merged_rows")
    assert outcome.failed
    assert outcome.summary == (
        "2 row mismatches in 3 merge ranges: events dt=2026-01-15 (0, 3]: records 61 rows, its "
        "small objects hold 60 (and 1 more)"
    )
    assert f"(0, 3]: records 61 rows, {a.url} holds 60" in outcome.metadata["details"]


def test_a_merged_object_with_other_rows_than_recorded_fails(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    r = ledger.ranges[DT3][1]
    pq.write_table(pa.table({"id": [1, 2, 3]}), lake.root / lake.key_of(r.url or ""))
    outcome = run(ledger, lake, "merged_rows")
    assert outcome.failed
    assert outcome.summary == (
        f"1 row mismatches in 3 merge ranges: events dt=2026-01-17 (0, 1]: records 10 rows, "
        f"{r.url} holds 3"
    )


def test_a_range_over_ids_missing_from_the_ledger_or_an_unreadable_object_fails(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    ledger.objects = [o for o in ledger.objects if (o.dt, o.object_id) != (DT, 4)]
    r = ledger.ranges[DT3][1]
    lake.delete(lake.key_of(r.url or ""))
    outcome = run(ledger, lake, "merged_rows")
    assert outcome.failed
    assert outcome.summary.startswith(
        "2 row mismatches in 3 merge ranges: events dt=2026-01-15 (3, 5]: small object id 4 of "
        "the range is not in the ledger (and 1 more)"
    )
    assert (
        "dt=2026-01-17 (0, 1]: cannot read the merged object's footer"
        in (outcome.metadata["details"])
    )


def test_a_stranded_partition_and_stray_jobs_fail(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    ledger.partitions[DT2] = replace(ledger.partitions[DT2], merge_due_at_ms=None)
    ledger.jobs += [job(DT), job("2026-02-30")]
    outcome = run(ledger, lake, "merge_jobs")
    assert outcome.failed and outcome.severity == "error"
    assert outcome.summary == (
        "3 merge job problems (1 partitions stranded), 0 dead merges: events dt=2026-01-15: "
        "2 merge job items (and 2 more)"
    )
    details = outcome.metadata["details"]
    assert "events dt=2026-02-30: a merge job for no table partition" in details
    assert "events dt=2026-01-16: 2 unmerged objects and no pending merge job" in details


def test_a_dead_merge_nobody_took_over_warns(ledger: FakeLedger, lake: LocalObjectStore) -> None:
    # Expired for 1.5 timeouts: a takeover is simply not due yet.
    ledger.jobs[1] = job(DT3, PartitionStatus.ASSIGNED, expired_s=1.5 * TIMEOUT_S)
    assert run(ledger, lake, "merge_jobs").passed
    ledger.jobs[1] = job(DT3, PartitionStatus.ASSIGNED, expired_s=2 * TIMEOUT_S + 1)
    outcome = run(ledger, lake, "merge_jobs")
    assert outcome.verdict == "WARN" and not outcome.failed
    assert outcome.summary.startswith(
        "0 merge job problems (0 partitions stranded), 1 dead merges: events dt=2026-01-17: "
        "merge job held by merger-1 (epoch 3) expired at "
    )
    assert outcome.metadata["dead_merges"] == 1


def test_one_check_runs_alone_by_name(ledger: FakeLedger, lake: LocalObjectStore) -> None:
    store = cast(CoordinationStore, ledger)
    ledger.partitions[DT2] = replace(ledger.partitions[DT2], merge_due_at_ms=None)
    outcome = checks.run_one(
        "merge_jobs", store, config(), objects=lake, ownership_timeout_s=TIMEOUT_S
    )
    assert (outcome.name, outcome.failed) == ("merge_jobs", True)
    with pytest.raises(ValueError, match="no compaction check 'nope'"):
        checks.run_one("nope", store, config(), objects=lake, ownership_timeout_s=TIMEOUT_S)


def test_quarantine_tables_are_skipped(ledger: FakeLedger, lake: LocalObjectStore) -> None:
    ledger.partitions["2026-01-18"] = TablePartition(f"{TABLE}.quarantine", "2026-01-18", 9)
    outcomes = run_all(ledger, lake, table=f"{TABLE}.quarantine")
    assert [(o.passed, o.metadata) for o in outcomes] == [
        (True, {"skipped": "quarantine table"})
    ] * 4
    assert outcomes[0].summary == "skipped: events.quarantine is a quarantine table, never merged"


def test_an_incremental_pass_judges_only_the_partitions_whose_row_moved(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    assert all(o.passed for o in run_all(ledger, lake, full=False))  # no memory yet: full
    again = {o.name: o for o in run_all(ledger, lake, full=False)}
    assert again["merge_chain"].summary == (
        "0 table partitions have a valid merge chain (3 unchanged since the last pass not read "
        "again)"
    )
    assert again["merged_rows"].metadata["unchanged_skipped"] == 3

    # A merge lands in DT2: its row moves, so only DT2 is read — and its broken range found.
    ledger.ranges[DT2] = [sentinel(DT2), write_merged(lake, DT2, 0, 2, 5)]
    ledger.partitions[DT2] = replace(ledger.partitions[DT2], merged_upper=2)
    outcome = {o.name: o for o in run_all(ledger, lake, full=False)}["merged_rows"]
    assert outcome.failed and "dt=2026-01-16" in outcome.summary
    assert outcome.metadata["unchanged_skipped"] == 2


def test_damage_that_moves_no_row_is_found_by_a_full_pass_and_a_failure_forgets(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    assert all(o.passed for o in run_all(ledger, lake, full=False))
    merged = ledger.ranges[DT][1].url
    assert merged is not None
    lake.delete(lake.key_of(merged))
    # Nothing in the ledger moved: an incremental pass does not read DT again (documented).
    assert {o.name: o for o in run_all(ledger, lake, full=False)}["merged_objects_exist"].passed
    # The full audit finds it, and forgets the memory: the next plain pass is full and fails.
    assert {o.name: o for o in run_all(ledger, lake, full=True)}["merged_objects_exist"].failed
    outcome = {o.name: o for o in run_all(ledger, lake, full=False)}["merged_objects_exist"]
    assert outcome.failed and outcome.metadata["full_audit"]


def test_a_pass_is_a_full_audit_when_the_last_one_is_a_day_old(
    ledger: FakeLedger, lake: LocalObjectStore
) -> None:
    run_all(ledger, lake, full=False)
    for state in ledger.memory.values():
        state["full_at_ms"] = NOW_MS - check_scope.FULL_AUDIT_EVERY_MS
    outcome = {o.name: o for o in run_all(ledger, lake, full=False)}["merge_chain"]
    assert outcome.summary.endswith("(full audit)") and outcome.metadata["unchanged_skipped"] == 0
