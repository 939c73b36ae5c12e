"""What `leasehold run` says it committed and what waits, where its runs could not say it.

The audit counts what this invocation committed from the ledger: a run that crashed between a
commit and its report (the last of `CRASHES_IN_A_ROW`, after which no tick records its commits)
committed rows that are this invocation's, not "earlier runs' commits published now". And a
run that ingested nothing says "nothing new" only when no unit waits; otherwise it names what
waits and when.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dagster import Definitions

from coordination_assets.ingestion_pass import CRASHES_IN_A_ROW
from coordination_assets.main_job import run_stream
from coordination_assets.run_report import ingestion_line
from resources.cli.story import audit_line
from resources.coordination.backoff import ReopenBackoff
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.lake import LakeResource
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.runner import IngestionRunner
from resources.ingestion.sample_data import write_sample_sources
from resources.stores.settings import StoreSettings
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams


class CrashingLake(LakeResource):
    """Every unit's commit is followed by the run's crash (an executor lost, say): the unit is
    COMPLETED in the store, its outcome never reaches Dagster, the chunk's other leases are
    handed back and the next tick asks for them in a new run."""

    def ingestion_runner(
        self,
        stream: str,
        coordination: CoordinationResource,
        spark: SparkResource,
        owner: str,
        on_step: Callable[[str, str], None] | None = None,
    ) -> IngestionRunner:
        def crash(step: str, key: str) -> None:
            if step == "committed":
                raise RuntimeError(f"the driver lost its executors after committing {key!r}")

        return super().ingestion_runner(stream, coordination, spark, owner, on_step=crash)


def pipeline(tmp_path: Path, lake: LakeResource | None = None) -> tuple[PipelineEnv, Definitions]:
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{tmp_path / 'sources'}", f"file://{tmp_path / 'lake'}"
    )
    env = PipelineEnv(tmp_path, StoreSettings(sqlite_path=str(tmp_path / "c.db")), streams)
    resources = env.resources()
    if lake is not None:
        resources["lake"] = lake
    return env, Definitions(resources=resources)


def test_rows_a_crashed_run_committed_are_this_runs_own(tmp_path: Path, spark) -> None:
    write_sample_sources(tmp_path / "sources", objects=CRASHES_IN_A_ROW, records_per_object=7)
    lake = CrashingLake(
        streams_path=str(tmp_path / "streams.yaml"), work_dir=str(tmp_path / "work")
    )
    env, defs = pipeline(tmp_path, lake)
    lines: list[str] = []
    report = run_stream(defs, env.instance(), STREAM, log=lines.append)

    # Each run committed one unit and crashed; the last one's commit was recorded by no tick.
    assert len(report.crashed_runs) == CRASHES_IN_A_ROW, lines
    assert report.recorded == CRASHES_IN_A_ROW - 1, lines
    committed = sum(o.row_count for o in env.store().ledger_objects(STREAM))
    assert committed == 7 * CRASHES_IN_A_ROW
    assert sum(report.published_now().values()) == committed
    assert audit_line(STREAM, report) == (
        f"{STREAM} audit: {committed} source records read - 0 quarantined = {committed} rows "
        f"committed = {committed} rows published now; duplicates 0, losses 0"
    )
    assert f"{committed} committed" in ingestion_line(report)


def test_a_run_that_ingests_nothing_names_what_waits(tmp_path: Path) -> None:
    (tmp_path / "sources").mkdir()
    env, defs = pipeline(tmp_path)
    store = env.store()
    sid = store.source_identifier(STREAM)
    store.create_partitions(sid, ["closed.jsonl", "held.jsonl", "free.jsonl"])
    store.acquire(sid, "held.jsonl", "another-run", 600)
    closing = store.acquire(sid, "closed.jsonl", "another-run", 600)
    store.close(closing.token, ReopenBackoff.fixed(3600), max_closed_count=5, reason="not gzip")
    lines: list[str] = []
    report = run_stream(defs, env.instance(), STREAM, log=lines.append)

    line = ingestion_line(report)
    assert line.startswith("nothing ingested now: 1 unit CLOSED after a failed read reopens at ")
    assert "; 1 unit held by another owner's lease until " in line
    assert line.endswith("; 1 unit UNASSIGNED that no run took yet; leasehold status lists them")
    assert "nothing new" not in line
    # The audit says the same, not that nothing is new.
    assert audit_line(STREAM, report) == (
        f"{STREAM}: {line}; no source object ingested twice, the table unchanged"
    )


def test_a_run_that_ingests_nothing_and_finds_nothing_waiting_says_nothing_new(
    tmp_path: Path,
) -> None:
    (tmp_path / "sources").mkdir()
    env, defs = pipeline(tmp_path)
    report = run_stream(defs, env.instance(), STREAM, log=[].append)
    assert ingestion_line(report) == "nothing new: every source object listed is already ingested"
    assert audit_line(STREAM, report) == (
        f"{STREAM}: nothing new: no source object ingested twice, the table unchanged"
    )
