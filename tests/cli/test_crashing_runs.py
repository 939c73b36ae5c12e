"""`leasehold run` when its runs crash one after the other (the run itself fails, not a unit:
Spark's executors lack a library, say): it stops after a few instead of asking for the same
failing run again and again, and says each distinct failure once, with how many runs hit it."""

from __future__ import annotations

from typing import Any

import pytest
from dagster import RunRequest, SensorResult

from coordination_assets import ingestion_pass
from coordination_assets.run_report import MainJobReport
from resources.cli.exit_status import EXIT_FAILURE
from resources.cli.run import run_outcome


def test_runs_that_keep_crashing_stop_after_a_few(monkeypatch: pytest.MonkeyPatch) -> None:
    def ticks(*args: Any, **kwargs: Any) -> Any:
        n = 0
        while True:  # the sensor hands the failed units back in a new run, every tick
            n += 1
            yield SensorResult(run_requests=[RunRequest(run_key=f"r{n}", partition_key="k")])

    executed: list[str] = []

    def crash(run: RunRequest, *args: Any) -> bool:
        executed.append(str(run.run_key))
        report.crashed_runs.append("ModuleNotFoundError: No module named 'pyarrow'")
        return True

    monkeypatch.setattr(ingestion_pass, "sensor_ticks", ticks)
    monkeypatch.setattr(ingestion_pass, "build_discovery_sensor", lambda stream: None)
    monkeypatch.setattr(ingestion_pass, "partitions_for", lambda stream: None)
    monkeypatch.setattr(ingestion_pass, "_execute_ingestion_run", crash)
    report = MainJobReport()
    lines: list[str] = []
    ingestion_pass.run_ingestion(None, None, {}, "events", report, 100, lines.append, None)  # type: ignore[arg-type]  # stand-ins: the sensor and runs are patched

    assert executed == ["r1", "r2", "r3"]
    assert "3 runs in a row crashed" in lines[-1]


def test_the_same_crash_is_said_once_with_its_count(capsys: pytest.CaptureFixture[str]) -> None:
    report = MainJobReport()
    report.crashed_runs += ["ModuleNotFoundError: pyarrow"] * 3 + ["OSError: disk full"]
    assert run_outcome([report]) == EXIT_FAILURE
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "leasehold: run failed (3 runs): ModuleNotFoundError: pyarrow",
        "leasehold: run failed: OSError: disk full",
    ]
