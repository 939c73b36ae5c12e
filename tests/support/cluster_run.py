"""`leasehold run` as a run worker on a Spark cluster runs it (tests/chaos/test_cluster_hosts.py).

A `RunHost` is one run worker's own: its `LEASEHOLD_WORK_DIR` and `LEASEHOLD_DATA_DIR` (the
cluster's workers and Connect server have an empty tmpfs over both), a Spark conf dir of its
own (`spark-defaults.conf`: the cluster's small executors, and an event log, so that the test
can say which task ran on which executor and how it ended) and its logs. A `RunLake` is what
the run shares with the cluster: a source bucket and a lake bucket on the AWS test server, a
lease table on its DynamoDB and a Glue database, all at `endpoint` (the server itself, or a
relay to it that the cluster's hosts reach) — configured the way docs/production.md says, by
environment variables only.

The sources are JSON lines, plain and gzip, every line a well-formed record
(`source_objects`); the published table is read back as an engine reads it (pyiceberg's own
Glue catalog, the table's metadata and files on S3).
"""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import boto3

from resources.coordination.items import LeaseItem
from resources.ingestion.sample_data import record_line
from resources.stores import open_existing_store
from resources.stores.settings import StoreSettings
from tests.support.aws_server import AWS_TEST_ENV
from tests.support.cli_project import kill_group
from tests.support.pipeline_env import STREAM
from tests.support.spark_cluster import SparkCluster, without_proxies

REPO = Path(__file__).resolve().parents[2]
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
WATCH_S = 0.1
STACKS_TIMEOUT_S = 10.0


# -- the sources --------------------------------------------------------------------------------


MALFORMED_EVERY = 997


@dataclass
class Sources:
    """Source objects (key under the stream's prefix -> bytes as stored) and the record ids
    they hold, each once: the independent account the table is checked against."""

    objects: dict[str, bytes] = field(default_factory=dict)
    ids: Counter[str] = field(default_factory=Counter)


def source_objects(objects: int, records: int, days: int, gzip_every: int) -> Sources:
    """`objects` JSON-lines objects of `records` records each over `days` dates; every
    `gzip_every`-th is gzip (`.jsonl.gz`). Every `MALFORMED_EVERY`-th record is a truncated
    line: quarantined, so not among `ids`."""
    sources = Sources()
    per_day = -(-objects // days)
    record = 0
    for i in range(objects):
        day = START + timedelta(days=i // per_day)
        lines = []
        for j in range(records):
            record += 1
            at = day + timedelta(seconds=(j * 86399) // records)
            line = record_line(record, at)
            if record % MALFORMED_EVERY == 0:
                lines.append(line[: len(line) // 2])  # quarantined by the tasks
                continue
            lines.append(line)
            sources.ids[f"e{record:012d}"] += 1
        data = ("\n".join(lines) + "\n").encode()
        key = f"{day:%Y/%m/%d}/part-{i:05d}.jsonl"
        if gzip_every and i % gzip_every == gzip_every - 1:
            key, data = key + ".gz", gzip.compress(data, mtime=0)
        sources.objects[key] = data
    return sources


# -- the lake -----------------------------------------------------------------------------------


@dataclass
class RunLake:
    """One run's S3 buckets, lease table and Glue database on the loopback AWS server."""

    endpoint: str
    suffix: str = field(default_factory=lambda: uuid.uuid4().hex[:8])

    @property
    def source_bucket(self) -> str:
        return f"cluster-src-{self.suffix}"

    @property
    def lake_bucket(self) -> str:
        return f"cluster-lake-{self.suffix}"

    @property
    def glue_database(self) -> str:
        return f"cluster_{self.suffix}"

    def s3(self) -> Any:
        return boto3.client("s3", endpoint_url=self.endpoint, region_name="us-east-1")

    def create(self, sources: Sources) -> RunLake:
        s3 = self.s3()
        for bucket in (self.source_bucket, self.lake_bucket):
            s3.create_bucket(Bucket=bucket)
        for key, data in sources.objects.items():
            s3.put_object(Bucket=self.source_bucket, Key=f"events/{key}", Body=data)
        return self

    def streams_yaml(self, path: Path, unit_objects: int) -> Path:
        path.write_text(
            f"""
streams:
  {STREAM}:
    source: s3://{self.source_bucket}/events
    format: jsonl
    schema: {{event_id: string, user_id: string, amount: double, event_time: timestamp}}
    event_time: event_time
    record_id: event_id
    table: s3://{self.lake_bucket}/tables/events
    quarantine: s3://{self.lake_bucket}/quarantine/events
    partition: {{max_objects: {unit_objects}}}
"""
        )
        return path

    def env(self, streams: Path) -> dict[str, str]:
        """The shared stores, as docs/production.md configures them."""
        return {
            **AWS_TEST_ENV,
            "LEASEHOLD_STREAMS": str(streams),
            "LEASEHOLD_STORE_BACKEND": "dynamodb",
            "LEASEHOLD_DYNAMODB_TABLE": f"cluster-{self.suffix}",  # as `ledger_urls` opens it
            "LEASEHOLD_DYNAMODB_ENDPOINT_URL": self.endpoint,
            "LEASEHOLD_S3_ENDPOINT_URL": self.endpoint,
            "LEASEHOLD_CATALOG": "glue",
            "LEASEHOLD_GLUE_DATABASE": self.glue_database,
            "LEASEHOLD_GLUE_ENDPOINT_URL": self.endpoint,
        }

    def published_ids(self) -> Counter[str]:
        """Every record id of the stream's table at its current snapshot, as an engine reads
        it: pyiceberg's own Glue catalog, the table's metadata and files on S3."""
        from pyiceberg.catalog.glue import GlueCatalog

        properties: dict[str, Any] = {
            "glue.endpoint": self.endpoint,
            "glue.region": "us-east-1",
            "s3.endpoint": self.endpoint,
            "s3.region": "us-east-1",
            "s3.access-key-id": AWS_TEST_ENV["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": AWS_TEST_ENV["AWS_SECRET_ACCESS_KEY"],
            "s3.session-token": AWS_TEST_ENV["AWS_SESSION_TOKEN"],
        }
        catalog = GlueCatalog("engine", **properties)
        table = catalog.load_table((self.glue_database, STREAM))
        return Counter(table.scan().to_arrow().column("event_id").to_pylist())

    def ledger_urls(self) -> set[str]:
        """The URLs of every table object a commit named (the ledger, in the lease table)."""
        store = self._store()
        try:
            return {o.url for o in store.ledger_objects(STREAM)}
        finally:
            store.close_store()

    def lease_items(self) -> list[LeaseItem]:
        """Every item of the lease table (its units' status and owner), without progress."""
        store = self._store()
        try:
            return list(store.iter_items(progress=False))
        finally:
            store.close_store()

    def _store(self) -> Any:
        settings = StoreSettings(
            backend="dynamodb", table_name=f"cluster-{self.suffix}", endpoint_url=self.endpoint
        )
        return open_existing_store(settings)

    def table_objects(self) -> list[str]:
        """Every object under the table's prefix (what tasks wrote, committed or not)."""
        pages = self.s3().get_paginator("list_objects_v2")
        listed = pages.paginate(Bucket=self.lake_bucket, Prefix="tables/events/")
        return [o["Key"] for page in listed for o in page.get("Contents", [])]


# -- the run worker -----------------------------------------------------------------------------


@dataclass
class RunHost:
    """A run worker's own directories; `root` is seen by the cluster, `work` and `data` not.
    `seen`: every path that appeared under `work` while a run was watched (`finish`)."""

    root: Path
    seen: set[str] = field(default_factory=set)

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def events(self) -> Path:
        return self.root / "spark-events"

    @property
    def hidden(self) -> list[Path]:
        return [self.work, self.data]

    def make(self) -> RunHost:
        for d in (self.work, self.data, self.events, self.root / "spark-conf"):
            d.mkdir(parents=True, exist_ok=True)
        return self

    def spark_conf_dir(self, wait_for_executors: bool = True) -> Path:
        """`spark-defaults.conf` for a classic driver on the cluster: its small executors,
        both registered before the first job (up to Spark's 30 s, with `wait_for_executors`),
        no web UI, and an uncompressed event log."""
        wait = {"spark.scheduler.minRegisteredResourcesRatio": "1.0"} if wait_for_executors else {}
        conf = {
            **SparkCluster.executor_conf(),
            **wait,
            "spark.ui.enabled": "false",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.compress": "false",
            "spark.eventLog.rolling.enabled": "false",
            "spark.eventLog.dir": self.events.as_uri(),
        }
        conf_dir = self.root / "spark-conf"
        text = "".join(f"{k} {v}\n" for k, v in conf.items())
        (conf_dir / "spark-defaults.conf").write_text(text)
        return conf_dir

    def env(self, lake_env: dict[str, str], spark: dict[str, str]) -> dict[str, str]:
        """The run's environment: this machine's without its own leasehold, Dagster, Spark, AWS
        and proxy settings, then the lake's and `spark`, this interpreter on the executors."""
        base = {
            k: v
            for k, v in without_proxies(dict(os.environ)).items()
            if not k.startswith(("LEASEHOLD_", "DAGSTER_", "PYSPARK_", "SPARK_", "AWS_"))
        }
        return {
            **base,
            **lake_env,
            "PYTHONPATH": str(REPO),
            "PYSPARK_PYTHON": sys.executable,
            **spark,
            "PYTHONFAULTHANDLER": "1",  # a run that hangs shows where (`dump_stacks`)
            "LEASEHOLD_DATA_DIR": str(self.data),
            "LEASEHOLD_WORK_DIR": str(self.work),
            "LEASEHOLD_SPARK_LOG": str(self.root / "spark-driver.log"),
        }

    def start_run(self, env: dict[str, str]) -> subprocess.Popen[bytes]:
        """`leasehold run` as an operator starts it: a process group of its own (its Spark JVM
        with it), its output in `run.log`."""
        with (self.root / "run.log").open("wb") as out:
            return subprocess.Popen(
                [sys.executable, "-m", "resources.cli.main", "run"],
                cwd=self.root,
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return (self.root / "run.log").read_text(errors="replace")

    def doctor(self, env: dict[str, str], spark_timeout_s: float) -> dict[str, dict[str, Any]]:
        """`leasehold doctor --json` as an operator runs it on this host: each check by name
        (its `ok`, `detail` and `fix`)."""
        done = subprocess.run(
            [sys.executable, "-m", "resources.cli.main", "doctor", "--json"]
            + ["--spark-timeout", str(spark_timeout_s)],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=spark_timeout_s + 120,
        )
        assert "{" in done.stdout, f"doctor printed no report\n{done.stdout}\n{done.stderr}"
        report, _ = json.JSONDecoder().raw_decode(done.stdout, done.stdout.index("{"))
        return {check["name"]: check for check in report["checks"]}

    def wait(self, proc: subprocess.Popen[bytes], timeout_s: float, why: str) -> int:
        """Wait for the run, noting what appears under the work directory meanwhile (`seen`,
        polled: a file that lives less than a poll goes unseen); its exit code. Fail, with its
        output and `why`, if it has not ended within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while proc.poll() is None:
            if time.monotonic() > deadline:
                dump_stacks(proc)
                kill_group(proc)
                raise AssertionError(
                    f"`leasehold run` not done after {timeout_s:.0f} s\n"
                    f"{self.output()[-4000:]}\n{why}"
                )
            self.seen.update(self.files_written())
            time.sleep(WATCH_S)
        return proc.returncode

    def finish(self, proc: subprocess.Popen[bytes], timeout_s: float, why: str) -> str:
        """`wait`; fail, with the run's output and `why`, unless it ended with 0."""
        code = self.wait(proc, timeout_s, why)
        out = self.output()
        assert code == 0, f"`leasehold run` exited with {code}\n{out[-6000:]}\n{why}"
        return out

    def files_written(self) -> list[str]:
        """Every file under the work directory, relative to it."""
        try:
            return sorted(p.relative_to(self.work).as_posix() for p in self.work.rglob("*"))
        except FileNotFoundError:  # removed while listed: the next poll sees what is left
            return []


def dump_stacks(proc: subprocess.Popen[bytes]) -> None:
    """Have a hung run print every thread's stack into its output (SIGABRT, which
    `PYTHONFAULTHANDLER` turns into a dump before the process ends); bounded."""
    try:
        os.kill(proc.pid, signal.SIGABRT)
        proc.wait(STACKS_TIMEOUT_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass


# -- what Spark says it did ---------------------------------------------------------------------


@dataclass(frozen=True)
class TaskEnd:
    stage: int
    index: int
    attempt: int
    executor: str
    reason: str


@dataclass
class SparkApp:
    """One driver's application, from its event log: its id, every task's end, and when each
    job was submitted (epoch seconds)."""

    app_id: str
    tasks: list[TaskEnd]
    jobs_submitted: list[float] = field(default_factory=list)

    def worker_of(self, cluster: SparkCluster, executor: str) -> int:
        """The worker an executor ran on: the one whose work dir holds its directory."""
        found = [
            i
            for i in range(cluster.workers)
            if (cluster.worker(i).root / "work" / self.app_id / executor).is_dir()
        ]
        assert len(found) == 1, f"executor {executor} of {self.app_id} on workers {found}"
        return found[0]

    def by_worker(self, cluster: SparkCluster) -> dict[int, Counter[str]]:
        """worker -> task end reasons counted."""
        counts: dict[int, Counter[str]] = {i: Counter() for i in range(cluster.workers)}
        for task in self.tasks:
            counts[self.worker_of(cluster, task.executor)][task.reason] += 1
        return counts


def spark_app(events: Path) -> SparkApp:
    """The one application whose event log is in `events`."""
    logs = [p for p in events.rglob("*") if p.is_file() and not p.name.startswith("appstatus")]
    assert len(logs) == 1, f"expected one event log in {events}: {logs}"
    app = SparkApp("", [])
    for line in logs[0].read_text().splitlines():
        event = json.loads(line)
        if event["Event"] == "SparkListenerApplicationStart":
            app.app_id = event["App ID"]
        elif event["Event"] == "SparkListenerJobStart":
            app.jobs_submitted.append(event["Submission Time"] / 1000)
        elif event["Event"] == "SparkListenerTaskEnd":
            info = event["Task Info"]
            reason = event["Task End Reason"]["Reason"]
            app.tasks.append(
                TaskEnd(event["Stage ID"], info["Index"], info["Attempt"], info["Executor ID"],
                        reason)
            )  # fmt: skip
    assert app.app_id, f"no application start in {logs[0]}"
    return app
