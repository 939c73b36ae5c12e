"""`leasehold check` on a stream really ingested (discovery tick, range run, Spark), on both
store backends: every check passes, an object nobody leased fails completeness (behind the
checks' memory, in a full audit), a ledger entry changed behind the store's back fails
reconciliation — exit 4, naming the check."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import boto3
import pytest
from dagster import materialize

from coordination_assets.ingestion import build_ingestion_asset
from resources.cli.exit_status import EXIT_CHECK_FAILED
from resources.cli.main import main
from resources.coordination.items import ATTR, LeaseItem
from resources.coordination.lease_store import LeaseStore
from resources.ingestion.sample_data import write_sample_sources
from tests.dagster.test_discovery_sensor import tick
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams

pytestmark = pytest.mark.slow


@pytest.fixture
def ingested(
    backend: str, settings_for, tmp_path: Path, spark, monkeypatch: pytest.MonkeyPatch
) -> PipelineEnv:
    """Four objects ingested the way `leasehold run` does it; the CLI's environment names the
    same streams file and store."""
    sources = tmp_path / "sources"
    write_sample_sources(sources, objects=4, records_per_object=40, malformed_every=37)
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}"
    )
    env = PipelineEnv(tmp_path, settings_for(backend), streams)
    instance, resources = env.instance(), env.resources()
    (run,) = tick(env, instance, resources, None).run_requests
    asset = build_ingestion_asset(STREAM)
    assert materialize([asset], instance=instance, resources=resources, tags=run.tags).success

    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    s = env.settings
    variables = {
        "LEASEHOLD_DATA_DIR": str(tmp_path / "data"),
        "LEASEHOLD_STREAMS": str(streams),
        "LEASEHOLD_STORE_BACKEND": s.backend,
        "LEASEHOLD_SQLITE_PATH": s.sqlite_path,
        "LEASEHOLD_DYNAMODB_TABLE": s.table_name,
        "LEASEHOLD_DYNAMODB_ENDPOINT_URL": s.endpoint_url,
    }
    for name, value in variables.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    return env


def lease_items(store: LeaseStore) -> list[LeaseItem]:
    """Every lease item but the checks' memory (`resources.ledger.check_scope`)."""
    return [i for i in store.iter_items() if not i.partition_key.startswith("check/")]


def partition_metrics(store: LeaseStore) -> dict[str, dict[str, int]]:
    """The store's counters but the global-state ones, which the checks' memory moves."""
    return {k: v for k, v in store.read_metrics().items() if not k.endswith("|global")}


def check(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, list[str]]:
    code = main(["check", *args])
    out, err = capsys.readouterr()
    assert err == ""
    return code, out.splitlines()


def corrupt_one_row_count(env: PipelineEnv) -> None:
    """One ledger entry of the table claims a row more than its object holds."""
    s = env.settings
    if s.backend == "sqlite":
        with sqlite3.connect(s.sqlite_path) as db:
            changed = db.execute(
                "UPDATE small_objects SET row_count = row_count + 1 WHERE tbl = ? AND "
                "object_id = (SELECT min(object_id) FROM small_objects WHERE tbl = ?) AND "
                "dt = (SELECT min(dt) FROM small_objects WHERE tbl = ?)",
                (STREAM, STREAM, STREAM),
            ).rowcount
        assert changed == 1
        return
    first = env.store().ledger_objects(STREAM)[0]
    dynamodb = boto3.client("dynamodb", endpoint_url=s.endpoint_url, region_name=s.region)
    dynamodb.update_item(
        TableName=s.table_name,
        Key={
            ATTR["sid"]: {"S": f"{STREAM}|{first.dt}|smallObjects"},
            ATTR["key"]: {"S": f"{first.object_id:019d}"},
        },
        UpdateExpression="SET rowCount = rowCount + :one",
        ConditionExpression="attribute_exists(rowCount)",
        ExpressionAttributeValues={":one": {"N": "1"}},
    )


def test_check_passes_then_fails_on_an_unleased_object_and_a_corrupt_ledger(
    ingested: PipelineEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    env = ingested
    store = env.store()
    before = (lease_items(store), partition_metrics(store))

    code, lines = check(capsys)
    assert code == 0, lines
    assert [line.split()[:3] for line in lines] == [
        ["PASS", STREAM, "rows_reconcile"],
        ["PASS", STREAM, "unique_record_ids"],
        ["PASS", STREAM, "lease_health"],
        ["PASS", STREAM, "source_completeness"],
        ["PASS", STREAM, "changed_sources"],
        ["PASS", STREAM, "merge_chain"],
        ["PASS", STREAM, "merged_objects_exist"],
        ["PASS", STREAM, "merged_rows"],
        ["PASS", STREAM, "merge_jobs"],
        ["PASS", STREAM, "manifest_entries_exist"],
        ["PASS", STREAM, "switch_coverage"],
        ["PASS", STREAM, "published_rows"],
        ["PASS", STREAM, "catalog_current"],
        ["PASS", STREAM, "served_files"],
        ["PASS", STREAM, "publication_lag"],
    ]
    assert lines[0].endswith("4 committed partitions reconcile (full audit)")
    # The first pass has no memory: a full audit.
    assert lines[3].endswith("all 4 source objects listed have a lease item (full audit)")
    # Nothing written but the checks' memory.
    assert (lease_items(store), partition_metrics(store)) == before

    # An object that landed after discovery ran, after its cursor: the next tick takes it.
    # The pass lists only after where the last one found everything held.
    new = "2026/01/09/part-new.jsonl"
    (env.root / "sources" / new).parent.mkdir(parents=True)
    (env.root / "sources" / new).write_text("{}\n")
    code, lines = check(capsys, "--stream", STREAM)
    assert code == 0, lines
    (warned,) = [line for line in lines if line.startswith("WARN")]
    assert warned.endswith(
        f"1 of 1 source objects have no lease item (0 behind the discovery cursor): {new}"
    )
    store.create_partitions(store.source_identifier(STREAM), [new])

    # One behind the cursor (a late file in a folder already listed): discovery never sees it,
    # and neither does a pass listing after its memory — a full audit does, and then every
    # pass is full until it is fixed.
    late = "2026/01/01/0-late.jsonl"
    (env.root / "sources" / late).write_text("{}\n")
    code, lines = check(capsys, "--stream", STREAM)
    assert code == 0, lines
    for args in (["--full"], []):
        code, lines = check(capsys, "--stream", STREAM, *args)
        assert code == EXIT_CHECK_FAILED
        (failed,) = [line for line in lines if line.startswith("FAIL")]
        assert failed.split()[:3] == ["FAIL", STREAM, "source_completeness"]
        assert failed.endswith(
            f"1 of 6 source objects have no lease item (1 behind the discovery cursor): {late}"
        )
    store.create_partitions(store.source_identifier(STREAM), [late])
    assert check(capsys)[0] == 0

    # Damage behind the ledger's back moves no partition row and completes no unit: the full
    # audit reads it (an incremental pass may not), and the pass after a failure is full again.
    corrupt_one_row_count(env)
    code, lines = check(capsys, "--full")
    assert code == EXIT_CHECK_FAILED
    (failed,) = [line for line in lines if line.startswith("FAIL")]
    assert failed.split()[:3] == ["FAIL", STREAM, "rows_reconcile"]
    assert "1 of 4 committed partitions do not reconcile" in failed

    code = main(["check", "--json"])
    rows = json.loads(capsys.readouterr().out)
    assert code == EXIT_CHECK_FAILED
    assert {r["check"]: r["verdict"] for r in rows} == {
        "rows_reconcile": "FAIL",
        "unique_record_ids": "PASS",
        "lease_health": "PASS",
        "source_completeness": "PASS",
        "changed_sources": "PASS",
        "merge_chain": "PASS",
        "merged_objects_exist": "PASS",
        "merged_rows": "PASS",
        "merge_jobs": "PASS",
        "manifest_entries_exist": "PASS",
        "switch_coverage": "PASS",
        "published_rows": "PASS",
        "catalog_current": "PASS",
        "served_files": "PASS",
        "publication_lag": "PASS",
    }
    assert rows[0]["metadata"]["mismatches"] == 1


@pytest.fixture
def streams_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    streams = write_streams(tmp_path / "streams.yaml", f"file://{tmp_path}/src", "file:///lake")
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(streams))
    return tmp_path


def test_check_without_a_store_creates_none(streams_only: Path, capsys) -> None:
    assert main(["check"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"leasehold: no lease store: SQLite file {streams_only / 'data' / 'leasehold.db'} "
        "(LEASEHOLD_DATA_DIR; LEASEHOLD_SQLITE_PATH unset); `leasehold run` creates it"
    ]
    assert sorted(p.name for p in streams_only.iterdir()) == ["streams.yaml"]


def test_check_of_an_unknown_stream_is_a_configuration_error(streams_only: Path, capsys) -> None:
    assert main(["check", "--stream", "nope"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "leasehold: invalid configuration: --stream: 'nope' is not a stream; the streams file "
        "has ['events']"
    ]


def test_help_documents_the_check_exit_codes(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    out = capsys.readouterr().out
    assert "4  a check failed" in out
    assert "3  `run`: some source partitions were not ingested" in out
