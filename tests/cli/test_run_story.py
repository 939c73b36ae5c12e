"""README command 1 as a new user meets it: `leasehold run` on the project's own streams file
and an empty source directory writes the sample, says what each stage did without Spark's,
Java's or the libraries' noise, and ends with the table and an audit that adds up — checked
here against the published table as a query engine reads it. A second run says, in one line,
that it ingested nothing."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
NOISE = ("WARN", "log4j", "incubator", "FutureWarning", "BetaWarning", "PreviewWarning")
AUDIT = re.compile(
    r"events audit: ([\d,]+) source records read - ([\d,]+) quarantined = ([\d,]+) rows "
    r"committed = ([\d,]+) rows published now; duplicates (\d+), losses (\d+)$"
)

pytestmark = pytest.mark.slow


def leasehold(project: Path, *args: str, **settings: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(PYTHONPATH=str(REPO), SPARK_LOCAL_IP="127.0.0.1", **settings)
    return subprocess.run(
        [sys.executable, "-m", "resources.cli.main", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def number(text: str) -> int:
    return int(text.replace(",", ""))


def test_the_main_job_tells_the_story_quietly_and_its_audit_adds_up(tmp_path: Path) -> None:
    # The project's own streams file, as a fresh clone has it (paths relative to it).
    shutil.copy(REPO / "streams.yaml", tmp_path / "streams.yaml")

    first = leasehold(tmp_path, "run", "--sample-objects", "40")
    output = first.stdout + first.stderr
    assert first.returncode == 0, output
    assert not [line for line in output.splitlines() if any(n in line for n in NOISE)], output
    assert "keys with spaces" in first.stdout and "gzipped" in first.stdout
    for stage in ("discovery and ingestion", "closing and merges", "publication", "checks"):
        assert re.search(rf"^events > {stage}: .+ \([\d.]+ s\)$", first.stdout, re.M), output
    assert "checks: all 16 passed" in first.stdout
    # Spark's own log went to the default file instead.
    assert "NativeCodeLoader" in (tmp_path / "data" / "logs" / "spark.log").read_text()

    (audit,) = [m for m in map(AUDIT.match, first.stdout.splitlines()) if m]
    read, quarantined, committed, published, duplicates, losses = map(number, audit.groups())
    assert read == 40 * 40 and quarantined == 1  # the sample: 1,600 records, one truncated
    assert committed == published == read - quarantined and duplicates == losses == 0

    # What the audit says, read from the published table as an engine reads it.
    dates = json.loads(leasehold(tmp_path, "table", "ls", "events", "--json").stdout)
    ids: list[str] = []
    for partition in dates:
        files = leasehold(tmp_path, "table", "files", "events", partition["dt"], "--json")
        for entry in json.loads(files.stdout)["files"]:
            path = entry["url"].removeprefix("file://")
            ids += pq.read_table(path, columns=["event_id"]).column("event_id").to_pylist()
    assert len(ids) == len(set(ids)) == published

    again = leasehold(tmp_path, "run")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "events: nothing new: no source object ingested twice, the table unchanged" in (
        again.stdout.splitlines()
    )
    assert "nothing new: every source object listed is already ingested" in again.stdout


def test_the_main_job_on_dagsters_own_event_log_then_on_leaseholds_again(tmp_path: Path) -> None:
    """The fast event log turned off (`LEASEHOLD_EVENT_LOG=dagster`, docs/dagster-internals.md):
    the main job runs on Dagster's own SQLite storage; turned on again over the same instance,
    the next run finds everything ingested — each storage read what the other wrote."""
    shutil.copy(REPO / "streams.yaml", tmp_path / "streams.yaml")
    home = tmp_path / "data" / "dagster_home"

    first = leasehold(tmp_path, "run", "--sample-objects", "20", LEASEHOLD_EVENT_LOG="dagster")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "checks: all 16 passed" in first.stdout, first.stdout
    (audit,) = [m for m in map(AUDIT.match, first.stdout.splitlines()) if m]
    assert audit.group(5, 6) == ("0", "0"), first.stdout  # duplicates, losses
    assert yaml.safe_load((home / "dagster.yaml").read_text())["storage"] == {
        "sqlite": {"base_dir": str(home.resolve())}
    }
    assert list((home / "history" / "runs").glob("*.db"))  # Dagster's layout and files

    again = leasehold(tmp_path, "run")
    assert again.returncode == 0, again.stdout + again.stderr
    assert "events: nothing new: no source object ingested twice, the table unchanged" in (
        again.stdout.splitlines()
    ), again.stdout
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert config["event_log_storage"]["class"] == "PooledSqliteEventLogStorage"
