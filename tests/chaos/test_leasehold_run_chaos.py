"""Chaos test of `leasehold run` itself, with real processes, on both store backends (issue 12).

Its source changes as it is ingested (issue 31): later objects carry a new field `country`, the
latest also a nested `device`, and new waves landing during the kills carry both; the run is
killed at least five times, so kills land amid schema versions being recorded and reads being
redone with them.

Its producer also re-sends (issue 45): a fifth of the records are sent again in objects of their
own, some with a greater `amount`, some with a smaller one, some unchanged, half of them with the
next day's event time. On SQLite the stream keeps the latest by `amount` in the whole table
(`dedupe: {mode: latest, order_by: amount, scope: table}`): every snapshot sampled serves each
key once across its dates, and the current one the record with the greatest `amount`, so a
re-send on the next day takes its key from the original's date. On DynamoDB the stream keeps
the first record of a key in the whole table (`dedupe: {mode: first, scope: table}`): every
snapshot sampled serves each key once across its dates, one of the key's records.

The crash tests (`tests/ingestion/test_ingestion_crash.py`) stop one run at a chosen step. Here
the whole command — discovery tick, range and retry runs, checks, in one process with its own
Spark — is SIGKILLed at random moments while it ingests, and the next invocation is started
right away, so each one starts amid what the last left behind: leases still held by a dead
owner, partitions handed back by no one, Dagster runs STARTED by a process that is gone. Then,
one lease timeout after the last kill, plain `leasehold run` has to converge within two
invocations. Nothing in the test process touches the store or the instance while a child runs
except to watch progress: recovery is entirely the command's own.

The verdict is independent of the store's own bookkeeping: the table as readers see it (the
objects the ledger names) is compared with the record ids in the source files, and the
quarantine objects with the malformed lines. The stream's table is an Iceberg table (the
default `table_format`, issue 33): read with pyiceberg and with polars at its current snapshot
it holds every well-formed record once, and each retained snapshot sampled from its history
serves, per date, exactly the files and rows of the ledger's publication with the seq the
history says was current then. The kill moments come from a seeded
`random.Random`; the seed is printed, and `LEASEHOLD_CHAOS_SEED=<seed>` replays its choices
(the moments the store is seen to move still depend on the machine).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from resources.catalog.iceberg.target import IcebergTarget
from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import ICEBERG
from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.partition_keys import to_partition_key
from resources.ingestion.unit_progress import quarantine_table
from resources.objects.base import ObjectStore
from resources.objects.factory import object_store_for
from resources.publication.manifest import read_spectrum
from resources.streams import load_streams
from tests.support.cli_project import CliProject, cli_project, kill_group
from tests.support.pipeline_env import STREAM, source_ids

pytestmark = pytest.mark.slow

# Per backend, so a run commits many times and three kills, each letting at most a second or
# so of commits through, all land while there is work left; yet the convergence run, which
# ingests most of it, stays short. The local DynamoDB server commits about a tenth as fast as
# SQLite (a few partitions a second on a busy two-core machine), and renews a chunk's leases
# one request at a time: fewer objects, smaller chunks.
OBJECTS = {"sqlite": 200, "dynamodb": 60}
CHUNK_SIZE = {"sqlite": 25, "dynamodb": 10}
RECORDS_PER_OBJECT = 40
MALFORMED_EVERY = 53
# Short, so the last kill's leases are free soon; a renewal (a quarter of it) survives the
# stalls of a loaded two-core machine starting a JVM.
LEASE_TIMEOUT_S = 5.0
KILLS = 3
DRIFT_KILLS = 5
"""This module's own test: the issue-31 drift, killed at least five times."""
WAVE_OBJECTS = 6
MAX_CHAOS_INVOCATIONS = 12
CONVERGENCE_INVOCATIONS = 2
POLL_S = 0.2


@dataclass(frozen=True)
class Progress:
    """What the store shows of the ingestion: acquisitions (every one bumps an epoch) and
    commits."""

    epochs: int
    completed: int


@dataclass
class Kill:
    invocation: int
    trigger: str
    delay_s: float
    before: Progress
    at_kill: Progress | None = None
    landed: bool = False
    exit_code: int | None = None
    elapsed_s: float = 0.0

    def describe(self) -> str:
        what = (
            f"killed at {self.at_kill}"
            if self.landed
            else f"exited by itself with {self.exit_code} before the kill"
        )
        return (
            f"invocation {self.invocation}: wait for {self.trigger} after {self.before}, "
            f"+{self.delay_s:.2f} s: {what} ({self.elapsed_s:.1f} s after its start)"
        )


@pytest.fixture
def project(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[CliProject]:
    endpoint = request.getfixturevalue("aws_server").endpoint_url if backend == "dynamodb" else None
    proj = cli_project(
        tmp_path / "project",
        backend,
        objects=OBJECTS[backend],
        records_per_object=RECORDS_PER_OBJECT,
        malformed_every=MALFORMED_EVERY,
        chunk_size=CHUNK_SIZE[backend],
        lease_timeout_s=LEASE_TIMEOUT_S,
        dynamodb_endpoint_url=endpoint,
    )
    drift(proj.sources)
    resend(proj.sources, random.Random(3), other_dates=True)
    text = proj.streams_path.read_text()
    proj.streams_path.write_text(
        text.replace(
            "    record_id: event_id\n",
            f"    record_id: event_id\n    dedupe: {POLICY[backend]}\n",
        )
    )
    yield proj
    proj.stop_children()


def progress(store: LeaseStore) -> Progress:
    items = list(store.iter_items(store.source_identifier(STREAM)))
    return Progress(
        epochs=sum(i.epoch for i in items),
        completed=sum(i.status is PartitionStatus.COMPLETED for i in items),
    )


def chaos(
    project: CliProject,
    rng: random.Random,
    refill: Callable[[], None] | None = None,
    kills_wanted: int = KILLS,
) -> list[Kill]:
    """Start `leasehold run` again and again, each right after the last was killed; kill each
    a random moment after the store shows it ingesting. Half the kills wait for its first
    acquisition (they land while it reads, often before Spark is up), half for its first
    commit (they land between commits, or among its Dagster events).

    A fast machine can finish the work before the kills have landed; `refill`, when given, then
    lands new source objects (as a live bucket would), so the number of kills does not depend
    on the machine's speed."""
    store = project.store()
    kills: list[Kill] = []
    try:
        while sum(k.landed for k in kills) < kills_wanted:
            assert project.invocations < MAX_CHAOS_INVOCATIONS + 2 * kills_wanted, (
                f"the work ran out before {kills_wanted} kills landed mid-run:\n"
                + "\n".join(k.describe() for k in kills)
            )
            trigger = rng.choice(["acquisition", "commit"])
            delay = rng.uniform(0.0, 3.0) if trigger == "acquisition" else rng.uniform(0.0, 1.0)
            kill = Kill(project.invocations + 1, trigger, delay, progress(store))
            kills.append(kill)
            proc = project.start("run")
            started = time.monotonic()
            while proc.poll() is None:
                now = progress(store)
                if (trigger == "acquisition" and now.epochs > kill.before.epochs) or (
                    trigger == "commit" and now.completed > kill.before.completed
                ):
                    break
                time.sleep(POLL_S)
            try:
                proc.wait(delay)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                kill.landed, kill.at_kill = True, progress(store)
            kill.elapsed_s = time.monotonic() - started
            if not kill.landed:
                kill.exit_code = proc.returncode
                if refill is not None and proc.returncode == 0:
                    refill()
            print(kill.describe(), flush=True)
    finally:
        store.close_store()
    return kills


def malformed_lines(sources: Path) -> Counter[tuple[str, int]]:
    """(source key, line number) of every line that is not a JSON record: the independent
    account of what must be quarantined."""
    lines: Counter[tuple[str, int]] = Counter()
    for path in sources.rglob("*.jsonl"):
        key = path.relative_to(sources).as_posix()
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            try:
                json.loads(line)
            except ValueError:
                lines[key, number] += 1
    return lines


def read_objects(store: LeaseStore, table: str, root_url: str) -> list[dict]:
    """Every row of `table` as a reader sees it: the objects the ledger names, nothing listed."""
    objects = object_store_for(root_url)
    rows: list[dict] = []
    for obj in store.ledger_objects(table):
        data = objects.get_bytes(objects.key_of(obj.url))
        rows.extend(pq.read_table(pa.BufferReader(data)).to_pylist())
    return rows


def converged(store: LeaseStore, keys: set[str]) -> tuple[bool, str]:
    items = {i.partition_key: i for i in store.iter_items(store.source_identifier(STREAM))}
    counts = Counter(i.status.value for i in items.values())
    missing = keys - set(items)
    done = not missing and all(i.status is PartitionStatus.COMPLETED for i in items.values())
    return done, f"{len(missing)} source objects without an item; items by status {dict(counts)}"


def drift(sources: Path) -> None:
    """From a third of the objects on, records carry `country`; from two thirds on also a
    nested `device` (malformed lines stay as they are)."""
    paths = sorted(sources.rglob("*.jsonl"))
    for n, path in enumerate(paths):
        if n < len(paths) // 3:
            continue
        lines = []
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                lines.append(line)
                continue
            record["country"] = f"C{n % 5}"
            if n >= 2 * len(paths) // 3:
                record["device"] = {"os": "ios", "n": n}
            lines.append(json.dumps(record))
        path.write_text("\n".join(lines) + "\n")


RESENT_SHARE = 0.2
POLICY = {
    "sqlite": "{mode: latest, order_by: amount, scope: table}",
    "dynamodb": "{mode: first, scope: table}",
}
"""The dedupe policy of the stream, per backend: `latest` and `first`, both across dates."""


def resend(sources: Path, rng: random.Random, other_dates: bool) -> None:
    """An at-least-once producer: a fifth of the well-formed records sent again, in objects of
    their own beside the originals (their keys sort among them), a third each with a greater
    `amount`, a smaller one, or unchanged; with `other_dates`, half of them a day later."""
    again: dict[Path, list[str]] = {}
    for path in sorted(sources.rglob("*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if rng.random() >= RESENT_SHARE:
                continue
            record["amount"] = record["amount"] + rng.choice([100.0, -100.0, 0.0])
            if other_dates and rng.random() < 0.5:
                at = datetime.strptime(record["event_time"], "%Y-%m-%dT%H:%M:%SZ")
                record["event_time"] = (at + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
            again.setdefault(path.with_name("again-" + path.name), []).append(json.dumps(record))
    for path, lines in again.items():
        path.write_text("\n".join(lines) + "\n")


def distinct(ids: Counter[str]) -> Counter[str]:
    """Each id once: what a table under a dedupe policy serves."""
    return Counter(set(ids))


def wave_writer(sources: Path) -> Callable[[], None]:
    """New objects after every earlier key, carrying both new fields."""
    waves = iter(range(1, 1_000))

    def write_wave() -> None:
        wave = next(waves)
        for i in range(WAVE_OBJECTS):
            path = sources / f"2026/01/09/wave{wave:03d}-{i:03d}.jsonl"
            path.parent.mkdir(parents=True, exist_ok=True)
            records = [
                {
                    "event_id": f"W{wave:03d}-{i:03d}-{j:03d}",
                    "user_id": "u",
                    "amount": 2.5,
                    "event_time": f"2026-01-{1 + j % 3:02d}T10:30:00Z",
                    "country": "W",
                    "device": {"os": "android", "n": j},
                }
                for j in range(30)
            ]
            path.write_text("\n".join(json.dumps(r) for r in records) + "\n")
        print(f"the work ran out: wave {wave} landed", flush=True)

    return write_wave


Row = tuple[str | None, dict | None, float]


def expected_rows(sources: Path, latest: bool) -> dict[str, list[Row]]:
    """event_id -> the (country, device, amount) the policy may serve: under `latest` the one
    of the greatest `amount` among the source objects' records of that id (equal amounts are
    equal records); under `first`, any of them (which one was committed first is the run's)."""
    rows: dict[str, list[Row]] = {}
    for path in sources.rglob("*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            row = (record.get("country"), record.get("device"), record["amount"])
            held = rows.setdefault(record["event_id"], [])
            if not latest:
                held.append(row)
            elif not held or row[2] > held[0][2]:
                held[:] = [row]
    return rows


def published(project: CliProject) -> list[tuple]:
    """(event_id, country, device, amount) of every published row: `leasehold table ls` for the
    partitions, `leasehold table files` for each manifest's files, DuckDB over them by name."""
    code, output = project.run("table", "ls", STREAM, "--json")
    assert code == 0, output
    files: list[str] = []
    for partition in json.loads(output[output.index("[") :]):
        code, output = project.run("table", "files", STREAM, partition["dt"], "--json")
        assert code == 0, output
        files += [
            e["url"].removeprefix("file://")
            for e in json.loads(output[output.index("{") :])["files"]
        ]
    return duckdb.sql(
        f"select event_id, country, device, amount from read_parquet({files}, union_by_name=true)"
    ).fetchall()


def iceberg_target(project: CliProject) -> IcebergTarget:
    """The stream's Iceberg table, through the SQL catalog `leasehold` used (the default one
    under its data directory)."""
    settings = CatalogSettings(
        iceberg_catalog_path=str(project.root / "data" / "iceberg" / "catalog.db")
    )
    target = target_for(settings, ICEBERG)
    assert isinstance(target, IcebergTarget)
    return target


def ids_at(target: IcebergTarget, snapshot_id: int, dt: str | None = None) -> Counter[str]:
    read = target.read(STREAM, dt, snapshot_id, columns=["event_id"])
    return Counter(read.column(0).to_pylist())


def polars_ids(target: IcebergTarget, snapshot_id: int) -> Counter[str]:
    frame = pl.scan_iceberg(target.load(STREAM), snapshot_id=snapshot_id).select("event_id")
    return Counter(frame.collect()["event_id"].to_list())


def publication_files(store: LeaseStore, objects: ObjectStore, dt: str) -> dict[int, list[str]]:
    """seq -> the file URLs of each publication of `dt` the ledger recorded (its manifest)."""
    return {
        p.seq: sorted(e.url for e in read_spectrum(objects, p.location))
        for p in store.publications(STREAM, dt)
    }


def assert_current(target: IcebergTarget, expected: Counter[str], context: str) -> int:
    """The Iceberg table at its current snapshot, read by pyiceberg and by polars, holds
    `expected` (every well-formed record id once); the current snapshot's id."""
    current = target.load(STREAM).metadata.current_snapshot_id
    assert current is not None, f"{context}\nthe Iceberg table has no snapshot"
    for reader, ids in (
        ("pyiceberg", ids_at(target, current)),
        ("polars", polars_ids(target, current)),
    ):
        assert ids == expected, (
            f"{context}\n{reader} at the current snapshot: {len(set(expected) - set(ids))} lost, "
            f"{sum(n > 1 for n in ids.values())} twice, {len(set(ids) - set(expected))} extra"
        )
    return current


def assert_history(
    project: CliProject, target: IcebergTarget, rng: random.Random, context: str
) -> None:
    """Some retained snapshots (the first, the current one's predecessor, and random ones):
    per date, the seq current at that snapshot (the last one switched up to it, from the
    snapshots' summaries) names the ledger's publication whose files that snapshot plans and
    whose rows it reads (pyiceberg), and polars reads the same rows there."""
    history = target.snapshots(STREAM)
    assert history[-1].snapshot_id == target.load(STREAM).metadata.current_snapshot_id
    # Every snapshot since the table's first is retained here (far fewer than the retention
    # keeps), so the seqs current at each follow from the summaries, oldest first.
    first = min(target.load(STREAM).metadata.snapshots, key=lambda s: s.sequence_number or 0)
    assert first.parent_snapshot_id is None, f"{context}\nthe table's first snapshot expired"
    state: dict[str, int] = {}
    at: list[dict[str, int]] = []
    for snapshot in history:
        state = {**state, **snapshot.seqs}
        at.append(state)
    assert at[-1] == {p.dt: p.seq for p in target.partitions(STREAM)}, context
    store = project.store()
    objects = object_store_for(load_streams(project.streams_path)[STREAM].table)
    try:
        published = {dt: publication_files(store, objects, dt) for dt in at[-1]}
    finally:
        store.close_store()
    picked = {0, max(0, len(history) - 2), *rng.sample(range(len(history)), min(3, len(history)))}
    print(f"{len(history)} snapshots; reading snapshots {sorted(picked)} back", flush=True)
    for i in sorted(picked):
        sid = history[i].snapshot_id
        total: Counter[str] = Counter()
        for dt, seq in at[i].items():
            where = f"{context}\nsnapshot {i} ({sid}), dt={dt}, seq {seq}"
            assert seq in published[dt], f"{where}: no such publication in the ledger"
            files = [f.url for f in target.data_files(STREAM, dt, sid)]
            assert files == published[dt][seq], f"{where}: files differ from its manifest"
            ids = ids_at(target, sid, dt)
            assert ids == Counter(pq_ids(published[dt][seq])), f"{where}: rows differ"
            twice = [i for i, n in ids.items() if n > 1]
            assert not twice, f"{where}: {len(twice)} keys served twice, e.g. {twice[:3]}"
            total += ids
        twice = [i for i, n in total.items() if n > 1]
        assert not twice, f"{context}\nsnapshot {i}: {len(twice)} keys on two dates: {twice[:3]}"
        assert polars_ids(target, sid) == total, f"{context}\nsnapshot {i}: polars differs"


def pq_ids(urls: list[str]) -> list[str]:
    """The record ids of the Parquet files `urls` (local files)."""
    return [
        i
        for url in urls
        for i in pq.read_table(url.removeprefix("file://"), columns=["event_id"])
        .column(0)
        .to_pylist()
    ]


def test_leasehold_run_converges_after_random_kills(project: CliProject) -> None:
    seed = int(os.environ.get("LEASEHOLD_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (LEASEHOLD_CHAOS_SEED={seed} replays it)", flush=True)
    started = time.monotonic()
    refill = wave_writer(project.sources)
    kills = chaos(project, random.Random(seed), refill=refill, kills_wanted=DRIFT_KILLS)
    context = f"seed {seed}\n" + "\n".join(k.describe() for k in kills)

    # One lease timeout after the last kill, every lease it held has expired.
    time.sleep(LEASE_TIMEOUT_S + 0.5)
    keys = {p.relative_to(project.sources).as_posix() for p in project.sources.rglob("*.jsonl")}
    store = project.store()
    outcomes: list[str] = []
    try:
        for _ in range(CONVERGENCE_INVOCATIONS):
            began = time.monotonic()
            code, output = project.run("run")
            done, state = converged(store, keys)
            outcomes.append(f"exit {code} after {time.monotonic() - began:.1f} s, {state}")
            if done and code == 0:
                break
        assert done and code == 0, (
            f"{context}\nnot converged after {len(outcomes)} invocations: {outcomes}\n"
            f"last output:\n{project.tail()}"
        )
        context += "\nconvergence: " + "; ".join(outcomes)
        print(context.splitlines()[-1], flush=True)

        items = list(store.iter_items(store.source_identifier(STREAM)))
        # A dead letter is COMPLETED with its reason. No object here is unreadable, so any
        # dead letter would be a partition the recovery gave up on.
        dead = {i.partition_key: i.dead_letter_reason for i in items if i.dead_letter_reason}
        assert dead == {}, f"{context}\ndead-lettered: {dead}"

        # No record lost, none twice: the committed rows against the source files (each
        # source record once, re-sends included: the policy acts at publication).
        config = load_streams(project.streams_path)[STREAM]
        sent = source_ids(project.sources)
        expected = distinct(sent)
        seen = Counter(row["event_id"] for row in read_objects(store, STREAM, config.table))
        lost, twice = sent - seen, seen - sent
        extra = set(seen) - set(sent)
        assert not lost and not twice and not extra, (
            f"{context}\n{len(lost)} lost (e.g. {sorted(lost)[:5]}), {len(twice)} more than sent "
            f"(e.g. {sorted(twice)[:5]}), {len(extra)} not in the sources"
        )
        # Quarantined rows are exactly the malformed lines, each once.
        bad = malformed_lines(project.sources)
        assert bad, "the sample sources have malformed lines"
        quarantined = Counter(
            (row["source_key"], row["line"])
            for row in read_objects(store, quarantine_table(STREAM), config.quarantine)
        )
        assert quarantined == bad, (
            f"{context}\nquarantine differs from the malformed lines: missing "
            f"{sorted(bad - quarantined)[:5]}, extra {sorted(quarantined - bad)[:5]}"
        )
        completed = {
            to_partition_key(i.partition_key)
            for i in items
            if i.status is PartitionStatus.COMPLETED and not i.dead_letter_reason
        }
        # The source's fields changed twice: each new field is one schema version's column.
        added = [name for v in store.schema_versions(STREAM) for name in v.added]
        assert added.count("country") == 1 and added.count("device") == 1, (context, added)
    finally:
        store.close_store()

    # The published table as an engine reads it: every record once, with its object's values
    # (the new columns null for records written before them).
    expected_values = expected_rows(
        project.sources, latest="latest" in POLICY[project.settings.backend]
    )
    rows = published(project)
    assert sorted(r[0] for r in rows) == sorted(expected_values), context
    wrong = [
        r
        for r in rows
        if (r[1], None if r[2] is None else json.loads(r[2]), r[3]) not in expected_values[r[0]]
    ]
    assert not wrong, f"{context}\n{len(wrong)} rows differ from their source, e.g. {wrong[:3]}"

    # Dagster: no run left STARTED by a killed process, every commit known.
    with DagsterInstance.from_config(str(project.dagster_home)) as instance:
        in_flight = instance.get_runs(
            RunsFilter(
                statuses=[
                    DagsterRunStatus.STARTING,
                    DagsterRunStatus.STARTED,
                    DagsterRunStatus.CANCELING,
                ]
            )
        )
        assert not in_flight, f"{context}\nruns still in flight after convergence: " + ", ".join(
            f"{r.run_id} {r.status.value} {dict(r.tags)}" for r in in_flight
        )
        failed = instance.get_runs(RunsFilter(statuses=[DagsterRunStatus.FAILURE]))
        assert failed, f"{context}\nno killed run was marked failed"
        materialized = instance.get_materialized_partitions(AssetKey([STREAM, "ingested"]))
        unknown = completed - materialized
        assert not unknown, (
            f"{context}\n{len(unknown)} committed partitions Dagster has no materialization "
            f"for, e.g. {sorted(unknown)[:5]}"
        )

    code, output = project.run("check")
    assert code == 0, f"{context}\nleasehold check failed:\n{output}"
    # The Iceberg table now, then once more after one more wave and run: the snapshot current
    # now must still read as the table was (every record before the wave, none of it).
    checked = time.monotonic()
    target = iceberg_target(project)
    before = assert_current(target, expected, context)
    print(f"Iceberg reads: {time.monotonic() - checked:.1f} s", flush=True)
    refill()
    code, output = project.run("run")
    assert code == 0, f"{context}\nthe run after one more wave failed:\n{project.tail()}"
    checked = time.monotonic()
    after = distinct(source_ids(project.sources))
    assert len(after) > len(expected), "the last wave added records"
    assert assert_current(target, after, context) != before, context
    assert ids_at(target, before) == expected, f"{context}\nthe older snapshot changed"
    assert_history(project, target, random.Random(seed), context)
    print(f"Iceberg history: {time.monotonic() - checked:.1f} s", flush=True)
    print(f"chaos test: {time.monotonic() - started:.1f} s, {project.invocations} invocations")
