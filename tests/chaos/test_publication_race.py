"""Publication with real OS processes, on both store backends (issue 14's acceptance,
docs/architecture.md): SQLite with the local catalog file, DynamoDB with Glue, both over the
loopback server.

- The race: ingestion committers commit small objects into three table partitions (closing two
  of them mid-way), a merger merges them, a publisher publishes whatever is due, over and over,
  and two reader processes read every partition through the catalog as an engine does, all at
  once. No reader ever meets a missing file, a file twice or a record twice; every sample holds
  exactly the records committed for the ids its publication covers; a partition's samples never
  go back. After a final merge and publication, the closed partitions are switched, every date
  serves exactly the rows committed on it, and the publication checks pass.
- A publisher SIGKILLed after writing a version, after recording it, or after cataloging it: the
  next publisher converges (publishes, or repairs the catalog), and no partition moves back.

Garbage collection is not run: every file any publication named stays, so a missing file can
only be the publisher's fault. Verdicts come from the committers' own account (each object's
ledger id and record ids) and from what the readers read, not only from what the ledger claims.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from resources.catalog.base import Catalog
from resources.catalog.hive_target import HiveManifestsTarget
from resources.compaction.merge_runner import MERGED as MERGE_COMMITTED
from resources.compaction.merge_schedule import MergeSchedule
from resources.ledger.publication import Publication
from resources.publication import checks
from resources.publication.manifest import (
    SYMLINK_DIR,
    SYMLINK_NAME,
    catalog_location,
    parse_symlink_text,
)
from resources.publication.outcome import CATALOG_REPAIRED, FAILED, PUBLISHED, PublicationOutcome
from resources.publication.publisher import Publisher
from resources.publication.reader import read_partition
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from tests.support.child_processes import child_processes, spawn_child, wait_for
from tests.support.merge_child import (
    TABLE,
    Lake,
    commit_source,
    event_ids,
    read_lines,
    write_small,
)
from tests.support.publication_child import digest, open_catalog

pytestmark = pytest.mark.slow

DTS = ["2099-01-01", "2099-01-02", "2099-01-03"]
"""Dates far ahead: nothing closes them but the committers' explicit closes."""
CLOSED = DTS[:2]
COMMITS = 20
"""Per committer."""
CLOSES = [{"4": DTS[0]}, {"8": DTS[1]}]
"""Per committer, the date it closes after which of its commits; the third date stays open."""
READERS = 2
SWITCH_LIMIT_S = 30.0
"""After the committers are done, how long the race may go on until the closed dates switch."""


# -- processes -------------------------------------------------------------------------------------


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


def spawn(
    children: list[subprocess.Popen[bytes]], module: str, role: str, lake: Lake, **args: Any
) -> subprocess.Popen[bytes]:
    return spawn_child(children, module, {"role": role, "lake": lake.__dict__, **args})


# -- the lake and its catalog ----------------------------------------------------------------------


@dataclass
class World:
    lake: Lake
    catalog_spec: dict[str, Any]
    store: CoordinationStore

    @property
    def catalog(self) -> Catalog:
        return open_catalog(self.catalog_spec)

    @property
    def target(self) -> HiveManifestsTarget:
        return HiveManifestsTarget(self.catalog)

    def publisher(self) -> Publisher:
        return Publisher(self.lake.config(), self.store, self.lake.objects(), self.target)

    def catalog_seqs(self) -> dict[str, int]:
        catalog = self.catalog
        if catalog.table(TABLE) is None:
            return {}
        return {p.dt: p.seq for p in catalog.partitions(TABLE)}

    def ledger_seqs(self) -> dict[str, int]:
        return {
            tp.dt: tp.publication_seq
            for tp in self.store.table_partitions(TABLE)
            if tp.publication_seq > 0
        }


@pytest.fixture
def world(
    backend: str, settings_for: Callable[..., StoreSettings], tmp_path: Path,
    request: pytest.FixtureRequest,
) -> Iterator[World]:  # fmt: skip
    """The store of the parametrized backend, its table's lake on local files, and a catalog:
    the local file beside SQLite, Glue (a fresh database) beside DynamoDB."""
    settings = settings_for(backend)
    lake = Lake(
        settings=settings.__dict__, root=str(tmp_path), max_objects=5, max_bytes=9000,
        interval="PT0.05S", timeout_s=3, merge_s=0.1,
    )  # fmt: skip
    if backend == "sqlite":
        spec: dict[str, Any] = {"kind": "local", "path": str(tmp_path / "catalog.json")}
    else:
        server = request.getfixturevalue("aws_server")
        spec = {
            "kind": "glue",
            "database": f"db_{uuid.uuid4().hex[:12]}",
            "endpoint_url": server.endpoint_url,
        }
    store = lake.store()  # created here, before any child opens it
    yield World(lake, spec, store)
    store.close_store()


def patient(lake: Lake) -> Lake:
    """The test process's own merges: a long lease, so a stall of the loaded machine never
    costs them their job."""
    return replace(lake, timeout_s=30, renew_s=5)


def settle_merges(world: World, limit_s: float = 30) -> None:
    """Merge whatever is due until no partition has a pending merge job."""
    runner = patient(world.lake).runner(world.store, "final")
    schedule = MergeSchedule(world.store, world.lake.config(), TABLE)
    deadline = time.monotonic() + limit_s
    while True:
        partitions, _ = schedule.refresh()
        if all(p.merge_due_at_ms is None for p in partitions):
            return
        assert time.monotonic() < deadline, f"merge jobs still pending after {limit_s} s"
        list(runner.merge([p.dt for p in schedule.due(partitions)]))
        time.sleep(0.05)


def settle_publication(world: World, limit_s: float = 30) -> list[PublicationOutcome]:
    """Publish whatever is due until nothing is; the outcomes."""
    publisher = world.publisher()
    outcomes: list[PublicationOutcome] = []
    deadline = time.monotonic() + limit_s
    while dts := publisher.due():
        assert time.monotonic() < deadline, f"{dts} still due after {limit_s} s"
        outcomes += list(publisher.publish(dts))
    return outcomes


# -- the account -----------------------------------------------------------------------------------


class Committed:
    """What the committers wrote down: per date, each ledger id's record ids."""

    def __init__(self, records: list[dict[str, Any]]) -> None:
        self.ids: dict[str, dict[int, list[str]]] = {}
        for r in records:
            if r["kind"] == "object":
                self.ids.setdefault(r["dt"], {})[r["id"]] = r["event_ids"]
        for dt, by_id in self.ids.items():
            assert sorted(by_id) == list(range(1, len(by_id) + 1)), f"dt={dt}: ids not dense"

    def records(self, dt: str, upper: int | None = None) -> list[str]:
        """The record ids committed on `dt` in the objects `1..upper` (all if None), sorted."""
        by_id = self.ids.get(dt, {})
        last = len(by_id) if upper is None else upper
        assert last <= len(by_id), f"dt={dt}: a publication covers {last}, committed {len(by_id)}"
        return sorted(e for i in range(1, last + 1) for e in by_id[i])


def served(world: World, dt: str) -> list[str]:
    """The record ids an engine reading `dt` through the catalog gets, sorted."""
    return sorted(read_partition(world.target, TABLE, dt).column("event_id").to_pylist())


def symlink_urls(world: World, p: Publication) -> list[str]:
    objects = world.lake.objects()
    return parse_symlink_text(
        objects.get_bytes(objects.key_of(p.location + SYMLINK_DIR + SYMLINK_NAME))
    )


def judge_samples(
    world: World, committed: Committed, samples: list[dict[str, Any]]
) -> Counter[str]:
    """Every sample against the publication its catalog seq names; the kinds seen."""
    publications = {
        dt: {p.seq: p for p in world.store.publications(TABLE, dt)} for dt in DTS
    }  # fmt: skip

    @cache
    def expected(dt: str, seq: int) -> tuple[Publication, str, str, int]:
        p = publications[dt][seq]
        records = committed.records(dt, p.upper)
        return p, digest(symlink_urls(world, p)), digest(records), len(records)

    seen: Counter[str] = Counter()
    problems: list[str] = []
    last: dict[tuple[str, str], tuple[int, int]] = {}
    for s in samples:
        where = f"{s['reader']} dt={s['dt']} at {s['at_ms']}"
        key = (s["reader"], s["dt"])
        if s["kind"] == "error":
            problems.append(f"{where}: {s['error']}")
            continue
        if s["kind"] == "unpublished":
            if key in last:
                problems.append(f"{where}: unpublished after seq {last[key][0]}")
            seen["unpublished"] += 1
            continue
        if s["files_twice"] or s["ids_twice"]:
            problems.append(f"{where}: twice: files {s['files_twice']}, ids {s['ids_twice']}")
        if s["seq"] not in publications[s["dt"]]:
            problems.append(f"{where}: the catalog's seq {s['seq']} is no recorded publication")
            continue
        p, files_digest, ids_digest, rows = expected(s["dt"], s["seq"])
        if s["location"] != catalog_location(p.location):
            problems.append(f"{where}: seq {p.seq} at {s['location']}, recorded {p.location}")
        if s["files_digest"] != files_digest or s["files"] != p.files:
            problems.append(f"{where}: seq {p.seq}: {s['files']} files, not its manifest's")
        if s["rows"] != rows or s["ids_digest"] != ids_digest:
            problems.append(
                f"{where}: seq {p.seq} (up to id {p.upper}) served {s['rows']} rows, the "
                f"committed ids 1..{p.upper} hold {rows} (or other records)"
            )
        before_seq, before_upper = last.get(key, (0, 0))
        if p.seq < before_seq:
            problems.append(f"{where}: seq {p.seq} after seq {before_seq}")
        if p.upper < before_upper:
            problems.append(f"{where}: seq {p.seq} covers ids up to {p.upper}, an earlier "
                            f"sample's up to {before_upper}: records went back")  # fmt: skip
        last[key] = (p.seq, p.upper)
        seen["switched" if p.switched else "live"] += 1
    assert problems == [], f"{len(problems)} bad samples, first: {problems[:10]}"
    return seen


def assert_checks_pass(world: World) -> None:
    outcomes = checks.run_all(world.lake.config(), world.store, world.lake.objects(), world.target)
    assert [(c.name, c.summary) for c in outcomes if not c.passed] == []


# -- the race --------------------------------------------------------------------------------------


def switched_everywhere(world: World) -> bool:
    """Both closed dates switched in the ledger and the catalog caught up."""
    tps = {tp.dt: tp for tp in world.store.table_partitions(TABLE)}
    if not all(dt in tps and tps[dt].switched for dt in CLOSED):
        return False
    catalog = world.catalog_seqs()
    return all(catalog.get(dt, 0) >= tps[dt].publication_seq for dt in CLOSED)


def test_readers_never_see_a_partition_half_published_while_everything_races(
    world: World, tmp_path: Path, children: list[subprocess.Popen[bytes]]
) -> None:
    lake, catalog = world.lake, world.catalog_spec
    stop = tmp_path / "stop"
    loops = []
    merger_out = tmp_path / "merger.jsonl"
    ready = tmp_path / "merger.ready"
    proc = spawn(children, "merge_child", "merge_loop", lake, name="merger",
                 out=str(merger_out), stop=str(stop), ready=str(ready))  # fmt: skip
    loops.append((proc, ready))
    publisher_out = tmp_path / "publisher.jsonl"
    ready = tmp_path / "publisher.ready"
    proc = spawn(children, "publication_child", "publish_loop", lake, catalog=catalog,
                 out=str(publisher_out), stop=str(stop), ready=str(ready))  # fmt: skip
    loops.append((proc, ready))
    reader_outs = []
    for n in range(READERS):
        out, ready = tmp_path / f"reader-{n}.jsonl", tmp_path / f"reader-{n}.ready"
        proc = spawn(children, "publication_child", "read_loop", lake, catalog=catalog,
                     name=f"reader-{n}", dts=DTS, out=str(out), stop=str(stop),
                     ready=str(ready))  # fmt: skip
        loops.append((proc, ready))
        reader_outs.append(out)
    committers = []
    for n, close_after in enumerate(CLOSES):
        out = tmp_path / f"committer-{n}.jsonl"
        proc = spawn(children, "merge_child", "commit", lake, name=f"c{n}", seed=n,
                     commits=COMMITS, dts=DTS, rows=[4, 12], merge_after_s=0.2,
                     close_after=close_after, out=str(out))  # fmt: skip
        committers.append((proc, out))
    # Everyone starts at once (the interpreters' start is most of a short race's time); the
    # loops must all be up, not dead on arrival.
    for proc, ready in loops:
        wait_for(ready, proc)
    for proc, _ in committers:
        assert proc.wait(120) == 0
    # Going on until the closed dates switched mid-race (the merger merging, the publisher
    # switching, the readers reading), then a moment more for the readers to see it.
    deadline = time.monotonic() + SWITCH_LIMIT_S
    while not switched_everywhere(world):
        assert time.monotonic() < deadline, f"the closed dates did not switch in {SWITCH_LIMIT_S} s"
        assert all(p.poll() is None for p, _ in loops), "a loop died during the race"
        time.sleep(0.1)
    time.sleep(0.5)
    stop.write_text("stop")
    for proc, _ in loops:
        assert proc.wait(60) == 0

    records = [r for _, out in committers for r in read_lines(out)]
    assert [r for r in records if r["kind"] == "done"] == [{"kind": "done"}] * len(CLOSES)
    committed = Committed(records)
    assert set(committed.ids) == set(DTS)
    merges = [o for o in read_lines(merger_out) if o["outcome"] == MERGE_COMMITTED]
    assert merges, "nothing merged during the race"
    published = read_lines(publisher_out)
    assert [o for o in published if o["outcome"] == PUBLISHED and o["switched_now"]], "no switch"
    # A failed attempt is retried by the next run (a DynamoDB Query may see half a merge
    # commit); none may have been anything but the ledger read it could not trust.
    failed = [o for o in published if o["outcome"] == FAILED]
    assert [o for o in failed if not o["message"].startswith("PublicationError")] == []

    samples = [s for out in reader_outs for s in read_lines(out)]
    seen = judge_samples(world, committed, samples)
    assert seen["live"] > 0 and seen["switched"] > 0, seen

    # Everything quiet: a final merge and publication serve every record committed, once.
    settle_merges(world)
    assert [o.describe() for o in settle_publication(world) if not o.ok] == []
    for dt in DTS:
        tp = world.store.table_partition(TABLE, dt)
        assert tp is not None
        assert tp.switched is (dt in CLOSED), dt
        assert tp.published_upper == tp.next_object_id - 1 == len(committed.ids[dt])
        assert served(world, dt) == committed.records(dt), dt
    assert world.catalog_seqs() == world.ledger_seqs()
    assert_checks_pass(world)


# -- by hand: delayed objects, a killed publisher --------------------------------------------------


Account = dict[str, list[list[str]]]
"""Per date, each committed object's record ids, by ledger id (index 0 is id 1)."""


def commit(world: World, dt: str, count: int, rng: random.Random, account: Account) -> None:
    """`count` source objects of a few rows on `dt`, each committed on its own, merge due at
    once."""
    for _ in range(count):
        key, rows = f"src/{dt}/{uuid.uuid4().hex[:8]}", rng.randint(2, 5)
        small = write_small(world.lake, key, dt, rows, rng)
        (o,) = commit_source(world.store, key, [small], merge_after_s=0)
        account.setdefault(dt, []).append(event_ids(key, dt, rows))
        assert o.object_id == len(account[dt])


def upto(account: Account, dt: str, upper: int | None = None) -> list[str]:
    return sorted(e for ids in account[dt][:upper] for e in ids)


def test_delayed_objects_wait_for_their_merge_so_the_switch_never_hides_records(
    world: World,
) -> None:
    """The race's finding, made to happen: a partition closed with live ids 1..5, then delayed
    ids 6..8 committed, then one merge of 1..5 (the limits carry 6..8 over). The switch only
    needs the chain to cover the live ids, so had the live manifest named 6..8 (it did), the
    switch to the chain 1..5 would have hidden their records until the next merge."""
    dt, rng = DTS[0], random.Random(5)
    account: Account = {}
    commit(world, dt, 5, rng, account)
    assert world.store.close_partition(TABLE, dt) is not None
    commit(world, dt, 3, rng, account)  # delayed: 6..8
    (live,) = world.publisher().publish([dt])
    assert live.outcome == PUBLISHED and live.publication is not None
    assert (live.publication.switched, live.publication.upper) == (False, 5)
    assert served(world, dt) == upto(account, dt, 5)
    assert world.publisher().due() == []  # delayed objects wait for their merge

    lake = replace(patient(world.lake), max_objects=5, max_bytes=1 << 30)
    merges = lake.runner(world.store, "m").merge([dt])
    merge = next(merges)  # the first merge only: the runner would go on with the carry-over
    merges.close()
    assert (merge.outcome, merge.lower, merge.upper, merge.carry_over) == (
        MERGE_COMMITTED, 0, 5, True
    )  # fmt: skip
    (switch,) = world.publisher().publish([dt])
    assert switch.switched_now and switch.publication is not None
    assert switch.publication.upper == 5
    assert served(world, dt) == upto(account, dt, 5)  # nothing vanished

    settle_merges(world)
    (again,) = world.publisher().publish([dt])
    assert again.publication is not None and again.publication.upper == 8
    assert served(world, dt) == upto(account, dt)
    assert_checks_pass(world)


@pytest.mark.parametrize("step", ["written", "recorded", "cataloged"])
def test_a_publisher_killed_at_each_step_is_converged_by_the_next_one(
    world: World, tmp_path: Path, children: list[subprocess.Popen[bytes]], step: str
) -> None:
    """Killed at the first date (the second one's live republication still due): after writing
    its version (an orphan: the next one publishes), after recording it (the catalog lags: the
    next one repairs it), or after the run's one switch (both dates were recorded and switched
    together: done, nothing to redo)."""
    first, second = DTS[0], DTS[1]
    rng = random.Random(3)
    account: Account = {}
    commit(world, first, 3, rng, account)
    commit(world, second, 2, rng, account)
    assert [o.outcome for o in world.publisher().publish(DTS[:2])] == [PUBLISHED] * 2
    commit(world, first, 2, rng, account)
    assert world.store.close_partition(TABLE, first) is not None
    settle_merges(world)  # the chain covers 1..5: the switch is due
    commit(world, second, 2, rng, account)
    assert world.publisher().due() == [first, second]
    before = world.catalog_seqs()
    assert before == world.ledger_seqs() == {first: 1, second: 1}

    marker, out = tmp_path / "marker", tmp_path / "out"
    victim = spawn(children, "publication_child", "publish", world.lake,
                   catalog=world.catalog_spec, step=step, nth=1, marker=str(marker),
                   out=str(out))  # fmt: skip
    assert victim.wait(60) == -signal.SIGKILL
    assert json.loads(marker.read_text()) == {"step": step, "dt": first}
    assert not out.exists()
    ledger, catalog = world.ledger_seqs(), world.catalog_seqs()
    both = step == "cataloged"  # the one switch of the run covers both dates
    assert ledger[second] == catalog[second] == (2 if both else 1)  # else never reached
    assert (ledger[first], catalog[first]) == {
        "written": (1, 1), "recorded": (2, 1), "cataloged": (2, 2)
    }[step]  # fmt: skip
    versions = world.lake.table_dir / "_manifests" / f"dt={first}"
    assert len([d for d in versions.iterdir() if d.name.startswith("merged-")]) == 1

    outcomes = {o.dt: o for o in world.publisher().publish(world.publisher().due())}
    expected_first = {"written": PUBLISHED, "recorded": CATALOG_REPAIRED, "cataloged": None}[step]
    assert (outcomes[first].outcome if first in outcomes else None) == expected_first
    assert (outcomes[second].outcome if second in outcomes else None) == (
        None if both else PUBLISHED
    )
    assert world.publisher().due() == []
    after = world.catalog_seqs()
    assert after == world.ledger_seqs() == {first: 2, second: 2}
    assert all(after[dt] >= seq for dt, seq in before.items())  # nothing moved back
    current = world.store.publications(TABLE, first)[-1]
    assert current.switched and current.upper == 5
    for dt in (first, second):
        assert served(world, dt) == upto(account, dt)
    assert_checks_pass(world)
