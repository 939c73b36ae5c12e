"""The data path over Spark Connect: the same reader (its tasks parse and write) and merge
writer, DataFrame API only, no SparkContext."""

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


def test_reader_and_merge_run_over_spark_connect(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.jsonl").write_text(
        '{"event_id": "e1", "amount": 1, "event_time": "2026-01-01T10:00:00Z"}\n'
        '{"event_id": "e2", "amount": "x", "event_time": "2026-01-02T10:00:00Z"}\n'
        '{"event_id": "e3", "amount": 2, "event_time": "2026-01-02T11:00:00Z"}\n'
    )
    (src / "b.jsonl.gz").write_text("not gzip")
    (src / "c.jsonl").write_text(
        '{"event_id": "e4", "amount": 3, "event_time": "2026-01-02T12:00:00Z"}\n'
        '{"event_id": "e5", "amount": 4, "event_time": "2026-01-02T09:00:00Z"}\n'
    )
    streams = write_streams(tmp_path / "streams.yaml", f"file://{src}", f"file://{tmp_path}/t")
    out = tmp_path / "out.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "tests.support.spark_connect_child",
            str(streams),
            str(src),
            str(tmp_path / "work"),
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
    # a.jsonl's and c.jsonl's objects of 2026-01-02 merged into one object, by event time
    assert results["merged"] == {
        "dt": "2026-01-02",
        "inputs": 2,
        "row_count": 3,
        "event_ids": ["e5", "e3", "e4"],
        "same_schema": True,
    }
