"""The data path over Spark Connect: the same reader, DataFrame API only, no SparkContext."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.pipeline_env import write_streams

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def test_reader_runs_over_spark_connect(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text(
        '{"event_id": "e1", "amount": 1, "event_time": "2026-01-01T10:00:00Z"}\n'
        '{"event_id": "e2", "amount": "x", "event_time": "2026-01-02T10:00:00Z"}\n'
        '{"event_id": "e3", "amount": 2, "event_time": "2026-01-02T11:00:00Z"}\n'
    )
    (src / "b.jsonl.gz").write_text("not gzip")
    streams = write_streams(tmp_path / "streams.yaml", f"file://{src}", f"file://{tmp_path}/t")
    out = tmp_path / "out.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.spark_connect_child",
            str(streams),
            str(src),
            str(tmp_path / "staging"),
            str(out),
        ],
        cwd=ROOT,
        env=os.environ.copy(),
        check=True,
        timeout=600,
    )
    results = json.loads(out.read_text())
    assert results["a.jsonl"] == {
        "rows_read": 3,
        "rows_quarantined": 1,
        "dts": ["2026-01-01", "2026-01-02"],
        "unreadable": None,
    }
    assert results["b.jsonl.gz"]["unreadable"] == "named .gz but is not gzip data"
