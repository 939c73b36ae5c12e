"""`MergeRunner` and `MergeSchedule` in one process, on both store backends: late data, carry-
over, a job another merge holds, a job with nothing left to merge, and a writer whose object
does not hold its inputs' rows. Real small Parquet objects, merged by the pyarrow stand-in for
the Spark writer (`tests.support.arrow_merge`); the store's clock is the fake one, so "due" and
"expired" are decided by moving it, never by sleeping."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from resources.compaction import checks
from resources.compaction.closing import closes_at_ms
from resources.compaction.merge_runner import (
    BUSY,
    FAILED,
    MERGED,
    NOTHING_TO_MERGE,
    MergeRunner,
    served_inputs,
)
from resources.compaction.merge_schedule import MergeSchedule
from resources.coordination.items import ItemType, LeaseItem, PartitionStatus, iso_utc
from resources.dedupe.served import ServedFile, ServedState
from resources.ledger.merge import MergeRange
from resources.ledger.model import RegisteredObject
from resources.stores.base import CoordinationStore
from tests.support.arrow_merge import ArrowMergeWriter, ArrowWritten
from tests.support.fakes import FakeClock
from tests.support.merge_child import (
    TABLE,
    Lake,
    catch_up,
    commit_source,
    event_ids,
    write_small,
)

DT = "2027-01-15"
"""The fake clock's day (it starts at 2027-01-15 08:00 UTC): open until 2027-01-16 01:00."""
INTERVAL_S = 600.0


@pytest.fixture
def lake(tmp_path: Path) -> Lake:
    return Lake(
        settings={}, root=str(tmp_path), max_objects=1000, max_bytes=1 << 30, interval="PT10M",
        timeout_s=60, renew_s=15,
    )  # fmt: skip


class Ingest:
    """Source objects of a few rows each on `DT`, committed one by one; the event ids it
    committed, by ledger id, are the account the merged objects are judged against."""

    def __init__(self, lake: Lake, store: CoordinationStore) -> None:
        self.lake, self.store = lake, store
        self.rng = random.Random(3)
        self.ids: dict[int, list[str]] = {}
        self.n = 0

    def __call__(self, count: int, schema_version: int = 1) -> None:
        for _ in range(count):
            key, rows = f"src/{self.n:04d}", self.rng.randint(2, 5)
            self.n += 1
            small = write_small(self.lake, key, DT, rows, self.rng)
            small = replace(small, schema_version=schema_version)
            (o,) = commit_source(self.store, key, [small], merge_after_s=INTERVAL_S)
            self.ids[o.object_id] = event_ids(key, DT, rows)

    def rows(self) -> int:
        return sum(len(ids) for ids in self.ids.values())


def runner(
    lake: Lake, store: CoordinationStore, owner: str = "merger", **limits: int
) -> MergeRunner:
    r = lake.runner(store, owner)
    if limits:
        config = replace(r.config, merge=replace(r.config.merge, **limits))
        r = MergeRunner(
            config=config, table=TABLE, store=store, objects=r.objects, owner=owner,
            timing=r.timing, write=r.write, work_dir=r.work_dir,
        )  # fmt: skip
    return r


def ranges(store: CoordinationStore) -> list[MergeRange]:
    return [r for r in store.merge_ranges(TABLE, DT) if not r.is_sentinel]


def merged_event_ids(store: CoordinationStore) -> Counter[str]:
    return Counter(
        e
        for r in ranges(store)
        for e in pq.read_table(str(r.url)[len("file://") :], columns=["event_id"])
        .column(0)
        .to_pylist()
    )


def assert_merged_exactly_once(lake: Lake, store: CoordinationStore, ingest: Ingest) -> None:
    partition = store.table_partition(TABLE, DT)
    assert partition is not None and partition.merged_upper == partition.next_object_id - 1
    assert sum(r.row_count for r in ranges(store)) == ingest.rows()
    assert merged_event_ids(store) == Counter(e for ids in ingest.ids.values() for e in ids)
    outcomes = checks.run_all(
        store, lake.config(), objects=lake.objects(), ownership_timeout_s=lake.timeout_s
    )
    assert [c.summary for c in outcomes if not c.passed] == []


def job(store: CoordinationStore) -> LeaseItem:
    item = store.get(store.source_identifier(TABLE, ItemType.MERGE_JOB), DT)
    assert item is not None
    return item


def test_objects_committed_after_closing_are_delayed_and_merged_by_the_next_merge(
    lake: Lake, store: CoordinationStore, clock: FakeClock
) -> None:
    ingest, schedule = Ingest(lake, store), MergeSchedule(store, lake.config(), TABLE)
    ingest(3)
    assert schedule.due(schedule.partitions()) == []  # due after the interval
    clock.advance(INTERVAL_S)
    (first,) = runner(lake, store).merge([p.dt for p in schedule.due(schedule.partitions())])
    assert (first.outcome, first.lower, first.upper, first.delayed_merged) == (MERGED, 0, 3, 0)

    ingest(1)  # live: the day has not ended
    clock.advance(24 * 3600)  # past the day's end plus grace
    assert schedule.refresh()[1] == []  # but ingestion never caught up since
    catch_up(store)
    partitions, closed = schedule.refresh()
    assert [p.last_live_object_id for p in closed] == [4]
    assert [p.dt for p in schedule.due(partitions)] == [DT]  # closing makes it due at once
    ingest(2)  # after closing: delayed
    assert [o.delayed for o in store.ledger_objects(TABLE, DT)] == [False] * 4 + [True] * 2

    (late,) = runner(lake, store).merge([DT])
    assert late.outcome == MERGED and (late.lower, late.upper) == (0, 6) and late.rewrite
    assert late.objects_merged == 3 and late.delayed_merged == 2
    assert late.rows == ingest.rows()  # rows merged = rows committed
    assert late.next_due_at_ms is None
    assert store.table_partition(TABLE, DT).merge_due_at_ms is None  # type: ignore[union-attr]
    assert_merged_exactly_once(lake, store, ingest)


def test_a_merged_range_records_the_newest_schema_version_of_its_inputs(
    lake: Lake, store: CoordinationStore
) -> None:
    """Objects of two versions merged: the range says the newer; a rewrite of it with newer
    objects of the older version keeps it (the rewritten object is an input too)."""
    ingest = Ingest(lake, store)
    ingest(2)
    ingest(1, schema_version=2)
    (first,) = runner(lake, store).merge([DT])
    assert first.outcome == MERGED and [r.schema_version for r in ranges(store)] == [2]
    ingest(2)
    (again,) = runner(lake, store).merge([DT])
    assert again.outcome == MERGED and again.rewrite
    assert [(r.upper, r.schema_version) for r in ranges(store)] == [(5, 2)]
    assert_merged_exactly_once(lake, store, ingest)


def test_a_tick_with_nothing_due_is_told_when_the_next_merge_and_closing_are(
    lake: Lake, store: CoordinationStore
) -> None:
    """The merge sensor's skip reason (issue 23): not only "nothing due" but when."""
    schedule = MergeSchedule(store, lake.config(), TABLE)
    assert schedule.next_due([]) == "no merge pending and no open partition"
    Ingest(lake, store)(2)
    (partition,) = schedule.partitions()
    assert partition.merge_due_at_ms is not None and not partition.closed
    due = iso_utc(partition.merge_due_at_ms)
    # The day ends at midnight UTC; closing waits an hour's grace (the fake lake's default).
    assert schedule.next_due([partition]) == (
        f"next merge due {due} (dt={DT}); "
        f"next closing {iso_utc(closes_at_ms(DT, 'UTC', lake.config().merge.close_grace_s))} "
        f"(dt={DT}), once ingestion caught up"
    )


def test_a_carried_over_partition_is_merged_again_in_the_same_run(
    lake: Lake, store: CoordinationStore
) -> None:
    ingest = Ingest(lake, store)
    ingest(7)
    now = store.now_ms()
    outcomes = list(runner(lake, store, max_objects=3).merge([DT]))
    assert [(o.outcome, o.lower, o.upper, o.carry_over) for o in outcomes] == [
        (MERGED, 0, 3, True),
        (MERGED, 0, 6, True),
        (MERGED, 0, 7, False),
    ]
    assert [o.next_due_at_ms for o in outcomes] == [now, now, None]  # carry-over: due at once
    assert [o.objects_merged for o in outcomes] == [3, 3, 1]
    assert [o.epoch for o in outcomes] == [1, 2, 3]  # each merge a new lease on the job
    assert_merged_exactly_once(lake, store, ingest)


def test_a_job_another_merge_holds_is_busy_until_its_lease_expires(
    lake: Lake, store: CoordinationStore, clock: FakeClock
) -> None:
    ingest = Ingest(lake, store)
    ingest(2)
    sid = store.source_identifier(TABLE, ItemType.MERGE_JOB)
    store.create_partitions(sid, [DT])
    other = store.acquire(sid, DT, "other-merger", lake.timeout_s)
    before = store.table_partition(TABLE, DT)

    (busy,) = runner(lake, store).merge([DT])
    assert busy.outcome == BUSY and busy.ok and busy.epoch == other.epoch
    assert "other-merger" in busy.message
    assert store.table_partition(TABLE, DT) == before and ranges(store) == []
    assert job(store) == other  # left alone

    clock.advance(lake.timeout_s + 1)  # the other merge died: its job is taken over
    (took,) = runner(lake, store).merge([DT])
    assert took.outcome == MERGED and took.epoch == other.epoch + 1
    assert_merged_exactly_once(lake, store, ingest)


def test_a_merge_with_nothing_to_merge_settles_the_job(
    lake: Lake, store: CoordinationStore
) -> None:
    ingest = Ingest(lake, store)
    ingest(2)
    list(runner(lake, store).merge([DT]))
    closed = store.close_partition(TABLE, DT)
    assert closed is not None and closed.merge_due_at_ms is not None  # due: just closed
    chain = store.merge_ranges(TABLE, DT)

    (settled,) = runner(lake, store).merge([DT])
    assert settled.outcome == NOTHING_TO_MERGE and settled.next_due_at_ms is None
    assert store.table_partition(TABLE, DT) == replace(closed, merge_due_at_ms=None)
    assert store.merge_ranges(TABLE, DT) == chain
    assert job(store).status is PartitionStatus.UNASSIGNED
    schedule = MergeSchedule(store, lake.config(), TABLE)
    assert schedule.due(schedule.partitions()) == []
    assert_merged_exactly_once(lake, store, ingest)


def test_a_merged_object_short_of_its_inputs_rows_fails_and_commits_nothing(
    lake: Lake, store: CoordinationStore
) -> None:
    ingest = Ingest(lake, store)
    ingest(3)
    before = store.table_partition(TABLE, DT)
    writer = ArrowMergeWriter(lake.config())

    def drops_a_row(inputs: Sequence[str], target: Path) -> ArrowWritten:
        written = writer.write(inputs, target)
        table = pq.read_table(written.path)
        pq.write_table(table.slice(1), written.path)
        return ArrowWritten(written.path, written.path.stat().st_size, table.num_rows - 1)

    r = runner(lake, store)
    r.write = drops_a_row
    (failed,) = r.merge([DT])
    assert failed.outcome == FAILED and not failed.ok
    assert f"holds {ingest.rows() - 1} rows, its inputs {ingest.rows()}" in failed.message
    assert store.table_partition(TABLE, DT) == before  # still due, nothing merged
    assert store.merge_ranges(TABLE, DT) == []
    assert job(store).status is PartitionStatus.UNASSIGNED  # handed back, not left to expire
    assert not (lake.table_dir / "merged").exists()  # nothing published

    (again,) = runner(lake, store).merge([DT])  # the next run, with a sound writer
    assert again.outcome == MERGED
    assert_merged_exactly_once(lake, store, ingest)


def test_served_inputs_are_what_the_publication_serves_only_when_it_covers_every_object() -> None:
    def small(object_id: int, rows: int) -> RegisteredObject:
        url = f"file:///t/dt=2026-01-01/{object_id}.parquet"
        return RegisteredObject(
            "t", "2026-01-01", object_id, url, 100, rows, "sid", f"k{object_id}", 1, False
        )

    objects = [small(1, 10), small(2, 10), small(3, 5)]
    files = (
        ServedFile(objects[0].url, objects[0].url, 10, 100, 0, 1),
        ServedFile(objects[1].url, "file:///t/deduped/2.parquet", 7, 80, 1, 2),
    )
    assert served_inputs(objects[:2], ServedState(2, files, 20)) == (
        [objects[0].url, "file:///t/deduped/2.parquet"],
        3,
    )
    assert served_inputs(objects, ServedState(2, files, 20)) is None  # 3 is not published yet
