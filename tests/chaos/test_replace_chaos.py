"""`on_change: replace` under `leasehold run` SIGKILLed at random moments, on both backends
(issue 45): source objects rewritten in place — some with the same size (the same records,
revised, moved to the other date), some with another (records dropped, new ones added on a
third date) — and rewritten again while the kills land, with listing discovery's
reconciliation pass seeing each rewrite.

The verdict is the table as readers see it, at every retained Iceberg snapshot after the first
whole run: each source object's rows are exactly one of the versions it was written with —
the earlier content or the new, never both, never neither, never a part — and no record id is
served twice; at the current snapshot, read by pyiceberg and polars, each object's last
version. `leasehold check` passes, and every change is recorded as replaced.

The dates are old (closed at once), so a replacement meets dates already merged and switched:
its rows there wait for the merge of the late objects, and the replacement's other dates are
held back with them. On SQLite the stream keeps the latest by `rev`, on DynamoDB the first
record of a key; both per date.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

import polars as pl
import pytest

from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.coordination.source_changes import REPLACED
from tests.support.cli_project import CliProject, cli_project, kill_group

pytestmark = pytest.mark.slow

STREAM = "events"
OBJECTS = 8
ROWS = 60
KILLS = 5
LEASE_TIMEOUT_S = 5.0
MAX_INVOCATIONS = 16
POLL_S = 0.2
POLICY = {"sqlite": "{mode: latest, order_by: rev}", "dynamodb": "{mode: first}"}
STREAMS = """streams:
  events:
    source: file://{root}/sources
    format: jsonl
    schema: {{order_id: string, obj: string, rev: long, event_time: timestamp}}
    event_time: event_time
    record_id: order_id
    dedupe: {policy}
    on_change: replace
    partition: {{max_objects: 2}}
    table: file://{root}/lake/events
"""

Row = tuple[str, int]
"""(order_id, rev) of a served row."""


def content(obj: int, rev: int) -> list[dict[str, object]]:
    """Version `rev` of object `obj`. Even objects keep their size (the same ids, revised,
    each on the other date); odd ones change it (records dropped, new ones on 2026-11-03)."""
    day = lambda i: 1 + (i + rev) % 2  # noqa: E731
    if obj % 2 == 0 or rev == 0:
        ids = [(f"o{obj}-{i:03d}", day(i)) for i in range(ROWS)]
    else:
        ids = [(f"o{obj}-{i:03d}", day(i)) for i in range(ROWS - 5 * rev)]
        ids += [(f"o{obj}-r{rev}-{i:02d}", 3) for i in range(4)]
    return [
        {"order_id": i, "obj": f"o{obj}", "rev": rev, "event_time": f"2026-11-0{d}T10:00:00Z"}
        for i, d in ids
    ]


def expected(obj: int, rev: int) -> frozenset[Row]:
    return frozenset((str(r["order_id"]), int(r["rev"])) for r in content(obj, rev))  # type: ignore[call-overload]


class Producer:
    """Writes each object's versions in place (atomically, each with a new mtime)."""

    def __init__(self, sources: Path) -> None:
        self.sources = sources
        self.versions: dict[int, list[int]] = {obj: [] for obj in range(OBJECTS)}
        self.tick = 0

    def write(self, obj: int, rev: int) -> None:
        path = self.sources / f"2026/11/obj-{obj}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = "".join(json.dumps(r) + "\n" for r in content(obj, rev))
        if rev:
            old = path.read_text()
            assert (len(body) == len(old)) == (obj % 2 == 0), "even objects keep their size"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(body)
        os.replace(tmp, path)
        self.tick += 1
        when = 1_800_000_000_000_000_000 + self.tick * 10**9
        os.utime(path, ns=(when, when))
        self.versions[obj].append(rev)

    def rewrite(self, rng: random.Random, count: int = 3) -> None:
        for obj in rng.sample(range(OBJECTS), count):
            self.write(obj, self.versions[obj][-1] + 1)


@pytest.fixture(params=["sqlite", "dynamodb"])
def project(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[CliProject]:
    backend = request.param
    endpoint = request.getfixturevalue("aws_server").endpoint_url if backend == "dynamodb" else None
    proj = cli_project(
        tmp_path / "project",
        backend,
        objects=0,
        records_per_object=0,
        malformed_every=0,
        chunk_size=4,
        lease_timeout_s=LEASE_TIMEOUT_S,
        dynamodb_endpoint_url=endpoint,
    )
    proj.streams_path.write_text(STREAMS.format(root=proj.root, policy=POLICY[backend]))
    proj.env["LEASEHOLD_RECONCILE_INTERVAL_SECONDS"] = "0"
    yield proj
    proj.stop_children()


def progress(store: LeaseStore) -> tuple[int, int]:
    """(acquisitions: every one bumps an epoch, units completed)."""
    items = list(store.iter_items(store.source_identifier(STREAM)))
    return sum(i.epoch for i in items), sum(i.status is PartitionStatus.COMPLETED for i in items)


def chaos(project: CliProject, producer: Producer, rng: random.Random) -> list[str]:
    """`leasehold run` again and again, each SIGKILLed a random moment after the store shows
    it taking a lease (the kill lands amid reads and commits) or completing a unit (amid
    commits, merges and publications), until `KILLS` kills landed; a run that finishes first
    gets objects rewritten again for the next."""
    store = project.store()
    story: list[str] = []
    landed = 0
    try:
        while landed < KILLS:
            assert project.invocations < MAX_INVOCATIONS, "\n".join(story)
            trigger = rng.choice([0, 1])  # 0: an acquisition, 1: a completion
            delay = rng.uniform(0.0, 2.5) if trigger == 0 else rng.uniform(0.5, 4.0)
            before = progress(store)[trigger]
            proc = project.start("run")
            while proc.poll() is None and progress(store)[trigger] == before:
                time.sleep(POLL_S)
            what = ("acquisition", "completion")[trigger]
            try:
                proc.wait(delay)
                story.append(f"exited {proc.returncode} before the kill ({what} +{delay:.2f} s)")
                producer.rewrite(rng)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                landed += 1
                story.append(f"killed {delay:.2f} s after its first {what}")
    finally:
        store.close_store()
    return story


def iceberg(project: CliProject) -> IcebergTarget:
    settings = CatalogSettings(
        iceberg_catalog_path=str(project.root / "data" / "iceberg" / "catalog.db")
    )
    target = target_for(settings, ICEBERG)
    assert isinstance(target, IcebergTarget)
    return target


def served(target: IcebergTarget, snapshot_id: int) -> dict[str, list[Row]]:
    """Object -> its (order_id, rev) rows at the snapshot (pyiceberg)."""
    table = target.read(STREAM, None, snapshot_id, columns=["order_id", "obj", "rev"])
    rows: dict[str, list[Row]] = defaultdict(list)
    for order_id, obj, rev in zip(
        *(table.column(c).to_pylist() for c in ("order_id", "obj", "rev")), strict=True
    ):
        rows[obj].append((order_id, rev))
    return rows


def test_replacements_survive_random_kills(project: CliProject) -> None:
    seed = int(os.environ.get("LEASEHOLD_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    context = f"seed {seed} (LEASEHOLD_CHAOS_SEED replays it)"
    producer = Producer(project.sources)
    for obj in range(OBJECTS):
        producer.write(obj, 0)
    code, output = project.run("run")
    assert code == 0, output
    target = iceberg(project)
    first = target.load(STREAM).metadata.current_snapshot_id
    assert first is not None

    producer.rewrite(rng, count=OBJECTS // 2)
    context += "\n" + "\n".join(chaos(project, producer, rng))
    time.sleep(LEASE_TIMEOUT_S + 0.5)
    for _ in range(6):  # converge: every unit completed, every change replaced
        code, output = project.run("run")
        store = project.store()
        try:
            items = list(store.iter_items(store.source_identifier(STREAM)))
            changes = store.source_changes(store.source_identifier(STREAM))
        finally:
            store.close_store()
        done = all(i.status is PartitionStatus.COMPLETED for i in items)
        if code == 0 and done and all(c.state == REPLACED for c in changes):
            break
        time.sleep(5)  # a replacement waiting for the unit it replaces reopens with backoff
    else:
        pytest.fail(f"{context}\nnot converged: exit {code}\n{project.tail()}")
    assert not [i.partition_key for i in items if i.dead_letter_reason], context
    assert len(changes) >= OBJECTS // 2, context

    # Every snapshot since the first whole run: each object whole, in one of its versions.
    history = [s.snapshot_id for s in target.snapshots(STREAM)]
    since = history[history.index(first) :]
    assert len(since) >= 2, context
    context += f"\n{len(since)} snapshots since the first whole run"
    for snapshot in since:
        rows = served(target, snapshot)
        for obj in range(OBJECTS):
            mine = rows.get(f"o{obj}", [])
            assert len(mine) == len(set(mine)), f"{context}\nsnapshot {snapshot}: o{obj} twice"
            versions = {rev: expected(obj, rev) for rev in producer.versions[obj]}
            assert frozenset(mine) in versions.values(), (
                f"{context}\nsnapshot {snapshot}: o{obj} serves {len(mine)} rows, revs "
                f"{sorted({r for _, r in mine})}: none of its versions {sorted(versions)}"
            )
    # The current snapshot: each object's last version, by pyiceberg and by polars.
    current = target.load(STREAM).metadata.current_snapshot_id
    assert current is not None
    want = {f"o{obj}": expected(obj, v[-1]) for obj, v in producer.versions.items()}
    assert {o: frozenset(r) for o, r in served(target, current).items()} == want, context
    frame = pl.scan_iceberg(target.load(STREAM)).select("order_id", "rev").collect()
    assert frame.height == sum(len(v) for v in want.values()) == frame["order_id"].n_unique()
    code, output = project.run("check")
    assert code == 0, f"{context}\nleasehold check failed:\n{output}"
    print(context, flush=True)
