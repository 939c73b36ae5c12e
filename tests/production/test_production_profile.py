"""The production profile, end to end: DynamoDB + S3 + Glue (the loopback AWS server), a Spark
Connect server in a process of its own, and Dagster on Postgres (a PostgreSQL server on
127.0.0.1 from the `pgserver` wheel) with `deploy/dagster.yaml` as it is.

Everything is configured the way docs/production.md says, by environment variables only, and
driven through the commands an operator runs: `leasehold doctor`, `leasehold run`, `leasehold
table`, and `dagster dev` (daemon, webserver, code server) for the sensors' path. The test
process reads back what a reader and an operator would: the published table through Glue (an
Iceberg table, the default `table_format`: read with pyiceberg's own Glue catalog and with
polars, as an engine would), the lease table, and the runs and materializations in Postgres.

Time: 268 s measured on this project's shared 2-core machine (load average ~5): Spark
Connect's start 25 s, doctor 33 s (its Spark query pays the server's first-query warm-up),
`leasehold run` 62 s, the daemon path 132 s (`dagster dev`'s start ~45 s, then the sensors'
ticks, 30 s apart then, 10 s now, and a run worker's start per run). The data is tiny: what
costs is process starts. Every wait is bounded and fails naming what it waited for, with the
state.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import boto3
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter
from pyiceberg.table import Table

from coordination_assets.compaction import merge_asset_key
from coordination_assets.ingestion import ingestion_asset_key
from coordination_assets.publication import table_asset_key
from resources.catalog.settings import CatalogSettings
from resources.cli.table import TableReader
from resources.coordination.items import ItemType, PartitionStatus
from resources.dagster_resources.runs import MERGE_TAG, PUBLISH_TAG, STREAM_TAG
from resources.ingestion.sample_data import record_line, write_sample_sources
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.streams import LakeSettings
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer, free_port
from tests.support.dagster_dev import DagsterDev
from tests.support.pipeline_env import STREAM, source_ids
from tests.support.postgres_server import LocalPostgres
from tests.support.spark_connect_server import SparkConnectServer, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
SPARK_CONNECT_START_S = 180.0
COMMAND_TIMEOUT_S = 180.0
SENSOR_INTERVAL_S = 10
DAEMON_TIMEOUT_S = 240.0  # dagster dev's start, 3 sensor ticks, 3 runs
OBJECTS, RECORDS, MALFORMED_EVERY = 6, 20, 17
LATE_OBJECTS = 2

T = TypeVar("T")


# -- the servers --------------------------------------------------------------------------------


@dataclass
class Production:
    root: Path
    env: dict[str, str]
    store_settings: StoreSettings
    s3: Any
    src_bucket: str
    lake_bucket: str
    home: Path
    local_sources: Path
    spark: SparkConnectServer

    def leasehold(self, *args: str) -> tuple[int, str]:
        """`leasehold <args>` as an operator runs it: a process of its own, this environment.
        A command that fails or hangs returns what it printed and the Spark Connect server's
        log tail, so that a red run says which of the two stalled."""
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "resources.cli.main", *args],
                cwd=self.root,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=COMMAND_TIMEOUT_S,
            )
            code, out = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as hung:
            printed = [p for p in (hung.stdout, hung.stderr) if p]
            out = "".join(
                p.decode(errors="replace") if isinstance(p, bytes) else p for p in printed
            )
            code, out = -1, f"(timed out after {COMMAND_TIMEOUT_S:.0f} s)\n{out}"
        if code != 0:
            out += f"\n-- Spark Connect server's log --\n{self.spark.tail()}"
        return code, out

    def reader(self) -> TableReader:
        return TableReader(CatalogSettings.from_env(self.env), LakeSettings.from_env(self.env))

    def published_ids(self) -> Counter[str]:
        """Every record id a query engine sees: Glue's partitions, each manifest's files."""
        reader, ids = self.reader(), Counter[str]()
        for published in reader.ls(STREAM):
            table = reader.read(STREAM, published.partition.dt, None)
            ids.update(table.column("event_id").to_pylist())
        return ids

    def iceberg_table(self) -> Table:
        """The stream's table as an engine finds it: pyiceberg's own Glue catalog on the
        loopback server's endpoint (Glue, and the table's metadata and files on its S3)."""
        from pyiceberg.catalog.glue import GlueCatalog

        endpoint = self.env["LEASEHOLD_GLUE_ENDPOINT_URL"]
        keys = {
            "s3.access-key-id": self.env["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": self.env["AWS_SECRET_ACCESS_KEY"],
            "s3.session-token": self.env["AWS_SESSION_TOKEN"],
        }
        catalog = GlueCatalog(
            "engine", **{"glue.endpoint": endpoint, "glue.region": "us-east-1",
                         "s3.endpoint": endpoint, "s3.region": "us-east-1", **keys}
        )  # fmt: skip
        return catalog.load_table((self.env["LEASEHOLD_GLUE_DATABASE"], STREAM))

    def polars_ids(self, table: Table) -> Counter[str]:
        """The record ids `polars.scan_iceberg` reads at the table's current snapshot."""
        storage = {
            "aws_endpoint_url": self.env["LEASEHOLD_S3_ENDPOINT_URL"],
            "aws_region": "us-east-1",
            "aws_allow_http": "true",
            "aws_access_key_id": self.env["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": self.env["AWS_SECRET_ACCESS_KEY"],
            "aws_session_token": self.env["AWS_SESSION_TOKEN"],
        }
        frame = pl.scan_iceberg(
            table, snapshot_id=table.metadata.current_snapshot_id, storage_options=storage
        )
        return Counter(frame.select("event_id").collect()["event_id"].to_list())

    def completed(self) -> Counter[PartitionStatus]:
        store = build_store(self.store_settings)
        try:
            sid = store.source_identifier(STREAM, ItemType.PARTITION)
            return Counter(i.status for i in store.iter_items(sid))
        finally:
            store.close_store()

    def upload_sources(self, under: Path | None = None) -> None:
        for path in sorted((under or self.local_sources).rglob("*.jsonl")):
            key = f"events/{path.relative_to(self.local_sources).as_posix()}"
            self.s3.upload_file(str(path), self.src_bucket, key)


@pytest.fixture(scope="module")
def production(
    aws_server: LocalAwsServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Production]:
    root = tmp_path_factory.mktemp("production")
    # Spark Connect's JVM takes longest to start: it starts first and comes up meanwhile.
    spark = SparkConnectServer(root / "spark-connect", free_port()).start()
    postgres = LocalPostgres()
    try:
        postgres.start()
        endpoint = aws_server.endpoint_url
        suffix = uuid.uuid4().hex[:8]
        s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
        src, lake = f"prod-src-{suffix}", f"prod-lake-{suffix}"
        for bucket in (src, lake):
            s3.create_bucket(Bucket=bucket)
        database = f"prod_{suffix}"
        boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1").create_database(
            DatabaseInput={"Name": database}
        )
        # Provisioned ahead, as production's infrastructure code would: the commands only use
        # it (LEASEHOLD_SKIP_TABLE_CREATION), and the doctor checks it fits.
        store_settings = StoreSettings(
            backend="dynamodb", table_name=f"prod-{suffix}", endpoint_url=endpoint, ttl="P7D"
        )
        build_store(store_settings).close_store()
        streams = root / "streams.yaml"
        streams.write_text(
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
    merge: {{close_grace: PT1S, interval: PT1S, delayed_interval: PT1S}}
"""
        )
        home = root / "dagster_home"
        home.mkdir()
        shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LEASEHOLD_", "DAGSTER_", "PYSPARK_", "SPARK_"))
        }
        env = {
            **base,
            **AWS_TEST_ENV,
            "PYTHONPATH": str(REPO),
            "SPARK_LOCAL_IP": "127.0.0.1",
            # Dagster's instance (deploy/dagster.yaml)
            "DAGSTER_HOME": str(home),
            "DAGSTER_PG_URL": postgres.url,
            "DAGSTER_COMPUTE_LOG_BUCKET": lake,
            "DAGSTER_COMPUTE_LOG_PREFIX": "dagster-compute-logs",
            "AWS_ENDPOINT_URL_S3": endpoint,  # the compute logs' S3: the loopback server
            # leasehold
            "LEASEHOLD_DATA_DIR": str(root / "data"),
            "LEASEHOLD_STREAMS": str(streams),
            "LEASEHOLD_STORE_BACKEND": "dynamodb",
            "LEASEHOLD_DYNAMODB_TABLE": store_settings.table_name,
            "LEASEHOLD_DYNAMODB_ENDPOINT_URL": endpoint,
            "LEASEHOLD_SKIP_TABLE_CREATION": "true",
            "LEASEHOLD_TTL": "P7D",
            "LEASEHOLD_S3_ENDPOINT_URL": endpoint,
            "LEASEHOLD_CATALOG": "glue",
            "LEASEHOLD_GLUE_DATABASE": database,
            "LEASEHOLD_GLUE_ENDPOINT_URL": endpoint,
            "LEASEHOLD_SPARK_REMOTE": spark.url,
            "LEASEHOLD_OWNERSHIP_TIMEOUT_SECONDS": "60",
            # A third of the default: the daemon path waits for three ticks in a row.
            "LEASEHOLD_SENSOR_INTERVAL_SECONDS": str(SENSOR_INTERVAL_S),
        }
        local = root / "sources"
        write_sample_sources(
            local, objects=OBJECTS, records_per_object=RECORDS, days=2, malformed_every=17
        )
        prod = Production(root, env, store_settings, s3, src, lake, home, local, spark)
        prod.upload_sources()
        spark.wait_until_up()
        yield prod
    finally:
        spark.stop()
        postgres.stop()


@pytest.fixture(scope="module")
def instance(production: Production) -> Iterator[DagsterInstance]:
    """The Postgres-backed instance, as the daemon sees it: same DAGSTER_HOME, same variables."""
    with pytest.MonkeyPatch.context() as patch:
        for name, value in production.env.items():
            if name.startswith("DAGSTER_") or name == "AWS_ENDPOINT_URL_S3":
                patch.setenv(name, value)
        with DagsterInstance.from_config(str(production.home)) as inst:
            yield inst


# -- the tests, in order ------------------------------------------------------------------------


def test_doctor_passes_on_the_production_profile(production: Production) -> None:
    code, out = production.leasehold("doctor", "--json", "--spark-timeout", "120")
    report, _ = json.JSONDecoder().raw_decode(out, out.index("{"))
    failed = [c for c in report["checks"] if not c["ok"]]
    assert code == 0 and not failed, out
    checks = {c["name"]: c["detail"] for c in report["checks"]}
    assert "PostgresRunStorage" in checks["dagster: instance storage answers"]
    assert checks["spark: session starts"].startswith(production.env["LEASEHOLD_SPARK_REMOTE"])
    # The first task: on the Connect server's executor, with the code the session shipped.
    python = checks["spark: the executors' Python runs leasehold's code"]
    assert "leasehold's code shipped with the session (leasehold-code-" in python, python
    assert "GiB free" in checks["spark: the executors have scratch space"]
    # A task on the Connect server's executor read the source and wrote the table's prefix.
    executor = checks[f"spark: an executor reads {STREAM}'s source and writes its table"]
    assert "ok: " in executor and "wrote and deleted s3://" in executor, executor


def test_leasehold_run_publishes_every_well_formed_record_once(
    production: Production, instance: DagsterInstance
) -> None:
    code, out = production.leasehold("run")
    assert code == 0, out
    expected = source_ids(production.local_sources)
    quarantined = OBJECTS * RECORDS - sum(expected.values())
    assert quarantined > 0  # the malformed lines went to quarantine, not to the table
    assert production.published_ids() == expected, out
    # What `leasehold table files` lists is what a reader gets: read it with boto3 + pyarrow.
    rows = 0
    for published in production.reader().ls(STREAM):
        dt = published.partition.dt
        code, files = production.leasehold("table", "files", STREAM, dt, "--json")
        assert code == 0, files
        for entry in json.loads(files)["files"]:
            bucket, _, key = entry["url"][len("s3://") :].partition("/")
            body = production.s3.get_object(Bucket=bucket, Key=key)["Body"].read()
            assert len(body) == entry["contentLength"]
            rows += pq.read_table(pa.BufferReader(body)).num_rows
    assert rows == sum(expected.values()) == OBJECTS * RECORDS - quarantined
    # The table is an Iceberg table in Glue (the default `table_format`), its metadata on S3,
    # and engines reading it through Glue get every well-formed record once.
    glue = boto3.client("glue", endpoint_url=production.env["LEASEHOLD_GLUE_ENDPOINT_URL"],
                        region_name="us-east-1")  # fmt: skip
    database = production.env["LEASEHOLD_GLUE_DATABASE"]
    parameters = glue.get_table(DatabaseName=database, Name=STREAM)["Table"]["Parameters"]
    assert parameters["table_type"].upper() == "ICEBERG", parameters
    metadata = f"s3://{production.lake_bucket}/tables/events/metadata/"
    assert parameters["metadata_location"].startswith(metadata), parameters
    table = production.iceberg_table()
    assert table.metadata_location == parameters["metadata_location"]
    assert Counter(table.scan().to_arrow().column("event_id").to_pylist()) == expected
    assert production.polars_ids(table) == expected
    # The run is recorded in Postgres.
    assert instance.get_materialized_partitions(ingestion_asset_key(STREAM))
    assert instance.get_latest_materialization_event(table_asset_key(STREAM)) is not None


def test_the_daemon_ingests_merges_and_publishes_new_objects(
    production: Production, instance: DagsterInstance
) -> None:
    p = production
    late = p.local_sources / "2026" / "01" / "05"
    late.mkdir(parents=True)
    for i in range(LATE_OBJECTS):
        lines = [record_line(900_000 + i * 100 + j, _late_time(j)) for j in range(RECORDS)]
        (late / f"late-{i:03d}.jsonl").write_text("\n".join(lines) + "\n")
    expected = source_ids(p.local_sources)
    marker = f"LEASEHOLD_DATA_DIR={p.env['LEASEHOLD_DATA_DIR']}"
    dev = DagsterDev(REPO / "workspace.yaml", p.env, p.root / "dagster_dev.log", marker)
    started = time.time()
    try:
        dev.start()
        p.upload_sources(late)  # after every key listed so far, as new objects land

        def state() -> str:
            runs = "\n".join(
                f"  {r.dagster_run.run_id[:8]} {r.dagster_run.status.value} "
                f"{ {k: v for k, v in r.dagster_run.tags.items() if k.startswith('leasehold/')} }"
                for r in instance.get_run_records()
            )
            return (
                f"store: {dict(p.completed())}\nruns:\n{runs}\ndagster dev:\n{dev.log_tail(60)}"
                f"\nSpark Connect server:\n{p.spark.tail()}"
            )

        def succeeded(tag: str) -> bool:
            runs = instance.get_run_records(
                RunsFilter(statuses=[DagsterRunStatus.SUCCESS], tags={tag: STREAM})
            )
            return any(r.create_timestamp.timestamp() >= started for r in runs)

        def ingested_merged_published() -> bool:
            """An ingestion, a merge and a publication run of the sensors ended in success,
            and every record is published once: the late date's live version (publication
            does not wait for its merge). The merged version's publication is one more tick
            (30 s) not waited for: `leasehold run` above publishes merged versions."""
            assert dev.running(), f"dagster dev exited\n{state()}"
            return (
                all(succeeded(tag) for tag in (STREAM_TAG, MERGE_TAG, PUBLISH_TAG))
                and p.published_ids() == expected
            )

        wait_for(
            "ingestion, merge and publication of the late objects",
            ingested_merged_published,
            DAEMON_TIMEOUT_S,
            state,
        )
    finally:
        survivors = dev.stop()
    assert not survivors, f"processes of the test's dagster dev survived: {survivors}"

    # Postgres recorded the sensors' runs and what they materialized.
    done = [
        r
        for r in instance.get_run_records(RunsFilter(statuses=[DagsterRunStatus.SUCCESS]))
        if r.create_timestamp.timestamp() >= started
    ]
    new_runs = {r.dagster_run.run_id for r in done}
    for key in (ingestion_asset_key(STREAM), merge_asset_key(STREAM), table_asset_key(STREAM)):
        event = instance.get_latest_materialization_event(key)
        assert event is not None and event.run_id in new_runs, key
    ingested = instance.get_materialized_partitions(ingestion_asset_key(STREAM))
    assert any(k.startswith("2026/01/05/") for k in ingested), ingested
    assert "2026-01-05" in instance.get_materialized_partitions(merge_asset_key(STREAM))
    # Each step's output went to S3 through deploy/dagster.yaml's compute log manager.
    logs = p.s3.list_objects_v2(Bucket=p.lake_bucket, Prefix="dagster-compute-logs/")
    assert logs.get("KeyCount", 0) > 0


def _late_time(j: int) -> Any:
    from datetime import datetime, timezone

    return datetime(2026, 1, 5, j % 24, tzinfo=timezone.utc)
