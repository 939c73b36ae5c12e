"""The `leasehold` command's errors: one line and an exit code, a traceback only with --debug;
commands that only look at the store never create one."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

import resources.stores.dynamodb.client as dynamodb_client
from resources.cli.main import main
from resources.retry import RetryPolicy
from resources.stores import build_store
from resources.stores.settings import settings_from_env
from tests.support.aws_server import free_port

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """No configuration but the test's own; --debug's logger levels undone afterwards."""
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    loggers = [logging.getLogger(name) for name in ("resources", "coordination_assets")]
    levels = [logger.level for logger in loggers]
    yield
    for logger, level in zip(loggers, levels, strict=True):
        logger.setLevel(level)


@pytest.fixture
def unreachable_dynamodb(monkeypatch: pytest.MonkeyPatch) -> None:
    """DynamoDB on a loopback port nothing listens on, given up on after two quick attempts."""
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "dynamodb")
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_ENDPOINT_URL", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setattr(
        dynamodb_client, "RetryPolicy", lambda: RetryPolicy(max_attempts=2, base_delay_s=0.01)
    )


def test_bad_configuration_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "dynamodb")
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_BILLING_MODE", "FREE")
    assert main(["status"]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "leasehold: invalid lease store configuration: billing_mode: "
        "'FREE': PROVISIONED or PAY_PER_REQUEST"
    ]


def test_store_failure_is_two_lines_and_exit_1(unreachable_dynamodb, capsys) -> None:
    """The error, then which component and `leasehold doctor` (tests/cli/test_faults_at_the_door.py
    has one such test per component)."""
    assert main(["status"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2, err
    assert err[0].startswith("leasehold: DynamoDB table 'leasehold-coordination': DescribeTable")
    assert "failed after 2 attempts" in err[0] and "Traceback" not in err[0]
    assert err[1].startswith("leasehold: the lease store could not be used: run `leasehold doctor`")


def test_debug_adds_the_traceback(unreachable_dynamodb, capsys) -> None:
    assert main(["--debug", "status"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("Traceback (most recent call last):")
    assert "EndpointConnectionError" in err  # the cause, chained
    assert "StoreUnavailableError" in err
    assert err.splitlines()[-2].startswith("leasehold: DynamoDB table 'leasehold-coordination'")
    assert err.splitlines()[-1].endswith("(the traceback is above)")


def test_debug_after_the_command_and_for_configuration_errors(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "cassandra")
    assert main(["status", "--debug"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and "StoreConfigError" in err
    assert err.splitlines()[-1].startswith("leasehold: invalid lease store configuration: backend")


def test_other_errors_are_bugs_and_keep_their_traceback(monkeypatch) -> None:
    def broken(settings):
        raise KeyError("a bug")

    monkeypatch.setattr("resources.cli.status.open_existing_store", broken)
    with pytest.raises(KeyError, match="a bug"):
        main(["status"])


def test_help_documents_the_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert "exit status:" in out and "2  invalid configuration" in out and "--debug" in out


def test_the_installed_command_prints_one_line(tmp_path: Path) -> None:
    """The real process: nothing but the one line on stderr (no log, no traceback)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(
        PYTHONPATH=str(REPO),
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STORE_BACKEND="sqlite",
        LEASEHOLD_TTL="P1Y",
    )
    done = subprocess.run(
        [sys.executable, "-m", "resources.cli.main", "status"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "leasehold: invalid lease store configuration: ttl: 'P1Y' is not an ISO-8601 duration "
        "such as 'P7D' or 'PT12H' (weeks, days, hours, minutes, seconds)"
    ]


def files_under(path: Path) -> list[Path]:
    return sorted(p for p in path.rglob("*"))


def test_status_in_an_empty_directory_creates_nothing_and_says_where_it_looked(
    monkeypatch, capsys, tmp_path: Path
) -> None:
    monkeypatch.delenv("LEASEHOLD_DATA_DIR")
    monkeypatch.chdir(tmp_path)
    for command in (["status"], ["status", "--json"], ["purge-expired"]):
        assert main(command) == 1
        out, err = capsys.readouterr()
        assert out == ""
        assert err.splitlines() == [
            f"leasehold: no lease store: SQLite file {tmp_path / 'data' / 'leasehold.db'} (the "
            "default under the working directory: LEASEHOLD_SQLITE_PATH and LEASEHOLD_DATA_DIR "
            "unset); `leasehold run` creates it"
        ]
    assert files_under(tmp_path) == []


def test_status_names_the_variable_that_set_the_path(monkeypatch, capsys, tmp_path: Path) -> None:
    assert main(["status"]) == 1
    assert "(LEASEHOLD_DATA_DIR; LEASEHOLD_SQLITE_PATH unset)" in capsys.readouterr().err
    monkeypatch.setenv("LEASEHOLD_SQLITE_PATH", str(tmp_path / "elsewhere" / "c.db"))
    assert main(["status"]) == 1
    assert f"{tmp_path / 'elsewhere' / 'c.db'} (LEASEHOLD_SQLITE_PATH);" in capsys.readouterr().err
    assert files_under(tmp_path) == []


def test_status_and_purge_use_an_existing_store(monkeypatch, capsys, tmp_path: Path) -> None:
    store = build_store(settings_from_env())
    sid = store.source_identifier("events")
    store.create_partitions(sid, ["a", "b"])
    store.close_store()
    assert main(["status", "--json"]) == 0
    (summary,) = json.loads(capsys.readouterr().out)["sources"]
    assert summary["sourceIdentifier"] == sid and summary["counts"]["UNASSIGNED"] == 2
    assert main(["purge-expired"]) == 0
    assert capsys.readouterr().out == "deleted 0 expired items\n"


def test_status_on_a_missing_dynamodb_table_creates_none(aws_server, monkeypatch, capsys) -> None:
    table = f"absent-{uuid.uuid4().hex[:8]}"
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "dynamodb")
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_TABLE", table)
    monkeypatch.setenv("LEASEHOLD_DYNAMODB_ENDPOINT_URL", aws_server.endpoint_url)
    assert main(["status"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"leasehold: no lease store: DynamoDB table {table!r} in us-east-1 at "
        f"{aws_server.endpoint_url} (LEASEHOLD_DYNAMODB_TABLE, LEASEHOLD_DYNAMODB_REGION, "
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL); `leasehold run` creates it"
    ]
    dynamodb = boto3.client("dynamodb", endpoint_url=aws_server.endpoint_url)
    assert table not in dynamodb.list_tables()["TableNames"]
