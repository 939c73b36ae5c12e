"""A fault at the door, one component down at a time: `leasehold run` ends non-zero within a
minute in a few lines that name the component, with no traceback (issue 32, point 5).

Each test runs the command as a user does — a process of its own, configured by environment —
against a local project (SQLite store, file:// source and lake, the embedded Dagster instance)
with one component pointed at what is broken: the loopback AWS server stopped, a port with
nothing behind it, a proxy that throttles every call, credentials removed, a Spark master or
Postgres URL on a free port. The last test checks the same fault in a Dagster run: the run's
failure carries leasehold's message on top, not Dagster's wrapper.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from dagster import DagsterInstance, asset, materialize

from resources.dagster_resources.coordination import CoordinationResource
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer, free_port
from tests.support.pipeline_env import write_streams
from tests.support.throttling_proxy import ThrottlingProxy

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 60.0
MAX_LINES = 6


@dataclass
class Ended:
    code: int
    lines: list[str]
    took: float

    @property
    def text(self) -> str:
        return "\n".join(self.lines)


def leasehold_run(
    tmp_path: Path, *, aws: bool = True, source: str | None = None, **extra: str
) -> Ended:
    """`leasehold run` on a fresh local project (its source `source`, by default a local
    directory it fills with a sample), `extra` on top of its environment; without `aws`, no
    AWS credentials anywhere (no variables, empty credentials and config files)."""
    source = source or f"file://{tmp_path / 'sources'}"
    streams = write_streams(tmp_path / "streams.yaml", source, f"file://{tmp_path / 'lake'}")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LEASEHOLD_", "AWS_", "DAGSTER_", "SPARK_"))
    }
    env.update(
        PYTHONPATH=str(REPO),
        SPARK_LOCAL_IP="127.0.0.1",
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STREAMS=str(streams),
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        AWS_EC2_METADATA_DISABLED="true",  # never ask 169.254.169.254 for credentials
    )
    if aws:
        env.update(AWS_TEST_ENV)
    else:
        empty = tmp_path / "empty-aws-file"
        empty.write_text("")
        env.update(AWS_SHARED_CREDENTIALS_FILE=str(empty), AWS_CONFIG_FILE=str(empty))
    env.update(extra)
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "resources.cli.main", "run"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=DEADLINE_S * 2,
    )
    return Ended(done.returncode, done.stdout.splitlines(), time.monotonic() - started)


def assert_a_clear_word(ended: Ended, component: str, *named: str) -> None:
    """Non-zero within the deadline, a few lines, no traceback; the component, what of it
    (endpoint, table, URL) and `leasehold doctor` named."""
    assert ended.code != 0, ended.text
    assert ended.took < DEADLINE_S, f"{ended.took:.0f} s:\n{ended.text}"
    # The sample the command writes into the empty source is said in a line of its own.
    said = [line for line in ended.lines if "wrote a sample under" not in line]
    assert len(said) <= MAX_LINES, ended.text
    assert "Traceback" not in ended.text
    assert said[-1].startswith(f"leasehold: {component} could not be used"), ended.text
    assert "run `leasehold doctor` for more" in said[-1]
    for text in named:
        assert text in ended.text, ended.text


def dynamodb(endpoint: str, table: str = "leasehold-coordination") -> dict[str, str]:
    return {
        "LEASEHOLD_STORE_BACKEND": "dynamodb",
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL": endpoint,
        "LEASEHOLD_DYNAMODB_TABLE": table,
    }


def test_the_lease_store_server_stopped(tmp_path: Path) -> None:
    server = LocalAwsServer().start()
    server.stop()
    ended = leasehold_run(tmp_path, **dynamodb(server.endpoint_url))
    assert_a_clear_word(
        ended, "the lease store", "DynamoDB table 'leasehold-coordination'", server.endpoint_url
    )
    assert "failed after 6 attempts: Could not connect to the endpoint URL" in ended.text


def test_the_lease_store_without_credentials(aws_server: LocalAwsServer, tmp_path: Path) -> None:
    ended = leasehold_run(tmp_path, aws=False, **dynamodb(aws_server.endpoint_url))
    assert_a_clear_word(
        ended, "the lease store", "DynamoDB table 'leasehold-coordination'", "credentials"
    )


def test_the_lease_store_throttling_every_call(aws_server: LocalAwsServer, tmp_path: Path) -> None:
    with ThrottlingProxy(aws_server.endpoint_url) as proxy:
        proxy.throttle_next = 1_000
        ended = leasehold_run(tmp_path, **dynamodb(proxy.endpoint_url))
    assert_a_clear_word(ended, "the lease store", "DynamoDB table 'leasehold-coordination'")
    assert "failed after 6 attempts" in ended.text
    assert "ProvisionedThroughputExceededException" in ended.text
    assert proxy.throttled == 6  # bounded: six attempts, then the error


def test_the_lease_table_missing(aws_server: LocalAwsServer, tmp_path: Path) -> None:
    """Not a component down but a table not there, with creation turned off: a configuration
    error (exit 2), one line naming the table and the setting."""
    table = f"missing-{uuid.uuid4().hex[:8]}"
    ended = leasehold_run(
        tmp_path, **dynamodb(aws_server.endpoint_url, table), LEASEHOLD_SKIP_TABLE_CREATION="true"
    )
    assert ended.code == 2, ended.text
    assert ended.took < DEADLINE_S
    assert "Traceback" not in ended.text
    (line,) = [line for line in ended.lines if line.startswith("leasehold:")]
    assert "invalid lease store configuration" in line
    assert f"table {table!r} does not exist and skip_table_creation is set" in line


def test_a_spark_master_with_nothing_behind_it(tmp_path: Path) -> None:
    master = f"spark://127.0.0.1:{free_port()}"
    ended = leasehold_run(tmp_path, LEASEHOLD_SPARK_MASTER=master)
    assert_a_clear_word(ended, "Spark", f"Spark master {master!r}", "Connection refused")


def test_a_spark_connect_url_with_nothing_behind_it(tmp_path: Path) -> None:
    remote = f"sc://127.0.0.1:{free_port()}"
    ended = leasehold_run(tmp_path, LEASEHOLD_SPARK_REMOTE=remote)
    assert_a_clear_word(ended, "Spark", f"Spark Connect server {remote!r}", "Connection refused")


def test_dagster_postgres_with_no_server(tmp_path: Path) -> None:
    home = tmp_path / "pg_home"
    home.mkdir()
    shutil.copy(REPO / "deploy" / "dagster.yaml", home / "dagster.yaml")
    port = free_port()
    ended = leasehold_run(
        tmp_path,
        DAGSTER_HOME=str(home),
        DAGSTER_PG_URL=f"postgresql+psycopg2://postgres@127.0.0.1:{port}/dagster",
        DAGSTER_COMPUTE_LOG_BUCKET="compute-logs",
        DAGSTER_COMPUTE_LOG_PREFIX="logs",
    )
    assert_a_clear_word(ended, "Dagster's storage", str(home), f"port {port} failed")
    assert "Retrying failed database connection" not in ended.text


def test_the_s3_source_refusing(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    ended = leasehold_run(
        tmp_path, source="s3://source-bucket/events", LEASEHOLD_S3_ENDPOINT_URL=endpoint
    )
    assert_a_clear_word(ended, "an object store", "s3://source-bucket/events", endpoint)
    assert "retrying in" not in ended.text  # each retry is in the log file, not on the screen


def test_the_glue_catalog_refusing(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    ended = leasehold_run(
        tmp_path,
        LEASEHOLD_CATALOG="glue",
        LEASEHOLD_GLUE_DATABASE="lake",
        LEASEHOLD_GLUE_ENDPOINT_URL=endpoint,
    )
    assert_a_clear_word(ended, "the catalog", "Iceberg Glue catalog 'lake'", endpoint)


def test_in_a_dagster_run_the_failure_is_leaseholds_message(tmp_path: Path) -> None:
    """The run fails at the resource's setup, and its failure's error is leasehold's message,
    not "Error executing resource_fn on ResourceDefinition coordination"."""
    endpoint = f"http://127.0.0.1:{free_port()}"

    @asset
    def needs_the_store(coordination: CoordinationResource) -> None:
        raise AssertionError("the store does not answer: no step runs")

    coordination = CoordinationResource(backend="dynamodb", endpoint_url=endpoint)
    with DagsterInstance.ephemeral() as instance:
        result = materialize(
            [needs_the_store],
            resources={"coordination": coordination},
            instance=instance,
            raise_on_error=False,
        )
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "PIPELINE_FAILURE"]
    error = failure.event_specific_data.error  # type: ignore[union-attr]
    assert error.cls_name == "LeaseholdRunError"
    first = error.message.splitlines()[0]
    assert first.startswith("resources.dagster_resources.door.LeaseholdRunError: DynamoDB table")
    assert "'leasehold-coordination': CreateTable failed after 6 attempts" in first
    assert endpoint in error.message
    assert error.cause.cls_name == "StoreUnavailableError"
