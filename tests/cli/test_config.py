"""`leasehold config`: every setting with its variable, value and source; each documented
variable set through the real command, one process per variable."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from resources.cli.config import DECLARATIONS, FROM_DEFAULT, FROM_ENV
from resources.cli.main import main
from resources.settings import declared
from tests.support.settings_samples import Variable, documented_variables, invalid, sample

REPO = Path(__file__).resolve().parents[2]
VARIABLES = documented_variables()
CHECKED = [v for v in VARIABLES if invalid(v) is not None]


def leasehold_config(tmp_path: Path, variables: dict[str, str]) -> subprocess.CompletedProcess:
    """`leasehold config --json` in its own process, from the repository root (its
    `streams.yaml` is the default), with no environment but `variables` and a data directory."""
    env = {"PYTHONPATH": str(REPO), "LEASEHOLD_DATA_DIR": str(tmp_path / "data"), **variables}
    return subprocess.run(
        [sys.executable, "-m", "resources.cli.main", "config", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def by_field(output: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(s["declaration"], s["field"]): s for s in output["settings"]}


def test_every_declared_setting_is_shown_with_its_default(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [n for n in os.environ if n.startswith("LEASEHOLD_")]:
        monkeypatch.delenv(name)
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    assert main(["config", "--json"]) == 0
    output = json.loads(capsys.readouterr().out)
    shown = by_field(output)
    expected = [(d.__name__, f.name) for d in DECLARATIONS for f in declared(d)]
    assert list(shown) == expected
    for declaration in DECLARATIONS:
        for f in declared(declaration):
            row = shown[declaration.__name__, f.name]
            assert (row["value"], row["source"]) == (f.default, FROM_DEFAULT)
            assert row["variable"] == f.metadata.get("env")
    assert output["streams"] == ["events"] and output["dataDir"] == str(tmp_path / "data")
    assert main(["config"]) == 0
    text = capsys.readouterr().out
    assert "StoreSettings.backend" in text and "LEASEHOLD_STORE_BACKEND" in text
    assert "TimingSettings.reopen_max_seconds" in text and "streams: events" in text


@pytest.mark.parametrize("variable", VARIABLES, ids=str)
def test_each_variable_takes_effect(variable: Variable, tmp_path: Path) -> None:
    raw, value = sample(variable, tmp_path)
    done = leasehold_config(tmp_path, {variable.name: raw})
    assert done.returncode == 0, done.stderr
    output = json.loads(done.stdout)
    shown = by_field(output)
    row = shown.pop((variable.declaration.__name__, variable.field))
    assert (row["variable"], row["value"], row["source"]) == (variable.name, value, FROM_ENV)
    assert {s["source"] for s in shown.values()} == {FROM_DEFAULT}  # that one, nothing else
    if variable.name == "LEASEHOLD_STREAMS":
        assert output["streams"] == ["clicks"]


@pytest.mark.parametrize("variable", CHECKED, ids=str)
def test_an_invalid_value_exits_2_naming_the_field(variable: Variable, tmp_path: Path) -> None:
    raw, context = invalid(variable)  # type: ignore[misc]
    done = leasehold_config(tmp_path, {**context, variable.name: raw})
    assert done.returncode == 2, (
        f"{variable}={raw!r} was accepted; if that is a valid value, give an invalid one in "
        f"tests/support/settings_samples.py INVALID\n{done.stdout}"
    )
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith("leasehold: invalid ") and f": {variable.field}: " in line


def test_an_unreadable_streams_file_exits_2(tmp_path: Path) -> None:
    """The streams file is loaded too: what fails the code location fails here."""
    done = leasehold_config(tmp_path, {"LEASEHOLD_STREAMS": str(tmp_path / "missing.yaml")})
    assert done.returncode == 2
    assert done.stderr.startswith("leasehold: invalid configuration of stream '-': streams: ")
