"""`jvm_output_to`: a process started inside it writes its stderr to the file for as long as it
lives (the JVM inherits the descriptor), while Python's stderr is back on the terminal after."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from resources.spark.session import jvm_output_to


def test_a_child_started_inside_keeps_writing_to_the_file(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    log = tmp_path / "logs" / "spark.log"
    with jvm_output_to(log):
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import sys, time; time.sleep(0.5); print('late', file=sys.stderr)",
            ]
        )
    print("after", file=sys.stderr)
    child.wait(30)
    assert log.read_text() == "late\n"
    captured = capfd.readouterr()
    assert "after" in captured.err and "late" not in captured.err


def test_without_a_file_nothing_is_redirected(capfd: pytest.CaptureFixture[str]) -> None:
    with jvm_output_to(None):
        subprocess.run([sys.executable, "-c", "import sys; print('here', file=sys.stderr)"])
    assert "here" in capfd.readouterr().err
