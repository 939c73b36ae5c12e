"""The merge protocol with real OS processes, on both store backends (issue 13,
docs/architecture.md).

- Prism's race: ingestion committers and mergers on the same table partitions at once; after a
  final merge, every committed small object is in exactly one range and every record in exactly
  one merged object.
- A merge SIGKILLed after writing or after publishing its object is taken over once its lease
  expires, and the ledger ends exactly as a run without the kill on a copy of the same data.
- A merge SIGSTOPped before its commit wakes after another merge took over: its commit is
  refused, whether its own lease notices first or only the store's fencing stands in its way.

The children (`tests.support.merge_child`) merge with a pyarrow stand-in for the Spark writer
(`tests.support.arrow_merge` says why). Verdicts come from what the processes wrote down
themselves (each committed object's event ids; each merge's outcome) and from the merged
objects' contents, not only from what the store claims.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from resources.compaction import checks
from resources.compaction.merge_runner import BUSY, LOST_LEASE, MERGED, MergeOutcome, MergeRunner
from resources.compaction.merge_schedule import MergeSchedule
from resources.coordination.items import ItemType, PartitionStatus
from resources.ledger.merge import MergeRange, chain_problems
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from tests.support.child_processes import child_processes, spawn_child
from tests.support.child_processes import wait_for as child_processes_wait_for
from tests.support.merge_child import (
    TABLE,
    Lake,
    commit_source,
    read_lines,
    write_small,
)

pytestmark = pytest.mark.slow

DT = "2099-01-01"
DTS = ["2099-01-01", "2099-01-02", "2099-01-03"]
"""Dates far ahead: nothing closes them but the committers' explicit closes."""
LIMITS = {"max_objects": 3, "max_bytes": 6000}
COMMITS = 40
"""Per committer in the race."""
CLOSES = [{"10": DTS[0]}, {"18": DTS[1]}, {"22": DTS[0]}]
"""Per committer, the date it closes after which of its commits: committer 0 closes the first
date a quarter of the way in, committer 1 the second later, committer 2 the first again
(idempotent). The third date stays open."""


# -- processes -----------------------------------------------------------------------------------


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


def spawn(
    children: list[subprocess.Popen[bytes]], role: str, lake: Lake, **args: Any
) -> subprocess.Popen[bytes]:
    return spawn_child(children, "merge_child", {"role": role, "lake": lake.__dict__, **args})


def spawn_merge(
    children: list[subprocess.Popen[bytes]],
    lake: Lake,
    tmp_path: Path,
    name: str,
    *,
    step: str,
    nth: int,
    do: str,
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """A merge child of `DT` that does `do` ("pause" or "kill") at its `nth` `step`, its
    marker (written there, with the job's epoch) and its outcome file. A paused child goes on
    once `release(marker)`."""
    marker, out = tmp_path / "marker", tmp_path / "out"
    proc = spawn(
        children, "merge", lake, name=name, dts=[DT], step=step, nth=nth, do=do,
        marker=str(marker), out=str(out),
    )  # fmt: skip
    return proc, marker, out


def release(marker: Path) -> None:
    marker.with_name(marker.name + ".release").write_text("go")


def wait_for(path: Path, proc: subprocess.Popen[bytes], limit_s: float = 60) -> None:
    child_processes_wait_for(path, proc, limit_s)


# -- the lake ------------------------------------------------------------------------------------


def new_lake(root: Path, settings: StoreSettings, **limits: Any) -> Lake:
    lake = Lake(settings=settings.__dict__, root=str(root), **limits)
    lake.store().close_store()  # created here, before any child opens it
    return lake


def patient(lake: Lake) -> Lake:
    """The lake for the test process's own merges: a long lease, so a stall of the loaded
    machine never costs them their job (only the children's short leases are under test)."""
    return replace(lake, timeout_s=30, renew_s=5)


def ingest_copy(lake: Lake, objects: int, seed: int = 7) -> CoordinationStore:
    """`objects` source objects of 16 rows each on `DT`, committed one by one and due at once;
    the same seed gives the same objects in any lake. With `LIMITS`, a merge takes 3 objects
    (~5.4 kB) and a range's object passes the target after about 15: ranges get rewritten,
    then closed."""
    store = lake.store()
    rng = random.Random(seed)
    for i in range(objects):
        key = f"src/{i:04d}"
        commit_source(store, key, [write_small(lake, key, DT, 16, rng)], merge_after_s=0)
    return store


def take_over(runner: MergeRunner, dt: str, limit_s: float = 30) -> list[MergeOutcome]:
    """Merge `dt` as the sensor's next request would, again while a live merge holds its job
    (BUSY); the outcomes of the first merge that got the job."""
    deadline = time.monotonic() + limit_s
    while True:
        outcomes = list(runner.merge([dt]))
        if outcomes[0].outcome != BUSY:
            return outcomes
        assert time.monotonic() < deadline, f"dt={dt} still busy after {limit_s} s"
        time.sleep(0.1)


def merged_ids(r: MergeRange) -> list[str]:
    """The event ids in a range's merged object, in file order."""
    assert r.url is not None and r.url.startswith("file://")
    return pq.read_table(r.url[len("file://") :], columns=["event_id"]).column(0).to_pylist()


def merged(store: CoordinationStore, dt: str) -> list[MergeRange]:
    return [r for r in store.merge_ranges(TABLE, dt) if not r.is_sentinel]


def attempt_files(lake: Lake, dt: str, epoch: int) -> list[Path]:
    """What the merge attempt of job epoch `epoch` published (its prefix starts with it)."""
    return sorted((lake.table_dir / "merged" / f"dt={dt}").glob(f"{epoch}-*/*.parquet"))


def named(store: CoordinationStore, dt: str) -> set[str]:
    return {r.url for r in merged(store, dt) if r.url}


def assert_checks_pass(store: CoordinationStore, lake: Lake) -> None:
    outcomes = checks.run_all(
        store, lake.config(), objects=lake.objects(), ownership_timeout_s=lake.timeout_s
    )
    assert [(c.name, c.passed, c.summary) for c in outcomes if not c.passed] == []


def job_items(store: CoordinationStore) -> dict[str, Any]:
    return {
        i.partition_key: i
        for i in store.iter_items(store.source_identifier(TABLE, ItemType.MERGE_JOB))
    }


# -- Prism's race ----------------------------------------------------------------------------------


def settle(store: CoordinationStore, lake: Lake, limit_s: float = 60) -> list[MergeOutcome]:
    """The final merge pass: merge whatever is due until no partition has a pending job."""
    runner = patient(lake).runner(store, "final")
    schedule = MergeSchedule(store, lake.config(), TABLE)
    outcomes: list[MergeOutcome] = []
    deadline = time.monotonic() + limit_s
    while True:
        partitions, _ = schedule.refresh()
        if all(p.merge_due_at_ms is None for p in partitions):
            return outcomes
        assert time.monotonic() < deadline, f"merge jobs still pending after {limit_s} s"
        outcomes += runner.merge([p.dt for p in schedule.due(partitions)])
        time.sleep(0.05)


def race(
    lake: Lake, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> tuple[list[list[dict[str, Any]]], list[MergeOutcome]]:
    """Two mergers looping, three committers committing, then the mergers stopped: each
    committer's records and every merge outcome of the race."""
    stop = tmp_path / "stop"
    mergers = []
    for n in range(2):
        out, ready = tmp_path / f"merger-{n}.jsonl", tmp_path / f"merger-{n}.ready"
        proc = spawn(
            children, "merge_loop", lake, name=f"merger-{n}", out=str(out), stop=str(stop),
            ready=str(ready),
        )  # fmt: skip
        mergers.append((proc, out))
        wait_for(ready, proc)
    committers = []
    for n, close_after in enumerate(CLOSES):
        out = tmp_path / f"committer-{n}.jsonl"
        proc = spawn(
            children, "commit", lake, name=f"c{n}", seed=n, commits=COMMITS, dts=DTS,
            rows=[8, 16], merge_after_s=0.2, close_after=close_after, out=str(out),
        )  # fmt: skip
        committers.append((proc, out))
    for proc, _ in committers:
        assert proc.wait(150) == 0
    stop.write_text("stop")
    for proc, _ in mergers:
        assert proc.wait(60) == 0
    records = [read_lines(out) for _, out in committers]
    assert [r[-1]["kind"] for r in records] == ["done"] * len(committers)
    return records, [MergeOutcome(**o) for _, out in mergers for o in read_lines(out)]


def covered(r: MergeRange) -> range:
    """The small-object ids of `(lower, upper]`."""
    return range((r.lower or 0) + 1, r.upper + 1)


def assert_merged_exactly_once(
    store: CoordinationStore, dt: str, committed: dict[int, dict[str, Any]]
) -> None:
    """`committed`: the committers' records of `dt`'s objects, by ledger id."""
    last_id = max(committed)
    assert sorted(committed) == list(range(1, last_id + 1))  # dense ids, each committed once
    partition = store.table_partition(TABLE, dt)
    assert partition is not None and partition.next_object_id == last_id + 1
    ledger = {o.object_id: o.url for o in store.ledger_objects(TABLE, dt)}
    assert ledger == {i: r["url"] for i, r in committed.items()}
    assert chain_problems(store.merge_ranges(TABLE, dt), partition.next_object_id) == []
    ids = Counter(i for r in merged(store, dt) for i in covered(r))
    assert ids == Counter(range(1, last_id + 1)), "each id in exactly one range"
    records: Counter[str] = Counter()
    for r in merged(store, dt):
        in_file = merged_ids(r)
        expected = [e for i in covered(r) for e in committed[i]["event_ids"]]
        assert Counter(in_file) == Counter(expected), f"range ({r.lower}, {r.upper}]"
        records.update(in_file)
        times = pq.read_table(str(r.url)[len("file://") :], columns=["event_time"]).column(0)
        assert times.to_pylist() == sorted(times.to_pylist())  # sorted by event time
    assert records == Counter(e for r in committed.values() for e in r["event_ids"])
    assert set(records.values()) == {1}  # none lost, none twice
    assert partition.merge_due_at_ms is None and partition.merged_upper == last_id
    if partition.last_live_object_id is not None:
        delayed = {i for i, r in committed.items() if r["delayed"]}
        assert delayed == set(range(partition.last_live_object_id + 1, last_id + 1))


def test_ingestion_commits_racing_merges_leave_every_object_merged_exactly_once(
    backend: str, settings_for: Callable[..., StoreSettings], tmp_path: Path, children
) -> None:
    lake = new_lake(
        tmp_path, settings_for(backend), max_objects=5, max_bytes=9000, interval="PT0.05S",
        timeout_s=3, merge_s=0.1,
    )  # fmt: skip
    records, outcomes = race(lake, tmp_path, children)
    assert any(o.outcome == MERGED for o in outcomes), "nothing merged during the race"
    store = lake.store()
    outcomes += settle(store, lake)

    committed = [r for rs in records for r in rs if r["kind"] == "object"]
    for dt in DTS:
        assert_merged_exactly_once(store, dt, {r["id"]: r for r in committed if r["dt"] == dt})
    assert {r["dt"] for rs in records for r in rs if r["kind"] == "closed"} == {DTS[0], DTS[1]}
    assert store.table_partition(TABLE, DTS[2]).last_live_object_id is None  # type: ignore[union-attr]
    # A closer's own later commits to its date came after the close: delayed, every one.
    for rs, close_after in zip(records, CLOSES, strict=True):
        ((after, dt),) = close_after.items()
        later = [
            r for r in rs if r["kind"] == "object" and r["dt"] == dt and r["commit"] > int(after)
        ]
        assert later and all(r["delayed"] for r in later)
    # A MERGED outcome is a merge commit that stuck: their new objects add up exactly once.
    merges = [o for o in outcomes if o.outcome == MERGED]
    assert sum(o.objects_merged for o in merges) == len(committed)
    assert sum(o.delayed_merged for o in merges) == sum(r["delayed"] for r in committed)
    # A merge stalled past its lease by the loaded machine may lose it; none may fail.
    assert [o.describe() for o in outcomes if not (o.ok or o.outcome == LOST_LEASE)] == []
    assert_checks_pass(store, lake)
    assert all(i.status is not PartitionStatus.ASSIGNED for i in job_items(store).values())
    store.close_store()


def test_an_object_committed_while_a_merge_runs_is_merged_by_the_next_one(
    backend: str, settings_for: Callable[..., StoreSettings], tmp_path: Path, children
) -> None:
    """Prism's race, made to happen: a commit lands between the merge's read of the ledger and
    its commit. The merge must leave the partition's job pending, so the next merge takes the
    object (Prism's merge forgot it)."""
    lake = new_lake(tmp_path, settings_for(backend), **LIMITS)
    store = ingest_copy(lake, 3)  # one merge's worth: no carry-over
    merger, marker, out = spawn_merge(
        children, lake, tmp_path, "merger", step="published", nth=1, do="pause"
    )
    wait_for(marker, merger)
    key = "late/0000"
    (late,) = commit_source(
        store, key, [write_small(lake, key, DT, 16, random.Random(1))], merge_after_s=3600
    )
    release(marker)
    assert merger.wait(60) == 0
    (outcome,) = [MergeOutcome(**o) for o in json.loads(out.read_text())]
    assert (outcome.outcome, outcome.lower, outcome.upper) == (MERGED, 0, 3)
    assert not outcome.carry_over
    partition = store.table_partition(TABLE, DT)
    assert partition is not None and partition.unmerged == 1 and late.object_id == 4
    assert partition.merge_due_at_ms is not None  # the job stays pending for the late object
    assert outcome.next_due_at_ms == partition.merge_due_at_ms

    (last,) = settle(store, lake)
    assert (last.outcome, last.lower, last.upper) == (MERGED, 0, 4)
    assert store.table_partition(TABLE, DT).merge_due_at_ms is None  # type: ignore[union-attr]
    assert_checks_pass(store, lake)
    store.close_store()


# -- a killed merge --------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["written", "published"])
def test_a_killed_merge_is_taken_over_and_ends_as_a_run_without_the_kill(
    backend: str,
    settings_for: Callable[..., StoreSettings],
    tmp_path: Path,
    children,
    step: str,
) -> None:
    """Killed in its second merge (rewriting the open range the first one committed)."""
    lake = new_lake(tmp_path / "killed", settings_for(backend), **LIMITS)
    reference = new_lake(tmp_path / "reference", settings_for(backend), **LIMITS)
    store, ref_store = ingest_copy(lake, 24), ingest_copy(reference, 24)

    victim, marker, out = spawn_merge(
        children, lake, tmp_path, "victim", step=step, nth=2, do="kill"
    )
    assert victim.wait(60) == -signal.SIGKILL
    killed_epoch = json.loads(marker.read_text())["epoch"]
    assert not out.exists()
    stranded = job_items(store)[DT]
    assert stranded.status is PartitionStatus.ASSIGNED and stranded.owner == "victim"
    assert stranded.epoch == killed_epoch
    assert [(r.lower, r.upper) for r in merged(store, DT)] == [(0, 3)]  # the first merge's

    outcomes = take_over(patient(lake).runner(store, "heir"), DT)
    assert outcomes[0].outcome == MERGED and outcomes[0].epoch == killed_epoch + 1
    assert [o.outcome for o in outcomes] == [MERGED] * len(outcomes)
    assert not outcomes[-1].carry_over
    expected = list(patient(reference).runner(ref_store, "reference").merge([DT]))
    assert [o.outcome for o in expected] == [MERGED] * len(expected)

    def result(s: CoordinationStore) -> Any:
        partition = s.table_partition(TABLE, DT)
        ranges = [(r.lower, r.upper, r.row_count, merged_ids(r)) for r in merged(s, DT)]
        assert partition is not None
        return (
            ranges,
            partition.merged_upper,
            partition.desired_manifest_version,
            partition.next_object_id,
        )

    assert result(store) == result(ref_store)
    assert len(merged(store, DT)) >= 2, "the limits should have closed a range"
    assert store.table_partition(TABLE, DT).merge_due_at_ms is None  # type: ignore[union-attr]
    # The killed attempt's object: published under its own prefix, or still in its scratch
    # directory; either way nothing names it.
    published = attempt_files(lake, DT, killed_epoch)
    if step == "published":
        assert len(published) == 1
        assert f"file://{published[0]}" not in named(store, DT)
    else:
        assert published == []
        scratch = list((Path(lake.root) / "work" / "victim").glob("merge-*/out/*.parquet"))
        assert len(scratch) == 1
    assert_checks_pass(store, lake)
    store.close_store()
    ref_store.close_store()


# -- a stopped merge -------------------------------------------------------------------------------


@pytest.mark.parametrize("step", ["published", "committing"])
def test_a_stopped_merge_that_wakes_after_takeover_has_its_commit_refused(
    backend: str,
    settings_for: Callable[..., StoreSettings],
    tmp_path: Path,
    children,
    step: str,
) -> None:
    """Stopped after publishing (its lease's local deadline refuses the commit when it wakes)
    or inside the commit call (past the lease's own checks: only the store's epoch fence
    refuses it)."""
    lake = new_lake(tmp_path, settings_for(backend), **LIMITS)
    store = ingest_copy(lake, 8)

    zombie, marker, out = spawn_merge(
        children, lake, tmp_path, "zombie", step=step, nth=1, do="pause"
    )
    wait_for(marker, zombie)
    os.kill(zombie.pid, signal.SIGSTOP)  # its lease renewer stops with it
    zombie_epoch = json.loads(marker.read_text())["epoch"]

    successor = take_over(patient(lake).runner(store, "successor"), DT)
    assert successor[0].outcome == MERGED and successor[0].epoch == zombie_epoch + 1
    assert [o.outcome for o in successor] == [MERGED] * len(successor)
    ranges, partition = store.merge_ranges(TABLE, DT), store.table_partition(TABLE, DT)
    assert partition is not None and partition.merged_upper == 8

    os.kill(zombie.pid, signal.SIGCONT)
    release(marker)
    assert zombie.wait(60) == 0
    (woke,) = [MergeOutcome(**o) for o in json.loads(out.read_text())]
    assert woke.outcome == LOST_LEASE and woke.epoch == zombie_epoch, woke.describe()
    assert store.merge_ranges(TABLE, DT) == ranges  # exactly as the successor left them
    assert store.table_partition(TABLE, DT) == partition
    (orphan,) = attempt_files(lake, DT, zombie_epoch)
    assert f"file://{orphan}" not in named(store, DT)
    assert job_items(store)[DT].status is PartitionStatus.UNASSIGNED
    assert_checks_pass(store, lake)
    store.close_store()
