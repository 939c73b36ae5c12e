"""`leasehold doctor` against the loopback AWS server: a good production-shaped configuration
passes every check, and each broken one fails the check that names it, with the fix.

No Spark session starts here: the Connect server is a listening socket (the doctor's
reachability check) or a closed port, and the query is skipped (`--no-spark-query`); the
production-profile test runs the query against a real server.
"""

from __future__ import annotations

import json
import shutil
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import boto3
import pytest

from resources.cli import doctor_spark
from resources.cli.doctor import run_checks
from resources.cli.doctor_check import SCRATCH_PREFIX, Check
from resources.cli.doctor_spark import executor_check, host_checks
from resources.cli.main import main
from resources.dagster_resources.instance import write_instance_yaml
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.aws_server import LocalAwsServer, free_port
from tests.support.pipeline_env import write_streams

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Deployment:
    env: dict[str, str]
    lake_bucket: str
    s3: object


@pytest.fixture
def connect_port() -> Iterator[int]:
    """A port that accepts TCP connections, standing in for a Spark Connect server."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.fixture
def deployment(
    aws_server: LocalAwsServer, tmp_path: Path, connect_port: int, monkeypatch: pytest.MonkeyPatch
) -> Deployment:
    """DynamoDB table, source and lake buckets, Glue database, a Dagster home: all there."""
    endpoint = aws_server.endpoint_url
    suffix = uuid.uuid4().hex[:8]
    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    src, lake = f"src-{suffix}", f"lake-{suffix}"
    for bucket in (src, lake):
        s3.create_bucket(Bucket=bucket)
    s3.put_object(Bucket=src, Key="events/2026/01/01/a.jsonl", Body=b"{}\n")
    streams = write_streams(tmp_path / "streams.yaml", f"s3://{src}/events", f"s3://{lake}/events")
    table = f"doctor-{suffix}"
    build_store(
        StoreSettings(backend="dynamodb", table_name=table, endpoint_url=endpoint, ttl="P7D")
    ).close_store()
    database = f"doctor_{suffix}"
    glue = boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1")
    glue.create_database(DatabaseInput={"Name": database})
    home = tmp_path / "dagster_home"
    write_instance_yaml(home)
    env = {
        "LEASEHOLD_DATA_DIR": str(tmp_path / "data"),
        "LEASEHOLD_STREAMS": str(streams),
        "LEASEHOLD_STORE_BACKEND": "dynamodb",
        "LEASEHOLD_DYNAMODB_TABLE": table,
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL": endpoint,
        "LEASEHOLD_SKIP_TABLE_CREATION": "true",
        "LEASEHOLD_TTL": "P7D",
        "LEASEHOLD_S3_ENDPOINT_URL": endpoint,
        "LEASEHOLD_CATALOG": "glue",
        "LEASEHOLD_GLUE_DATABASE": database,
        "LEASEHOLD_GLUE_ENDPOINT_URL": endpoint,
        "LEASEHOLD_SPARK_REMOTE": f"sc://127.0.0.1:{connect_port}",
        "DAGSTER_HOME": str(home),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return Deployment(env, lake, s3)


def by_name(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks}


def failed(checks: list[Check]) -> dict[str, Check]:
    return {c.name: c for c in checks if not c.ok}


def test_a_good_configuration_passes_every_check(
    deployment: Deployment, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["doctor", "--json", "--no-spark-query"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] is True
    names = [c["name"] for c in report["checks"]]
    assert names == [
        "configuration valid",
        "store: AWS credentials",
        "store: table exists",
        "store: keys, GSI and TTL",
        "store: write, read, delete",
        "objects: events source readable",
        "objects: events table writable",
        "objects: events quarantine writable",
        "catalog: Glue database exists",
        "catalog: Iceberg catalog answers",
        "spark: Connect server reachable",
        "dagster: instance storage answers",
    ]
    checks = {c["name"]: c for c in report["checks"]}
    assert "ENABLED" in checks["store: keys, GSI and TTL"]["detail"]
    assert "PooledSqliteEventLogStorage" in checks["dagster: instance storage answers"]["detail"]
    # The scratch objects are gone again.
    listed = deployment.s3.list_objects_v2(Bucket=deployment.lake_bucket)  # type: ignore[attr-defined]
    assert not [o for o in listed.get("Contents", []) if SCRATCH_PREFIX in o["Key"]]


def test_the_text_output_says_pass_and_fail_and_the_exit_status_is_1_on_a_failure(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LEASEHOLD_SPARK_REMOTE", f"sc://127.0.0.1:{free_port()}")
    assert main(["doctor", "--no-spark-query"]) == 1
    out = capsys.readouterr().out
    assert "PASS  store: table exists" in out
    assert "FAIL  spark: Connect server reachable" in out
    assert "fix: start the server" in out
    assert out.rstrip().endswith("11 passed, 1 failed")


def test_a_missing_table_is_named_with_how_to_create_it(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_TABLE", "no-such-table")
    bad = failed(run_checks(spark_query=False))
    assert list(bad) == ["store: table exists"]
    assert "'no-such-table'" in bad["store: table exists"].detail
    assert "creates it with its keys, GSI and TTL" in bad["store: table exists"].fix


def test_a_table_without_ttl_fails_when_a_ttl_is_configured(
    deployment: Deployment, aws_server: LocalAwsServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = f"doctor-nottl-{uuid.uuid4().hex[:8]}"
    build_store(
        StoreSettings(backend="dynamodb", table_name=table, endpoint_url=aws_server.endpoint_url)
    ).close_store()
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_TABLE", table)
    bad = failed(run_checks(spark_query=False))
    assert list(bad) == ["store: keys, GSI and TTL"]
    assert "ttl is configured" in bad["store: keys, GSI and TTL"].detail


def test_a_missing_bucket_is_named_with_how_to_fix_it(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    src = deployment.env["LEASEHOLD_STREAMS"]
    text = Path(src).read_text().replace(f"s3://{deployment.lake_bucket}/", "s3://no-such-lake/")
    streams = tmp_path / "streams-missing-bucket.yaml"
    streams.write_text(text)
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(streams))
    bad = failed(run_checks(spark_query=False))
    assert list(bad) == ["objects: events table writable", "objects: events quarantine writable"]
    for check in bad.values():
        assert "s3://no-such-lake/events" in check.detail
        assert "create bucket 'no-such-lake'" in check.fix


def test_a_closed_spark_connect_port_is_named(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = free_port()
    monkeypatch.setenv("LEASEHOLD_SPARK_REMOTE", f"sc://127.0.0.1:{port}")
    bad = failed(run_checks())  # the query is never tried: the port check fails first
    assert list(bad) == ["spark: Connect server reachable"]
    assert f"127.0.0.1:{port}" in bad["spark: Connect server reachable"].detail
    assert "LEASEHOLD_SPARK_REMOTE" in bad["spark: Connect server reachable"].fix


def test_a_missing_glue_database_is_named(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASEHOLD_GLUE_DATABASE", "no_such_database")
    bad = failed(run_checks(spark_query=False))
    assert list(bad) == ["catalog: Glue database exists"]
    assert "create-database" in bad["catalog: Glue database exists"].fix


def test_a_rest_catalog_that_does_not_answer_is_named(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LEASEHOLD_CATALOG", "rest")
    monkeypatch.setenv("LEASEHOLD_ICEBERG_REST_URI", f"http://127.0.0.1:{free_port()}")
    checks = by_name(run_checks(spark_query=False))
    assert "catalog: Glue database exists" not in checks  # no stream publishes Hive partitions
    bad = checks["catalog: Iceberg catalog answers"]
    assert not bad.ok
    assert "Iceberg REST catalog http://127.0.0.1:" in bad.detail
    assert "LEASEHOLD_ICEBERG_REST_URI" in bad.fix


def test_an_unreachable_postgres_instance_is_named(
    deployment: Deployment, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "pg_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv(
        "DAGSTER_PG_URL", f"postgresql+psycopg2://postgres@127.0.0.1:{free_port()}/dagster"
    )
    monkeypatch.setenv("DAGSTER_COMPUTE_LOG_BUCKET", deployment.lake_bucket)
    monkeypatch.setenv("DAGSTER_COMPUTE_LOG_PREFIX", "compute-logs")
    bad = failed(run_checks(spark_query=False))
    assert list(bad) == ["dagster: instance storage answers"]
    assert "DAGSTER_PG_URL" in bad["dagster: instance storage answers"].fix


def test_an_invalid_configuration_stops_at_the_first_check(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "cassandra")
    (check,) = run_checks()
    assert check.name == "configuration valid" and not check.ok
    assert "cassandra" in check.detail and "leasehold config" in check.fix


def test_an_executor_that_cannot_read_or_write_is_named_with_what_failed() -> None:
    """The executor probe's report: the host, the step that failed and the fix."""
    report = {"stream": "events", "host": "worker-7", "python": "3.11.7", "boto3": "1.40"}
    good = executor_check({**report, "read": "ok: 10 bytes of 'a'", "write": "ok: wrote"})
    assert good.ok and "worker-7" in good.detail
    bad = executor_check({**report, "read": "ok: 10 bytes", "write": "ClientError: AccessDenied"})
    assert not bad.ok and "write: ClientError: AccessDenied" in bad.detail and "role" in bad.fix
    dead = executor_check({"stream": "events", "task": "No module named 'pyarrow'"})
    assert not dead.ok and "pyarrow" in dead.detail


def test_the_first_tasks_report_is_three_checks() -> None:
    report = {
        "host": "worker-2",
        "python": "3.11.7",
        "executable": "/venv/bin/python",
        "code": "leasehold-code-0123456789abcdef.zip",
        "code_shipped": True,
        "callback": "ok: reached 10.9.0.1:7078",
        "scratch": "/scratch/blockmgr-1",
        "scratch_free": 5 << 30,
    }
    callback, python, scratch = host_checks(report)
    assert callback.ok and "on worker-2: ok: reached 10.9.0.1:7078" in callback.detail
    assert python.ok and "shipped with the session (leasehold-code-0123" in python.detail
    assert scratch.ok and "/scratch/blockmgr-1: 5.0 GiB free" in scratch.detail
    small = list(host_checks({**report, "scratch_free": 10 << 20}))[2]
    assert not small.ok and "spark.local.dir" in small.fix
    broken = list(host_checks({**report, "scratch_error": "PermissionError: denied"}))
    assert not broken[2].ok and "PermissionError" in broken[2].detail


def test_a_probe_whose_task_never_ran_names_the_callback_address() -> None:
    """The child's lines as it prints them when no executor registered (tests/chaos/
    test_cluster_hosts.py shows it against a real cluster)."""
    stalled = "the doctor's first task: no executor registered ... call it back at 127.0.0.1:4"
    said = doctor_spark._said(
        'session {"version": "4.3.0", "driver": "127.0.0.1:4", "seconds": 2.0}\n'
        f"stalled {json.dumps(stalled)}\n"
    )
    check = doctor_spark._no_task(said, "127.0.0.1:4", 60, "", 0)
    assert not check.ok and check.name == doctor_spark.TASK
    assert "127.0.0.1:4" in check.detail and "spark.driver.host" in check.fix
    cut = doctor_spark._no_task(doctor_spark._said(""), "10.9.0.1:7078", 60, "", None)
    assert "within 60 s; they were told to call the driver back at 10.9.0.1:7078" in cut.detail
