"""`leasehold run` SIGKILLed where the chaos test's kills rarely land: in its Dagster bookkeeping.

The chaos test kills while the store shows ingestion under way. These kill at the two moments
when a run exists in the Dagster instance but no lease shows it: right after `leasehold run`
created an ingestion run, before the run started (a NOT_STARTED run looks queued: every later
tick left its partitions to it, so no invocation ever ingested them again), and during the run
of the asset checks (it carried no stream tag, so no tick looked at it: STARTED forever). The
next plain `leasehold run` must mark the dead run failed and leave nothing undone.

The test watches the instance from its own process and kills the moment the run is seen; the
instance, read afterwards, says whether the kill landed in that state (a run that got past it
first is tried again in a fresh project). Dagster's bookkeeping does not depend on the lease
store, so SQLite only.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from dagster import DagsterInstance, DagsterRunStatus, RunsFilter

from resources.coordination.items import PartitionStatus
from resources.dagster_resources.runs import STREAM_TAG
from tests.support.cli_project import CliProject, cli_project, kill_group
from tests.support.pipeline_env import STREAM

pytestmark = pytest.mark.slow

ATTEMPTS = 3
IN_FLIGHT = [
    DagsterRunStatus.NOT_STARTED,
    DagsterRunStatus.STARTING,
    DagsterRunStatus.STARTED,
    DagsterRunStatus.CANCELING,
]


@pytest.fixture
def projects(tmp_path: Path) -> Iterator[Callable[[], CliProject]]:
    made: list[CliProject] = []

    def make() -> CliProject:
        made.append(
            cli_project(
                tmp_path / f"project-{len(made)}",
                "sqlite",
                objects=10,
                records_per_object=20,
                malformed_every=0,
                chunk_size=25,
                lease_timeout_s=5.0,
            )
        )
        return made[-1]

    yield make
    for project in made:
        project.stop_children()


@dataclass(frozen=True)
class SeenRun:
    run_id: str
    status: DagsterRunStatus
    tags: dict[str, str]


def runs_now(runs_db: Path) -> list[SeenRun]:
    """The newest runs, read straight from the run storage's SQLite file, read-only: opening a
    `DagsterInstance` while the command creates its storage races it (both stamp the schema
    version of a fresh schedule storage, which then has two heads)."""
    if not runs_db.exists():
        return []
    try:
        with closing(sqlite3.connect(f"file:{runs_db}?mode=ro", uri=True, timeout=1)) as db:
            rows = db.execute("SELECT run_id, status FROM runs ORDER BY id DESC LIMIT 5").fetchall()
            return [
                SeenRun(
                    run_id,
                    DagsterRunStatus(status),
                    dict(db.execute("SELECT key, value FROM run_tags WHERE run_id = ?", (run_id,))),
                )
                for run_id, status in rows
            ]
    except sqlite3.OperationalError:  # no tables yet, or locked for a moment
        return []


def kill_when_seen(
    project: CliProject, wanted: Callable[[SeenRun], bool], limit_s: float = 150
) -> str | None:
    """Start `leasehold run` and SIGKILL it the moment one of its runs is `wanted`; that run's
    id, or None if the command ended first."""
    proc = project.start("run")
    deadline = time.monotonic() + limit_s
    runs_db = project.dagster_home / "history" / "runs.db"
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"no such run after {limit_s} s"
        seen = next((run for run in runs_now(runs_db) if wanted(run)), None)
        if seen is not None:
            kill_group(proc)
            return seen.run_id
        time.sleep(0.005)
    return None


def status_of(project: CliProject, run_id: str) -> DagsterRunStatus:
    with DagsterInstance.from_config(str(project.dagster_home)) as instance:
        run = instance.get_run_by_id(run_id)
        assert run is not None
        return run.status


def kill_in_state(
    projects: Callable[[], CliProject],
    wanted: Callable[[SeenRun], bool],
    state: DagsterRunStatus,
) -> tuple[CliProject, str]:
    """A project whose `leasehold run` was killed while one of its runs was `wanted`, and
    left in `state`; that run's id."""
    for _ in range(ATTEMPTS):
        project = projects()
        run_id = kill_when_seen(project, wanted)
        if run_id is not None and status_of(project, run_id) is state:
            return project, run_id
    pytest.fail(f"no kill landed while a run was {state.value} in {ATTEMPTS} attempts")


def assert_recovered(project: CliProject, killed: str) -> None:
    """The next plain `leasehold run` marks the killed run failed and ingests everything."""
    code, output = project.run("run")
    assert code == 0, output
    with DagsterInstance.from_config(str(project.dagster_home)) as instance:
        in_flight = instance.get_runs(RunsFilter(statuses=IN_FLIGHT))
        assert not in_flight, [(r.run_id, r.status, dict(r.tags)) for r in in_flight]
        run = instance.get_run_by_id(killed)
        assert run is not None and run.status is DagsterRunStatus.FAILURE
    store = project.store()
    try:
        items = list(store.iter_items(store.source_identifier(STREAM)))
    finally:
        store.close_store()
    assert len(items) == 10
    assert {i.status for i in items} == {PartitionStatus.COMPLETED}, output


def test_killed_after_creating_its_run_before_starting_it(projects) -> None:
    project, killed = kill_in_state(
        projects,
        lambda run: STREAM_TAG in run.tags and run.status is DagsterRunStatus.NOT_STARTED,
        DagsterRunStatus.NOT_STARTED,
    )
    assert_recovered(project, killed)


def test_killed_during_its_checks_run(projects) -> None:
    project, killed = kill_in_state(
        projects,
        lambda run: STREAM_TAG not in run.tags and run.status is DagsterRunStatus.STARTED,
        DagsterRunStatus.STARTED,
    )
    assert_recovered(project, killed)
