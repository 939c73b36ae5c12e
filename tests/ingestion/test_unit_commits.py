"""A work unit through the runner: its objects committed together, an unreadable one retried on
its own, and a unit too big for one transaction committed in several, resumable after a
failure between them — on both store backends, with a reader that cuts per unit as the Spark
tasks do (the task path itself: test_task_reader)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.coordination.status import status_text
from resources.ingestion.batch_results import SourceBatchResult, StagedFile
from resources.ingestion.outcomes import COMMITTED, FAILED, UNREADABLE
from resources.ingestion.work_units import UnitObject, WorkUnit
from tests.ingestion.test_ingestion_runner import make_runner
from tests.support.fakes import fail_nth_commit

STREAM = "events"
pytestmark = pytest.mark.contract


class UnitReader:
    """Each object holds one record per date it is given; objects named in `broken` can't be
    read. Writes one object per (unit, date), as the Spark tasks do for a unit of one part."""

    def __init__(
        self, dates: dict[str, list[str]], broken: set[str], versions: dict[str, int] | None = None
    ) -> None:
        self.dates = dates
        self.broken = broken
        self.versions = versions or {}
        """The schema version each date's file is written with (default 1)."""
        self.reads: list[list[str]] = []

    def __call__(
        self, reading: dict[str, list[UnitObject]], lake: Path, attempt: str
    ) -> dict[str, SourceBatchResult]:
        self.reads.append(sorted(o.key for objects in reading.values() for o in objects))
        lake.mkdir(parents=True, exist_ok=True)
        results: dict[str, SourceBatchResult] = {}
        rows: dict[tuple[str, str], list[str]] = {}
        for unit, objects in reading.items():
            result = results.setdefault(unit, SourceBatchResult())
            for key in (o.key for o in objects):
                if key in self.broken:
                    result.failed[key] = "corrupt gzip: test"
                    continue
                for dt in self.dates[key]:
                    rows.setdefault((unit, dt), []).append(f"{key}@{dt}")
        for n, ((unit, dt), ids) in enumerate(sorted(rows.items())):
            target = lake / f"{attempt}-{n}.parquet"
            pq.write_table(pa.table({"id": ids}), target)
            results[unit].table_files.append(
                StagedFile(
                    dt, target.as_uri(), len(ids), target.stat().st_size, self.versions.get(dt, 1)
                )
            )
        for result in results.values():
            result.rows_read = sum(f.row_count for f in result.table_files)
        return results


def create_unit(store: LeaseStore, keys: list[str]) -> str:
    sid = store.source_identifier(STREAM)
    unit = WorkUnit(keys[0], tuple(UnitObject(k, 10) for k in keys))
    store.create_partitions(sid, [unit.key], progress_states=[unit.progress_state()])
    return sid


def ledger_ids(store: LeaseStore) -> Counter[str]:
    ids: Counter[str] = Counter()
    for obj in store.ledger_objects(STREAM):  # type: ignore[attr-defined]
        path = Path(urlparse(obj.url).path.replace("%3D", "="))
        ids.update(pq.read_table(path).column("id").to_pylist())
    return ids


def test_a_unit_commits_one_object_per_date_for_all_its_objects(
    store: LeaseStore, tmp_path: Path
) -> None:
    keys = ["a", "b", "c"]
    sid = create_unit(store, keys)
    read = UnitReader({"a": ["2026-01-01"], "b": ["2026-01-01", "2026-01-02"], "c": []}, set())
    (outcome,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert outcome.outcome == COMMITTED and outcome.rows_written == 3
    assert outcome.small_objects == 2 and outcome.table_partitions == ["2026-01-01", "2026-01-02"]
    assert read.reads == [keys]
    assert store.get(sid, "a").status is PartitionStatus.COMPLETED  # type: ignore[union-attr]
    assert ledger_ids(store) == Counter(["a@2026-01-01", "b@2026-01-01", "b@2026-01-02"])


def test_each_committed_object_keeps_its_staged_files_schema_version(
    store: LeaseStore, tmp_path: Path
) -> None:
    """A unit read across a schema change writes files of two versions: each object's version
    reaches the ledger with it, so `leasehold table ls` knows it without a footer."""
    create_unit(store, ["a", "b"])
    read = UnitReader({"a": ["2026-01-01"], "b": ["2026-01-02"]}, set(), versions={"2026-01-02": 2})
    (outcome,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert outcome.outcome == COMMITTED
    objects = store.ledger_objects(STREAM)  # type: ignore[attr-defined]
    assert [(o.dt, o.schema_version) for o in objects] == [("2026-01-01", 1), ("2026-01-02", 2)]


def test_an_unreadable_object_is_retried_alone_after_the_others_commit(
    store: LeaseStore, tmp_path: Path
) -> None:
    sid = create_unit(store, ["a", "b", "c"])
    dates = {k: ["2026-01-01"] for k in "abc"}
    read = UnitReader(dates, broken={"b"})
    (outcome,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert outcome.outcome == UNREADABLE and "b: corrupt gzip: test" in outcome.message
    item = store.get(sid, "a")
    assert item.status is PartitionStatus.CLOSED  # type: ignore[union-attr]
    progress = json.loads(item.progress_state)  # type: ignore[union-attr]
    assert progress["done"] == ["a", "c"] and progress["rows_written"] == 2
    assert ledger_ids(store) == Counter(["a@2026-01-01", "c@2026-01-01"])
    shown = status_text(store.status())  # `leasehold status`: which object, and why
    assert "CLOSED 'a' after 1 failed reads" in shown and "b: corrupt gzip: test" in shown

    store.clock = lambda: 10**10  # type: ignore[attr-defined]  # past the reopen time
    read.broken.clear()
    (again,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert again.outcome == COMMITTED, again.message
    assert read.reads[-1] == ["b"]  # only what is not done
    assert ledger_ids(store) == Counter(["a@2026-01-01", "b@2026-01-01", "c@2026-01-01"])
    final = store.get(sid, "a")
    assert final.status is PartitionStatus.COMPLETED  # type: ignore[union-attr]
    assert json.loads(final.progress_state)["rows_read"] == 3  # type: ignore[union-attr]


def test_a_unit_over_one_transaction_commits_in_several_and_resumes_after_a_failure(
    store: LeaseStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """40 dates: over the 100 items of one DynamoDB transaction. The second transaction fails
    (store down): the next attempt re-reads the same objects and commits only what is not in —
    every record exactly once, and the unit's counts equal the ledger's."""
    keys = ["a", "b"]
    sid = create_unit(store, keys)
    days = [f"2026-01-{d:02d}" for d in range(1, 32)] + [f"2026-02-{d:02d}" for d in range(1, 10)]
    read = UnitReader({"a": days, "b": days[:5]}, set())
    commits = fail_nth_commit(monkeypatch, store, 2)
    (outcome,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert outcome.outcome == FAILED
    partial = json.loads(store.get(sid, "a").progress_state)  # type: ignore[union-attr]
    assert partial["partial"]["objects"] == keys
    first_batch = ledger_ids(store)
    assert 0 < sum(first_batch.values()) < 45

    store.clock = lambda: 10**10  # type: ignore[attr-defined]  # the lease handed back or expired
    (again,) = make_runner(store, tmp_path, read).ingest(["a"])
    assert again.outcome == COMMITTED, again.message
    assert commits["n"] == 3  # 32 dates fit one transaction: 2 + the 8 left after the failure
    expected = Counter([f"a@{d}" for d in days] + [f"b@{d}" for d in days[:5]])
    assert ledger_ids(store) == expected
    final = store.get(sid, "a")
    assert final.status is PartitionStatus.COMPLETED  # type: ignore[union-attr]
    progress = json.loads(final.progress_state)  # type: ignore[union-attr]
    assert "partial" not in progress and progress["rows_written"] == sum(expected.values())
