"""Chaos test of `leasehold run` itself, with real processes, on both store backends (issue 12).

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
quarantine objects with the malformed lines. The kill moments come from a seeded
`random.Random`; the seed is printed, and `LEASEHOLD_CHAOS_SEED=<seed>` replays its choices
(the moments the store is seen to move still depend on the machine).
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import AssetKey, DagsterInstance, DagsterRunStatus, RunsFilter

from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.partition_keys import to_partition_key
from resources.ingestion.runner import quarantine_table
from resources.ingestion.sample_data import write_sample_sources
from resources.objects.base import object_store_for
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.streams import load_streams
from tests.support.aws_server import AWS_TEST_ENV
from tests.support.pipeline_env import STREAM, source_ids, write_streams

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

# Per backend, so a run commits many times and five kills, each letting at most a second or
# so of commits through, all land while there is work left; yet the convergence run, which
# ingests most of it, stays short. The local DynamoDB server commits about a tenth as fast as
# SQLite (a few partitions a second on a busy two-core machine), and renews a chunk's leases
# one request at a time: fewer objects, smaller chunks.
OBJECTS = {"sqlite": 300, "dynamodb": 100}
CHUNK_SIZE = {"sqlite": 25, "dynamodb": 10}
RECORDS_PER_OBJECT = 40
MALFORMED_EVERY = 53
# Short, so the last kill's leases are free soon; a renewal (a quarter of it) survives the
# stalls of a loaded two-core machine starting a JVM.
LEASE_TIMEOUT_S = 5.0
KILLS = 5
MAX_CHAOS_INVOCATIONS = 12
CONVERGENCE_INVOCATIONS = 2
INVOCATION_TIMEOUT_S = 180.0
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


@dataclass
class Project:
    """A tmp project directory and the environment `leasehold` runs in there."""

    root: Path
    settings: StoreSettings
    env: dict[str, str]
    invocations: int = 0
    logs: list[Path] = field(default_factory=list)
    children: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def sources(self) -> Path:
        return self.root / "sources"

    @property
    def streams_path(self) -> Path:
        return self.root / "streams.yaml"

    @property
    def dagster_home(self) -> Path:
        return self.root / "dagster_home"

    def start(self, *args: str) -> subprocess.Popen[bytes]:
        """`leasehold <args>` in its own process group (its Spark JVM with it), output to a log
        file per invocation."""
        self.invocations += 1
        log = self.root / "logs" / f"{self.invocations:02d}-{'-'.join(args)}.log"
        log.parent.mkdir(exist_ok=True)
        self.logs.append(log)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "resources.cli.main", *args],
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.children.append(proc)
        return proc

    def run(self, *args: str) -> tuple[int, str]:
        proc = self.start(*args)
        code = proc.wait(INVOCATION_TIMEOUT_S)
        return code, self.logs[-1].read_text(errors="replace")

    def store(self) -> LeaseStore:
        return build_store(self.settings)

    def tail(self, lines: int = 40) -> str:
        text = self.logs[-1].read_text(errors="replace").splitlines() if self.logs else []
        return "\n".join(text[-lines:])


def kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the process, then whatever it started that is still there (its Spark JVM exits
    by itself once its parent's pipe closes, but not always before the next run starts)."""
    proc.kill()
    proc.wait(30)
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture
def project(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Project]:
    root = tmp_path / "project"
    root.mkdir()
    write_sample_sources(
        root / "sources",
        objects=OBJECTS[backend],
        records_per_object=RECORDS_PER_OBJECT,
        days=3,
        malformed_every=MALFORMED_EVERY,
    )
    write_streams(root / "streams.yaml", f"file://{root / 'sources'}", f"file://{root / 'lake'}")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        SPARK_LOCAL_IP="127.0.0.1",
        DAGSTER_HOME=str(root / "dagster_home"),
        LEASEHOLD_DATA_DIR=str(root / "data"),
        LEASEHOLD_STREAMS=str(root / "streams.yaml"),
        LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS=str(LEASE_TIMEOUT_S),
        LEASEHOLD_CHUNK_SIZE=str(CHUNK_SIZE[backend]),
    )
    if backend == "sqlite":
        # The command finds its file under LEASEHOLD_DATA_DIR; the test watches the same one.
        settings = StoreSettings(backend="sqlite", sqlite_path=str(root / "data" / "leasehold.db"))
    else:
        server = request.getfixturevalue("aws_server")
        table = f"leasehold-chaos-{uuid.uuid4().hex[:12]}"
        settings = StoreSettings(
            backend="dynamodb", table_name=table, endpoint_url=server.endpoint_url
        )
        env.update(
            AWS_TEST_ENV,
            LEASEHOLD_STORE_BACKEND="dynamodb",
            LEASEHOLD_DYNAMODB_ENDPOINT_URL=server.endpoint_url,
            LEASEHOLD_DYNAMODB_TABLE=table,
        )
    proj = Project(root, settings, env)
    yield proj
    for proc in proj.children:
        if proc.poll() is None:
            kill_group(proc)


def progress(store: LeaseStore) -> Progress:
    items = list(store.iter_items(store.source_identifier(STREAM)))
    return Progress(
        epochs=sum(i.epoch for i in items),
        completed=sum(i.status is PartitionStatus.COMPLETED for i in items),
    )


def chaos(project: Project, rng: random.Random) -> list[Kill]:
    """Start `leasehold run` again and again, each right after the last was killed; kill each
    a random moment after the store shows it ingesting. Half the kills wait for its first
    acquisition (they land while it reads, often before Spark is up), half for its first
    commit (they land between commits, or among its Dagster events)."""
    store = project.store()
    kills: list[Kill] = []
    try:
        while sum(k.landed for k in kills) < KILLS:
            assert project.invocations < MAX_CHAOS_INVOCATIONS, (
                f"the work ran out before {KILLS} kills landed mid-run:\n"
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


def test_leasehold_run_converges_after_random_kills(project: Project) -> None:
    seed = int(os.environ.get("LEASEHOLD_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (LEASEHOLD_CHAOS_SEED={seed} replays it)", flush=True)
    started = time.monotonic()
    kills = chaos(project, random.Random(seed))
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

        # No record lost, none twice: the table against the source files.
        config = load_streams(project.streams_path)[STREAM]
        expected = source_ids(project.sources)
        seen = Counter(row["event_id"] for row in read_objects(store, STREAM, config.table))
        lost, twice = expected - seen, {i: n for i, n in seen.items() if n > 1}
        extra = set(seen) - set(expected)
        assert not lost and not twice and not extra, (
            f"{context}\n{len(lost)} lost (e.g. {sorted(lost)[:5]}), {len(twice)} twice "
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
    finally:
        store.close_store()

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

    # `leasehold check` is being written on another branch: asserted once the parser knows it.
    code, output = project.run("check", "--help")
    if code == 2:
        warnings.warn(
            "`leasehold check` is not a command of this CLI yet: its exit status was not "
            f"asserted ({output.strip().splitlines()[-1] if output.strip() else 'exit 2'})",
            stacklevel=1,
        )
    else:
        code, output = project.run("check")
        assert code == 0, f"{context}\nleasehold check failed:\n{output}"
    print(f"chaos test: {time.monotonic() - started:.1f} s, {project.invocations} invocations")
