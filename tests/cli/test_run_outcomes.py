"""`leasehold run` as a user runs it: what it prints and its exit status when some partitions
fail, and that the next run retries them without redoing the rest."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resources.coordination.items import PartitionStatus, iso_utc
from resources.ingestion.sample_data import write_sample_sources
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support.pipeline_env import source_ids, write_streams

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def leasehold(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(
        PYTHONPATH=str(REPO),
        SPARK_LOCAL_IP="127.0.0.1",
        LEASEHOLD_DATA_DIR=str(tmp_path / "data"),
        LEASEHOLD_STREAMS=str(tmp_path / "streams.yaml"),
        DAGSTER_HOME=str(tmp_path / "dagster_home"),
        **extra,
    )
    return subprocess.run(
        [sys.executable, "-m", "resources.cli.main", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def audit(stdout: str) -> str:
    (line,) = [line for line in stdout.splitlines() if line.startswith("events audit: ")]
    return line


def closed_reopen_at(tmp_path: Path) -> str:
    """When the stream's one CLOSED unit reopens, as the store says it."""
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "data" / "leasehold.db")))
    try:
        sid = store.source_identifier("events")
        (closed,) = [i for i in store.iter_items(sid) if i.status is PartitionStatus.CLOSED]
        return iso_utc(closed.reopen_at_ms)
    finally:
        store.close_store()


def test_a_run_with_an_unreadable_object_lists_it_and_exits_3(tmp_path: Path) -> None:
    sources = tmp_path / "sources"
    write_sample_sources(sources, objects=3, records_per_object=20, days=1)
    (sources / "2026/01/01/zz-broken.jsonl.gz").write_text("not gzip at all\n")
    write_streams(tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}")

    # The first close waits 30 to 60 min: the second run comes before it, however slow.
    done = leasehold(tmp_path, "run", LEASEHOLD_REOPEN_AFTER_SECONDS="3600")
    assert done.returncode == 3, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("leasehold:")]
    (failed,) = [line for line in lines if "not ingested" in line]
    assert failed.startswith("leasehold: not ingested: 2026/01/01/zz-broken.jsonl.gz: unreadable")
    assert "named .gz but is not gzip data" in failed and "retr" in failed
    assert "Traceback" not in done.stderr
    assert "1 run ingested 3 units" in done.stdout

    again = leasehold(tmp_path, "run", LEASEHOLD_REOPEN_AFTER_SECONDS="3600")
    # Its CLOSED item reopens only after its backoff: nothing is redone, nothing new fails —
    # and the run says what waits and when, not that nothing is new.
    assert again.returncode == 0, again.stderr
    assert "nothing new:" not in again.stdout
    waits = (
        "nothing ingested now: 1 unit CLOSED after a failed read reopens at "
        f"{closed_reopen_at(tmp_path)} (in "
    )
    assert f"events > discovery and ingestion: {waits}" in again.stdout
    assert f"events: {waits}" in again.stdout  # the audit line says the same
    assert "leasehold status lists them; no source object ingested twice" in again.stdout


def test_a_dead_letter_fixed_and_redriven_is_ingested_once(tmp_path: Path) -> None:
    """The operations guide's re-drive, end to end: a unit of four objects, one not gzip
    data, dead-lettered at its first failure after the other three committed; the object is
    fixed, `leasehold redrive` puts the unit back, and the next run reads only that object:
    every record is in the published table once, and the checks pass."""
    sources = tmp_path / "sources"
    write_sample_sources(sources, objects=3, records_per_object=20, days=1)
    broken = sources / "2026/01/01/zz-broken.jsonl.gz"
    broken.write_text("not gzip at all\n")
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}", {}
    )
    assert streams.read_text()  # default unit sizes: the four objects are one unit
    dead = leasehold(tmp_path, "run", LEASEHOLD_MAX_CLOSED_COUNT="0")
    assert dead.returncode == 3, dead.stderr
    assert "dead-lettered after 1 failed reads" in dead.stderr
    assert "its readable objects committed (60 rows in all)" in dead.stderr
    # Those 60 rows are this run's commits, though its unit did not complete: not "earlier
    # runs' commits published now".
    assert audit(dead.stdout) == (
        "events audit: 60 source records read - 0 quarantined = 60 rows committed = 60 rows "
        "published now; duplicates 0, losses 0"
    )
    # A dead letter is not retried; `lease_health` warns of it, which, as in `leasehold check`,
    # is said but does not fail the run.
    idle = leasehold(tmp_path, "run")
    assert idle.returncode == 0, idle.stderr
    assert "nothing new: every source object listed is already ingested" in idle.stdout
    assert "checks: 14 of 15 passed, 1 warned: lease_health" in idle.stdout
    assert idle.stderr.splitlines() == [
        "leasehold: check warned: lease_health (details: leasehold check)"
    ]

    fixed = [
        json.dumps(
            {
                "event_id": f"fixed-{n}",
                "user_id": "u",
                "amount": 1.0,
                "event_time": f"2026-01-01T2{n}:00:00Z",
            }
        )
        for n in range(3)
    ]
    broken.write_bytes(gzip.compress(("\n".join(fixed) + "\n").encode()))
    redrive = leasehold(tmp_path, "redrive", "events", "--all")
    assert redrive.returncode == 0, redrive.stderr
    assert "re-driven '2026/01/01/part-00000.jsonl'" in redrive.stdout
    again = leasehold(tmp_path, "run")
    assert again.returncode == 0, again.stderr
    assert "1 run ingested 1 unit:" in again.stdout
    # The unit's totals are 63 rows; this run committed (and published) the fixed object's 3.
    assert audit(again.stdout) == (
        "events audit: 3 source records read - 0 quarantined = 3 rows committed = 3 rows "
        "published now; duplicates 0, losses 0"
    )

    read = leasehold(tmp_path, "table", "read", "events", "2026-01-01", "--json")
    assert read.returncode == 0, read.stderr
    ids = [json.loads(line)["event_id"] for line in read.stdout.splitlines()]
    assert sorted(ids) == sorted([*source_ids(sources), *(f"fixed-{n}" for n in range(3))])
    check = leasehold(tmp_path, "check", "--full")
    assert check.returncode == 0, check.stdout


def test_a_late_object_is_ingested_after_the_next_reconciliation(tmp_path: Path) -> None:
    """A file that lands behind the discovery cursor (yesterday's folder, after today's was
    listed): `leasehold check --full` fails on it (a plain pass lists only after the key it last
    found held), the next reconciliation pass ingests it, and then the check passes — also
    when the pass needs several ticks to reach it (one object listed per tick here: `leasehold
    run` once stopped after the pass's first step found nothing)."""
    sources = tmp_path / "sources"
    write_sample_sources(sources, objects=3, records_per_object=20, days=1)
    write_streams(tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}")
    assert leasehold(tmp_path, "run").returncode == 0
    assert leasehold(tmp_path, "check").returncode == 0

    keys = sorted(str(p.relative_to(sources)) for p in sources.rglob("*") if p.is_file())
    late = keys[1] + "-late.jsonl"  # between the second and third keys already listed
    (sources / late).write_text(
        '{"event_id": "late-1", "user_id": "u", "amount": 1, '
        '"event_time": "2026-01-01T01:00:00Z"}\n'
    )
    assert leasehold(tmp_path, "check").returncode == 0  # behind what the last pass listed
    before = leasehold(tmp_path, "check", "--full")
    assert before.returncode == 4
    assert "FAIL" in before.stdout and late in before.stdout

    # The pass of the first run ended; with the default interval the next one is 15 min away.
    done = leasehold(
        tmp_path,
        "run",
        "--verbose",  # the stage lines too, among the details (they were dropped)
        LEASEHOLD_RECONCILE_INTERVAL_SECONDS="0",
        LEASEHOLD_MAX_OBJECTS_PER_TICK="1",
    )
    assert done.returncode == 0, done.stderr
    assert "events > discovery and ingestion: " in done.stdout
    assert "1 run ingested 1 unit:" in done.stdout
    after = leasehold(tmp_path, "check")
    assert after.returncode == 0, after.stdout
