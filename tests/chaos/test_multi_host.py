"""Several hosts running `leasehold run` at once on the production profile (issue 34, item 4).

Three processes stand for three hosts: each has its own data and work directories
(`LEASEHOLD_DATA_DIR`, `LEASEHOLD_WORK_DIR`) and its own `DAGSTER_HOME` holding
`deploy/dagster.yaml` as it is; they share what docs/production.md ("Several hosts") says hosts
share: one DynamoDB lease table, one S3 (sources, tables, quarantine), one Glue catalog, one
Postgres-backed Dagster instance — the loopback AWS server (moto), PostgreSQL from the
`pgserver` wheel — and one Spark Connect server. Nothing is created ahead but the buckets and
the database: the three first runs start together (one tight loop of starts) and create the
lease table, the Spark pool's limit, Dagster's tables, the Glue database and the Iceberg table
as they go, each having to tolerate the others doing the same.

Then processes are SIGKILLed at random while they hold leases (a kill "lands" when its victim
owned units in the lease table at that moment) and started again at once, until KILLS kills
landed; then the hosts run on, without kills, until every source object is ingested and
published. The verdict:
- no traceback in any process's output (a killed one's output is cut short, never a
  traceback of its own);
- every well-formed record exactly once in the published Iceberg table, read as an engine
  reads it: pyiceberg's own Glue catalog, the table's metadata and files on S3;
- units committed by more than one process: the owner of each unit's last epoch, as the
  lease table showed it (a watcher polls it), names the process whose commit completed it.

While they run, WAVES waves of new objects land (as in a live bucket), each after a host's run
ended well: a host's tick takes what no run in flight covers, so a backlog goes to the first
host that lists it, and work arriving over time spreads over the hosts.

The kill moments come from a seeded `random.Random`; the seed is printed and
`LEASEHOLD_CHAOS_SEED=<seed>` replays its choices (the moments the lease table is seen to move
still depend on the machine).
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import boto3
import pytest

from resources.coordination.errors import StoreNotFoundError
from resources.coordination.items import LeaseItem, PartitionStatus
from resources.ingestion.sample_data import record_line, write_sample_sources
from resources.stores import open_existing_store
from resources.stores.base import CoordinationStore
from resources.stores.settings import StoreSettings
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer, free_port
from tests.support.cli_project import kill_group
from tests.support.pipeline_env import STREAM, source_ids
from tests.support.postgres_server import LocalPostgres
from tests.support.spark_connect_server import SparkConnectServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
HOSTS = 3
# Small units (2 objects each) in small chunks, so that the work spreads over the hosts and
# each run commits several times; few records, so what costs is the processes, not the data.
OBJECTS, RECORDS, MALFORMED_EVERY, UNIT_OBJECTS = 36, 10, 17, 2
CHUNK_SIZE = 2
KILLS = 3
WAVES, WAVE_OBJECTS = 3, 4  # landed while the hosts run: work arriving over time spreads
LEASE_TIMEOUT_S = 8.0  # a killed host's units are free this long after its last renewal
MAX_INVOCATIONS = 30
CHAOS_TIMEOUT_S = 240.0
POLL_S = 0.5
NOT_INGESTED = "dagster._core.definitions.events.Failure: "


@dataclass
class Invocation:
    host: str
    number: int
    proc: subprocess.Popen[bytes]
    log: Path
    killed: bool = False

    @property
    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def describe(self) -> str:
        state = "killed" if self.killed else f"exit {self.proc.returncode}"
        return f"{self.host} #{self.number} (pid {self.proc.pid}): {state}"


@dataclass
class Host:
    name: str
    root: Path
    env: dict[str, str]
    invocations: list[Invocation] = field(default_factory=list)

    def start(self, number: int) -> Invocation:
        """`leasehold run` as an operator on this host starts it: its own process group (so
        that a kill takes whatever it started with it), its output in a log file of its own."""
        log = self.root / "logs" / f"{number:02d}-{self.name}.log"
        log.parent.mkdir(exist_ok=True)
        with log.open("wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "resources.cli.main", "run"],
                cwd=self.root,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        invocation = Invocation(self.name, number, proc, log)
        self.invocations.append(invocation)
        return invocation

    @property
    def current(self) -> Invocation | None:
        return self.invocations[-1] if self.invocations else None

    def running(self) -> bool:
        return self.current is not None and self.current.proc.poll() is None


@dataclass
class Cluster:
    hosts: list[Host]
    store_settings: StoreSettings
    glue_env: dict[str, str]
    local_sources: Path
    spark: SparkConnectServer
    s3: Any
    src_bucket: str
    started: int = 0
    waves: int = 0

    def start(self, host: Host) -> Invocation:
        self.started += 1
        return host.start(self.started)

    def land_wave(self) -> None:
        """New objects after every key listed so far, as a live bucket receives them: the
        next tick of whichever host lists them takes them."""
        self.waves += 1
        day = self.local_sources / "2026" / "01" / "09"
        day.mkdir(parents=True, exist_ok=True)
        for i in range(WAVE_OBJECTS):
            path = day / f"wave{self.waves:02d}-{i:02d}.jsonl"
            first = 1_000_000 * self.waves + 100 * i
            at = datetime(2026, 1, 9, i % 24, tzinfo=timezone.utc)
            path.write_text("\n".join(record_line(first + j, at) for j in range(RECORDS)) + "\n")
            key = f"events/{path.relative_to(self.local_sources).as_posix()}"
            self.s3.upload_file(str(path), self.src_bucket, key)
        print(f"wave {self.waves}: {WAVE_OBJECTS} new objects", flush=True)

    def invocations(self) -> list[Invocation]:
        return sorted((i for h in self.hosts for i in h.invocations), key=lambda i: i.number)

    def describe(self) -> str:
        return "\n".join(i.describe() for i in self.invocations())

    def stop(self) -> None:
        for host in self.hosts:
            if host.running() and host.current is not None:
                kill_group(host.current.proc)


@pytest.fixture
def cluster(aws_server: LocalAwsServer, tmp_path: Path) -> Iterator[Cluster]:
    # Spark Connect's JVM takes longest to start: it starts first and comes up meanwhile.
    spark = SparkConnectServer(tmp_path / "spark-connect", free_port()).start()
    postgres = LocalPostgres()
    hosts: list[Host] = []
    try:
        postgres.start()
        endpoint = aws_server.endpoint_url
        suffix = uuid.uuid4().hex[:8]
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        src, lake = f"hosts-src-{suffix}", f"hosts-lake-{suffix}"
        for bucket in (src, lake):
            s3.create_bucket(Bucket=bucket)
        local = tmp_path / "sources"
        write_sample_sources(
            local, objects=OBJECTS, records_per_object=RECORDS, malformed_every=MALFORMED_EVERY
        )
        for path in sorted(local.rglob("*.jsonl")):
            s3.upload_file(str(path), src, f"events/{path.relative_to(local).as_posix()}")
        streams = write_streams(tmp_path / "streams.yaml", src, lake)  # one for all hosts
        store_settings = StoreSettings(
            backend="dynamodb", table_name=f"hosts-{suffix}", endpoint_url=endpoint
        )
        shared = shared_env(endpoint, postgres, spark, streams, store_settings, lake)
        for n in range(HOSTS):
            hosts.append(host_of(tmp_path / f"host{n}", f"host{n}", shared))
        spark.wait_until_up()
        cluster = Cluster(hosts, store_settings, shared, local, spark, s3, src)
        yield cluster
    finally:
        for host in hosts:
            if host.running() and host.current is not None:
                kill_group(host.current.proc)
        spark.stop()
        postgres.stop()


def write_streams(path: Path, src: str, lake: str) -> Path:
    path.write_text(
        f"""
streams:
  {STREAM}:
    source: s3://{src}/events
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: s3://{lake}/tables/events
    quarantine: s3://{lake}/quarantine/events
    partition: {{max_objects: {UNIT_OBJECTS}}}
"""
    )
    return path


def shared_env(
    endpoint: str,
    postgres: LocalPostgres,
    spark: SparkConnectServer,
    streams: Path,
    store: StoreSettings,
    lake: str,
) -> dict[str, str]:
    """What every host is given alike (docs/production.md): the lease table, S3, Glue, the
    Dagster instance's Postgres, the Spark Connect server."""
    base = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LEASEHOLD_", "DAGSTER_", "PYSPARK_", "SPARK_"))
    }
    return {
        **base,
        **AWS_TEST_ENV,
        "PYTHONPATH": str(REPO),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "DAGSTER_PG_URL": postgres.url,
        "DAGSTER_COMPUTE_LOG_BUCKET": lake,
        "DAGSTER_COMPUTE_LOG_PREFIX": "dagster-compute-logs",
        "AWS_ENDPOINT_URL_S3": endpoint,
        "LEASEHOLD_STREAMS": str(streams),
        "LEASEHOLD_STORE_BACKEND": "dynamodb",
        "LEASEHOLD_DYNAMODB_TABLE": store.table_name,
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL": endpoint,
        "LEASEHOLD_S3_ENDPOINT_URL": endpoint,
        "LEASEHOLD_CATALOG": "glue",
        "LEASEHOLD_GLUE_DATABASE": f"hosts_{uuid.uuid4().hex[:8]}",
        "LEASEHOLD_GLUE_ENDPOINT_URL": endpoint,
        "LEASEHOLD_SPARK_REMOTE": spark.url,
        "LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS": str(LEASE_TIMEOUT_S),
        "LEASEHOLD_CHUNK_SIZE": str(CHUNK_SIZE),
    }


def host_of(root: Path, name: str, shared: dict[str, str]) -> Host:
    """A host's own: its DAGSTER_HOME (deploy/dagster.yaml as it is), data and work dirs."""
    home = root / "dagster_home"
    home.mkdir(parents=True)
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    env = {
        **shared,
        "DAGSTER_HOME": str(home),
        "LEASEHOLD_DATA_DIR": str(root / "data"),
        "LEASEHOLD_WORK_DIR": str(root / "work"),
    }
    return Host(name, root, env)


@dataclass
class Watcher:
    """What the lease table shows, polled: the owner of every (unit, epoch) seen ASSIGNED."""

    store: CoordinationStore | None = None
    owners: dict[tuple[str, int], str] = field(default_factory=dict)
    items: list[LeaseItem] = field(default_factory=list)

    def poll(self, settings: StoreSettings) -> list[LeaseItem]:
        if self.store is None:
            try:
                self.store = open_existing_store(settings)  # the hosts create it
            except StoreNotFoundError:  # not yet: the next poll looks again
                return []
        sid = self.store.source_identifier(STREAM)
        self.items = list(self.store.iter_items(sid, progress=False))
        for item in self.items:
            if item.status is PartitionStatus.ASSIGNED and item.owner:
                self.owners[item.partition_key, item.epoch] = item.owner
        return self.items

    def holders(self) -> Counter[int]:
        """pid -> units it holds now."""
        return Counter(
            owner_pid(i.owner)
            for i in self.items
            if i.status is PartitionStatus.ASSIGNED and i.owner
        )

    def committers(self) -> dict[str, int]:
        """unit -> the pid that completed it (the owner of its last epoch), where seen."""
        return {
            i.partition_key: owner_pid(self.owners[i.partition_key, i.epoch])
            for i in self.items
            if i.status is PartitionStatus.COMPLETED and (i.partition_key, i.epoch) in self.owners
        }

    def close(self) -> None:
        if self.store is not None:
            self.store.close_store()


def owner_pid(owner: str) -> int:
    """A lease owner is `hostname:pid:nonce` (resources/coordination/lease.py)."""
    return int(owner.rsplit(":", 2)[1])


def all_ingested(items: list[LeaseItem], waves: int) -> bool:
    """Every source object, waves included, in a COMPLETED unit."""
    done = [i for i in items if i.status is PartitionStatus.COMPLETED]
    units = (OBJECTS + waves * WAVE_OBJECTS) // UNIT_OBJECTS
    return len(items) >= units and len(done) == len(items)


def chaos(cluster: Cluster, watcher: Watcher, rng: random.Random) -> list[str]:
    """All hosts started in one tight loop; a host whose run ended is started again while the
    work is not all done; until KILLS kills landed, a random moment after the lease table
    moved, a host holding leases is SIGKILLed. Returns a line per kill."""
    for host in cluster.hosts:
        cluster.start(host)
    kills: list[str] = []
    kill_at = time.monotonic() + rng.uniform(2.0, 6.0)
    deadline = time.monotonic() + CHAOS_TIMEOUT_S
    while True:
        items = watcher.poll(cluster.store_settings)
        done = all_ingested(items, cluster.waves)
        for host in cluster.hosts:
            if host.running():
                continue
            ended_well = host.current is not None and host.current.proc.returncode == 0
            if ended_well and (cluster.waves < WAVES or (done and len(kills) < KILLS)):
                cluster.land_wave()
                done = False
            if not done and len(kills) < KILLS:
                cluster.start(host)
        if len(kills) < KILLS and time.monotonic() >= kill_at:
            holders = watcher.holders()
            busy = [h for h in cluster.hosts if h.running() and h.current
                    and holders[h.current.proc.pid]]  # fmt: skip
            if busy:
                victim = rng.choice(busy)
                assert victim.current is not None
                kill_group(victim.current.proc)
                victim.current.killed = True
                held = holders[victim.current.proc.pid]
                kills.append(f"{victim.current.describe()} while holding {held} units")
                print(kills[-1], flush=True)
                cluster.start(victim)
                kill_at = time.monotonic() + rng.uniform(1.0, 5.0)
        if len(kills) >= KILLS and not any(h.running() for h in cluster.hosts):
            return kills
        assert cluster.started < MAX_INVOCATIONS and time.monotonic() < deadline, (
            f"{len(kills)} kills landed; units by status "
            f"{dict(Counter(i.status.value for i in items))}\n{cluster.describe()}"
        )
        time.sleep(POLL_S)


def converge(cluster: Cluster, watcher: Watcher) -> None:
    """One lease timeout after the last kill (its units are free), all hosts at once again,
    at most twice, until every unit is done and every host's run ended well."""
    time.sleep(LEASE_TIMEOUT_S + 0.5)
    for _ in range(2):
        round_ = [cluster.start(host) for host in cluster.hosts]
        for invocation in round_:
            invocation.proc.wait(180)
        items = watcher.poll(cluster.store_settings)
        if all_ingested(items, cluster.waves) and all(i.proc.returncode == 0 for i in round_):
            return
    pytest.fail(f"not converged after two rounds\n{cluster.describe()}\n{round_[-1].output}")


def stuck_only(invocation: Invocation) -> bool:
    """The run ended with exit 4 and the one failed check is lease_health."""
    out = invocation.output
    failed = "leasehold: check failed: lease_health (details: leasehold check)"
    return (
        invocation.proc.returncode == 4
        and out.count("leasehold: check failed:") == 1
        and (failed in out)
    )


def unexpected_traces(output: str) -> list[str]:
    """Each traceback in a process's output but one: Dagster's record of the ingestion step
    that failed only because another owner holds units of its range (`Failure: n of m source
    partitions not ingested`, every line `lost_lease`), which it prints with its stack.
    A Python traceback (a crash) is never expected."""
    found = []
    if "Traceback (most recent call last)" in output:
        start = output.index("Traceback (most recent call last)")
        found.append(output[start : start + 4000])
    for block in output.split("Stack Trace:")[:-1]:
        block = block.rstrip()
        error = block[block.rfind("\n\n") :].strip()
        lines = error.splitlines()
        lost_only = (
            bool(lines)
            and lines[0].startswith(NOT_INGESTED)
            and all(": lost_lease: " in line for line in lines[1:])
        )
        if not lost_only:
            found.append(error[-4000:])
    return found


def published_ids(cluster: Cluster) -> Counter[str]:
    """Every record id of the stream's table at its current snapshot, as an engine reads it:
    pyiceberg's own Glue catalog on the loopback server, the table's metadata and files on S3."""
    from pyiceberg.catalog.glue import GlueCatalog

    env = cluster.glue_env
    endpoint = env["LEASEHOLD_GLUE_ENDPOINT_URL"]
    keys = {
        "s3.access-key-id": env["AWS_ACCESS_KEY_ID"],
        "s3.secret-access-key": env["AWS_SECRET_ACCESS_KEY"],
        "s3.session-token": env["AWS_SESSION_TOKEN"],
    }
    catalog = GlueCatalog(
        "engine", **{"glue.endpoint": endpoint, "glue.region": "us-east-1",
                     "s3.endpoint": endpoint, "s3.region": "us-east-1", **keys}
    )  # fmt: skip
    table = catalog.load_table((env["LEASEHOLD_GLUE_DATABASE"], STREAM))
    return Counter(table.scan().to_arrow().column("event_id").to_pylist())


def test_three_hosts_started_together_and_killed_converge(cluster: Cluster) -> None:
    seed = int(os.environ.get("LEASEHOLD_CHAOS_SEED") or random.SystemRandom().randrange(2**32))
    print(f"chaos seed: {seed} (LEASEHOLD_CHAOS_SEED={seed} replays it)", flush=True)
    began = time.monotonic()
    watcher = Watcher()
    try:
        kills = chaos(cluster, watcher, random.Random(seed))
        converge(cluster, watcher)
        items = watcher.poll(cluster.store_settings)
        committers = watcher.committers()
    finally:
        watcher.close()
        cluster.stop()
    context = f"seed {seed}\n" + "\n".join(kills) + "\n" + cluster.describe()
    print(context, flush=True)

    traced = [(i, t) for i in cluster.invocations() for t in unexpected_traces(i.output)]
    assert not traced, (
        f"{context}\n{len(traced)} tracebacks, in "
        f"{', '.join(sorted({i.describe() for i, _ in traced}))}; the first:\n{traced[0][1]}"
    )
    # A host's run that found a unit of its range taken by another host ends with exit 3
    # (EXIT_PARTITIONS_FAILED, "not ingested: ... lost_lease"), as two runs of one host do.
    # One whose checks found a killed host's lease expired for twice its (8 s) timeout while
    # every other host was busy ends with exit 4 naming lease_health alone: true when said
    # (nothing picked the units up yet), and the converging rounds must still end with 0.
    ended = [i for i in cluster.invocations() if not i.killed]
    odd = [i for i in ended if i.proc.returncode not in (0, 3) and not stuck_only(i)]
    assert not odd, f"{context}\n{odd[0].output[-4000:]}"
    assert len(kills) >= KILLS, context

    expected = source_ids(cluster.local_sources)
    ids = published_ids(cluster)
    lost, twice = expected - ids, {i: n for i, n in ids.items() if n > 1}
    extra = set(ids) - set(expected)
    assert not lost and not twice and not extra, (
        f"{context}\n{len(lost)} lost (e.g. {sorted(lost)[:5]}), {len(twice)} twice, "
        f"{len(extra)} not in the sources"
    )

    dead = {i.partition_key: i.dead_letter_reason for i in items if i.dead_letter_reason}
    assert not dead, f"{context}\ndead-lettered: {dead}"
    host_of = {i.proc.pid: i.describe() for i in cluster.invocations()}
    by_process = Counter(host_of.get(pid, f"pid {pid}") for pid in committers.values())
    print(f"units committed (where the watcher saw the owner), by process: {dict(by_process)}")
    assert len(by_process) > 1, f"{context}\nall units seen committed by one process"
    print(f"multi-host chaos test: {time.monotonic() - began:.1f} s, {cluster.started} runs")
