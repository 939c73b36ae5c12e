"""`workspace.yaml` loads the code location from the project, wherever Dagster is started."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.slow


def test_the_code_location_loads_from_another_directory(tmp_path: Path) -> None:
    """Started elsewhere (here: an empty directory, no streams.yaml), the code location still
    finds the project's streams.yaml: the workspace pins its working directory."""
    home = tmp_path / "dagster_home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEASEHOLD_")}
    env.update(DAGSTER_HOME=str(home), LEASEHOLD_DATA_DIR=str(tmp_path / "data"))
    env.pop("PYTHONPATH", None)  # the workspace alone must make the project importable
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "dagster",
            "definitions",
            "validate",
            "-w",
            str(ROOT / "workspace.yaml"),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Validation successful for code location leasehold" in done.stdout + done.stderr
    assert not (tmp_path / "streams.yaml").exists()
