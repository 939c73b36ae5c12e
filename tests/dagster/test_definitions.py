"""The code location loads and validates, and its coordination asset and check run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from dagster import materialize

from coordination_assets.coordination_status import coordination_status, lease_health
from resources.coordination.backoff import ReopenBackoff
from resources.dagster_resources.coordination import CoordinationResource

ROOT = Path(__file__).resolve().parents[2]


def test_dagster_definitions_validate(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path), "LEASEHOLD_DATA_DIR": str(tmp_path)}
    dagster = Path(sys.executable).with_name("dagster")
    result = subprocess.run(
        [str(dagster), "definitions", "validate", "-w", "workspace.yaml"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "All code locations passed validation" in result.stdout + result.stderr


def test_coordination_status_asset_and_lease_health(tmp_path: Path) -> None:
    coordination = CoordinationResource(sqlite_path=str(tmp_path / "c.db"))
    store = coordination.store
    sid = coordination.source_identifier("events")
    store.create_partitions(sid, ["a", "b"])
    store.close(
        store.acquire(sid, "b", "w", 60).token, ReopenBackoff.fixed(60), 0, reason="unreadable: 404"
    )
    store.flush_metrics()
    result = materialize(
        [coordination_status, lease_health], resources={"coordination": coordination}
    )
    assert result.success
    (mat,) = result.asset_materializations_for_node("coordination_status")
    assert mat.metadata["events|partition/UNASSIGNED"].value == 1
    assert mat.metadata["events|partition/partitionsClosed"].value == 1
    (check,) = result.get_asset_check_evaluations()
    assert not check.passed and check.metadata["dead_letters"].value == 1
