"""Rollups with real OS processes, both backends, both modes (issue 22).

One table partition is committed in three waves of small objects; between them, rollup writers
(`tests.support.rollup_child`) are SIGKILLed between computing and committing, between the
batch's pending record and its first key, and between two store transactions of one batch (a
batch spans more keys than one transaction holds); one is SIGSTOPped just before writing its
keys until its lease has passed to a successor that finishes, then woken: a zombie. An opaque
replay takes in what was committed since the attempt that died (a bigger batch, other rows, a
new txid): its contents differ from the dead attempt's, and the state is still exact. After every
disturbance and at the end, the state equals a from-scratch aggregation of the rows the test
itself wrote (the verdict does not come from the store), and the zombie wrote nothing. The same
holds for a rollup recomputed per publication (`dedupe: latest`), whose corrections move keys
between groups.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.aggregation.partials import ArrowPartials, encode_key
from resources.aggregation.runner import LOST_LEASE, ROLLED_UP, UP_TO_DATE
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.key_settings import DATE, LATEST, DedupeSettings
from resources.ledger.model import SmallObject
from resources.ledger.rollup_state import KEYS_PER_TRANSACTION
from resources.publication.publisher import Publisher
from resources.rollup.aggregates import Value
from resources.rollup.cursor import rollup_id
from resources.stores.settings import StoreSettings
from tests.support.child_processes import child_processes, spawn_child, wait_for
from tests.support.merge_child import TABLE, Lake, commit_source, epoch_us, write_small
from tests.support.rollup_child import per_user, runner

pytestmark = pytest.mark.slow

DT = "2099-03-01"
OBJECTS_PER_WAVE = 8
ROWS = 60
USERS = 150
"""Enough users that a batch of 4 objects (240 rows, ~120 users) holds more keys than one
transaction; few enough that moto, which copies the whole table for each item of a
transaction, stays quick."""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    yield from child_processes()


@pytest.fixture(params=["sqlite", "dynamodb"])
def lake(
    request: pytest.FixtureRequest, settings_for: Callable[..., StoreSettings], tmp_path: Path
) -> Lake:
    settings = settings_for(request.param)
    lake = Lake(
        settings=settings.__dict__,
        root=str(tmp_path),
        max_objects=100,
        max_bytes=10**9,
        timeout_s=2.0,
        renew_s=0.5,
    )
    lake.store().close_store()
    return lake


def wave(lake: Lake, n: int, rng: random.Random) -> None:
    store = lake.store()
    for i in range(OBJECTS_PER_WAVE):
        key = f"wave{n}-{i}"
        obj = write_small(lake, key, DT, ROWS, rng)
        data = pq.read_table(obj.url[len("file://") :])
        users = [f"user-{rng.randrange(USERS)}" for _ in range(data.num_rows)]
        pq.write_table(data.set_column(1, "user_id", pa.array(users)), obj.url[len("file://") :])
        commit_source(store, key, [obj], merge_after_s=3600)
    store.close_store()


def reference(lake: Lake, mode: str) -> dict[str, Value]:
    """From scratch: every row the test wrote, aggregated in one pass."""
    files = sorted(Path(lake.table_dir, f"dt={DT}").glob("*.parquet"))
    return ArrowPartials.of_table(per_user(mode), pa.concat_tables(pq.read_table(f) for f in files))


def state(lake: Lake, mode: str) -> dict[str, Value]:
    store = lake.store()
    try:
        rollup = rollup_id(TABLE, per_user(mode))
        return {k: s.value for k, s in store.rollup_states(rollup, DT).items()}
    finally:
        store.close_store()


def assert_equal(got: dict[str, Value], want: dict[str, Value]) -> None:
    assert got.keys() == want.keys()
    for key, (count, total, largest) in want.items():
        g = got[key]
        assert g[0] == count and g[2] == largest, key
        assert math.isclose(g[1], total, rel_tol=1e-9, abs_tol=1e-9), key  # float sums


def killed_at(
    children: list[subprocess.Popen[bytes]],
    lake: Lake,
    tmp: Path,
    mode: str,
    step: str,
    nth: int,
    do: str = "kill",
    served: bool = False,
) -> tuple[subprocess.Popen[bytes], Path]:
    marker = tmp / f"{step}-{nth}-{len(children)}.json"
    proc = spawn_child(
        children,
        "rollup_child",
        {
            "lake": lake.__dict__,
            "mode": mode,
            "dts": [DT],
            "owner": f"writer-{len(children)}",
            "step": step,
            "nth": nth,
            "do": do,
            "marker": str(marker),
            "out": str(tmp / f"out-{len(children)}.json"),
            "served": served,
        },
    )
    wait_for(marker, proc, limit_s=60)
    if do == "kill":
        assert proc.wait(30) == -signal.SIGKILL
        wait_lease_expiry(lake)  # the next writer takes the job over, as after a real crash
    return proc, marker


def run_to_end(lake: Lake, mode: str, owner: str, served: bool = False) -> list[Any]:
    """A writer in this process, with a patient lease (the children's short ones are tested)."""
    store = replace(lake, timeout_s=30, renew_s=5).store()
    try:
        patient = replace(lake, timeout_s=30, renew_s=5)
        return runner(patient, store, mode, owner, served=served).run([DT])
    finally:
        store.close_store()


def wait_lease_expiry(lake: Lake) -> None:
    time.sleep(lake.timeout_s + 0.5)


@pytest.mark.parametrize("mode", ["transactional", "opaque"])
def test_killed_and_zombie_writers_leave_the_rollup_exact(
    lake: Lake, mode: str, children: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    rng = random.Random(22)
    wave(lake, 1, rng)
    # Killed between two transactions of the first batch: some keys hold batch 4, the cursor
    # names it pending. The next writer, killed after computing, changes nothing.
    killed_at(children, lake, tmp_path, mode, "transaction", 1)
    partial = state(lake, mode)
    assert 0 < len(partial) <= KEYS_PER_TRANSACTION
    killed_at(children, lake, tmp_path, mode, "computed", 1)
    assert state(lake, mode) == partial
    # Transactional: the third completes the first batch, and is killed after the second
    # batch's pending record, before its first key. Opaque: the third replays the first batch
    # with the second's objects taken in (other contents, txid 8; the dead attempt's 4 among
    # `earlier`), and is killed after recording that, before its first key.
    killed_at(children, lake, tmp_path, mode, "pending", 2 if mode == "transactional" else 1)
    wave(lake, 2, rng)
    [outcome] = run_to_end(lake, mode, "finisher")
    assert outcome.outcome == ROLLED_UP and outcome.replayed
    # Transactional replays (4, 8] as it was, then (8, 12], (12, 16]; opaque replays (0, 8]
    # as (0, 12] (what wave 2 committed since, taken in), then (12, 16].
    assert outcome.batches == (3 if mode == "transactional" else 2), outcome
    assert_equal(state(lake, mode), reference(lake, mode))

    # A zombie: stopped after recording its first batch as pending, before its keys; its lease
    # passes to a successor that rolls everything up; woken, it must write nothing.
    wave(lake, 3, rng)
    zombie_after_its_successor(children, lake, tmp_path, mode, lambda: reference(lake, mode))


def zombie_after_its_successor(
    children: list[subprocess.Popen[bytes]],
    lake: Lake,
    tmp: Path,
    mode: str,
    want: Callable[[], dict[str, Value]],
    served: bool = False,
) -> None:
    """A writer stopped after recording its batch as pending, before its keys; its lease
    passes to a successor that brings the state to `want()`; woken, it writes nothing."""
    out = tmp / f"out-{len(children)}.json"
    zombie, marker = killed_at(children, lake, tmp, mode, "pending", 1, "pause", served)
    os.kill(zombie.pid, signal.SIGSTOP)
    wait_lease_expiry(lake)
    [outcome] = run_to_end(lake, mode, "successor", served)
    assert outcome.outcome == ROLLED_UP
    settled = state(lake, mode)
    assert_equal(settled, want())
    marker.with_name(marker.name + ".release").touch()
    os.kill(zombie.pid, signal.SIGCONT)
    assert zombie.wait(60) == 0
    [zombie_outcome] = json.loads(out.read_text())
    assert zombie_outcome["outcome"] == LOST_LEASE, zombie_outcome
    assert state(lake, mode) == settled
    [again] = run_to_end(lake, mode, "again", served)
    assert again.outcome == UP_TO_DATE


class LatestTable:
    """The lake's `events` table under `dedupe: latest` (the greatest amount wins), published to
    a local catalog by this process; what it must serve is kept here, apart from the store."""

    def __init__(self, lake: Lake, tmp: Path) -> None:
        self.lake = lake
        self.config = replace(lake.config(), dedupe=DedupeSettings(LATEST, "amount", DATE))
        self.target = HiveManifestsTarget(LocalCatalog(tmp / "catalog.json"))
        self.served: dict[str, tuple[str, float]] = {}
        self.waves = 0

    def wave(self, rng: random.Random, new: int, resent: int) -> None:
        """`new` records, and `resent` served ones again with a greater amount and another
        user (a correction: the key leaves its group), in objects of `ROWS` records."""
        self.waves += 1
        rows = [
            (f"w{self.waves}-{i}", f"user-{rng.randrange(USERS)}", rng.uniform(0, 100))
            for i in range(new)
        ]
        again = rng.sample(sorted(self.served), resent)
        rows += [(k, f"user-{rng.randrange(USERS)}", self.served[k][1] + 100) for k in again]
        rng.shuffle(rows)
        store = self.lake.store()
        for n, start in enumerate(range(0, len(rows), ROWS)):
            part = rows[start : start + ROWS]
            path = self.lake.table_dir / f"dt={DT}" / f"latest-{self.waves}-{n}.parquet"
            path.parent.mkdir(parents=True, exist_ok=True)
            times = [epoch_us(DT) + rng.randrange(86_400_000_000) for _ in part]
            pq.write_table(
                pa.table(
                    {
                        "event_id": [r[0] for r in part],
                        "user_id": [r[1] for r in part],
                        "amount": pa.array([r[2] for r in part], pa.float64()),
                        "event_time": pa.array(times, pa.timestamp("us", tz="UTC")),
                    }
                ),
                path,
            )
            small = SmallObject(TABLE, DT, f"file://{path}", path.stat().st_size, len(part))
            commit_source(store, f"latest-{self.waves}-{n}", [small], merge_after_s=3600)
        store.close_store()
        for key, user, amount in rows:
            self.served[key] = (user, amount)

    def publish(self) -> None:
        store = self.lake.store()
        try:
            assert (
                Publisher(self.config, store, self.lake.objects(), self.target).publish_one(DT).ok
            )
        finally:
            store.close_store()

    def reference(self) -> dict[str, Value]:
        """Per user, from what the table must serve: events, total and largest amount."""
        by_user: dict[str, list[float]] = {}
        for user, amount in self.served.values():
            by_user.setdefault(user, []).append(amount)
        return {encode_key([u]): (len(a), sum(a), max(a)) for u, a in by_user.items()}


def test_a_rollup_recomputed_per_publication_stays_exact_through_kills_and_a_zombie(
    lake: Lake, children: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    """Under `latest` a correction moves a key to another group: the rollup is recomputed per
    publication; writers killed between two of its transactions and after computing, and a
    zombie woken after its successor finished, leave it what the published table serves."""
    mode, rng, table = "transactional", random.Random(45), LatestTable(lake, tmp_path)
    table.wave(rng, new=8 * ROWS, resent=0)
    table.publish()
    killed_at(children, lake, tmp_path, mode, "transaction", 1, served=True)
    partial = state(lake, mode)
    assert 0 < len(partial) <= KEYS_PER_TRANSACTION
    killed_at(children, lake, tmp_path, mode, "computed", 1, served=True)
    assert state(lake, mode) == partial
    table.wave(rng, new=2 * ROWS, resent=3 * ROWS)
    table.publish()
    [outcome] = run_to_end(lake, mode, "finisher", served=True)
    assert outcome.outcome == ROLLED_UP and outcome.replayed, outcome
    assert_equal(state(lake, mode), table.reference())

    table.wave(rng, new=ROWS, resent=4 * ROWS)
    table.publish()
    zombie_after_its_successor(children, lake, tmp_path, mode, table.reference, served=True)
