"""Crash tests with real processes, on both store backends (docs/architecture.md).

A child process runs the ingestion asset for one partition and is stopped at the dangerous
moment — objects published but not committed; committed but Dagster not told — by SIGKILL or
SIGSTOP. The verdict compares the table as readers see it (the ledger's objects) with the
records in the source file, an account independent of the store.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from dagster import materialize

from coordination_assets.ingestion import build_ingestion_asset, partitions_for
from resources.coordination import metrics as m
from resources.coordination.items import PartitionStatus
from resources.ingestion.partition_keys import to_partition_key
from resources.ingestion.sample_data import write_sample_sources
from resources.stores.settings import StoreSettings
from tests.support.aws_action_recorder import recorded_command
from tests.support.pipeline_env import STREAM, PipelineEnv, source_ids, write_streams

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 4.0


def pipeline(settings: StoreSettings, tmp_path: Path, objects: int) -> PipelineEnv:
    """`objects` source objects, discovered: lease items and dynamic partitions (`env.keys`,
    in order; `env.key` the first)."""
    sources = tmp_path / "sources"
    write_sample_sources(sources, objects=objects, records_per_object=300 // objects, days=1)
    streams = write_streams(
        tmp_path / "streams.yaml", f"file://{sources}", f"file://{tmp_path / 'lake'}"
    )
    env = PipelineEnv(tmp_path, settings, streams, ownership_timeout_s=TIMEOUT_S)
    store = env.store()
    keys = sorted(p.relative_to(sources).as_posix() for p in sources.rglob("*.jsonl"))
    store.create_partitions(store.source_identifier(STREAM), keys)
    env.instance().add_dynamic_partitions(
        partitions_for(STREAM).name, [to_partition_key(k) for k in keys]
    )
    env.keys, env.key = keys, keys[0]  # type: ignore[attr-defined]
    return env


@pytest.fixture
def env(backend: str, settings_for, tmp_path: Path, spark) -> PipelineEnv:
    return pipeline(settings_for(backend), tmp_path, objects=1)


def launch(
    env: PipelineEnv, marker: Path, pause_at: str, pause_s: float, **extra: Any
) -> subprocess.Popen:
    """The child (`tests.support.crash_child`); `extra` goes to it as is (a range run,
    `chunk_size`, `pause_nth`)."""
    args = json.loads(env.args())
    args.update(
        partition_key=to_partition_key(env.key),  # type: ignore[attr-defined]
        pause_at=pause_at,
        pause_s=pause_s,
        marker=str(marker),
        **extra,
    )
    return subprocess.Popen(
        recorded_command("tests.support.crash_child", json.dumps(args)),
        cwd=ROOT,
        env=os.environ.copy(),
    )


def wait_for(path: Path, proc: subprocess.Popen, limit_s: float = 120) -> None:
    deadline = time.monotonic() + limit_s
    while not path.exists():
        assert proc.poll() is None, f"child exited early with {proc.returncode}"
        assert time.monotonic() < deadline, f"no {path.name} after {limit_s} s"
        time.sleep(0.1)


def run_in_test_process(env: PipelineEnv):
    return materialize(
        [build_ingestion_asset(STREAM)],
        instance=env.instance(),
        resources=env.resources(),
        partition_key=to_partition_key(env.key),  # type: ignore[attr-defined]
        raise_on_error=False,
    )


def assert_exactly_once(env: PipelineEnv) -> None:
    expected = source_ids(env.root / "sources")
    seen = Counter(row["event_id"] for row in env.table_rows())
    assert seen == expected and set(seen.values()) == {1}


def orphans(env: PipelineEnv) -> set[str]:
    ledger = {o.url for o in env.store().ledger_objects(STREAM)}
    on_disk = {"file://" + str(p) for p in (env.root / "lake").rglob("*.parquet")}
    return on_disk - ledger


@pytest.fixture
def children():
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGCONT)
            p.kill()
        p.wait(30)


def test_kill_after_objects_written_before_commit(env: PipelineEnv, children, tmp_path) -> None:
    marker = tmp_path / "published"
    child = launch(env, marker, "published", 600)
    children.append(child)
    wait_for(marker, child)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    assert orphans(env), "the killed attempt left its objects behind"
    assert env.store().ledger_objects(STREAM) == []  # ... but none of them is table data
    time.sleep(TIMEOUT_S + 0.5)  # its lease expires
    result = run_in_test_process(env)
    assert result.success
    (mat,) = result.get_asset_materialization_events()
    assert mat.materialization.metadata["outcome"].value == "committed"
    assert mat.materialization.metadata["lease_epoch"].value == 2
    assert_exactly_once(env)
    assert orphans(env)  # still on disk, never read


def test_kill_after_commit_before_dagster_success(env: PipelineEnv, children, tmp_path) -> None:
    marker = tmp_path / "committed"
    child = launch(env, marker, "committed", 600)
    children.append(child)
    wait_for(marker, child)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    result = run_in_test_process(env)  # no need to wait: the lease is COMPLETED
    assert result.success
    (mat,) = result.get_asset_materialization_events()
    metadata = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert metadata["already_complete"] is True and metadata["outcome"] == "already_complete"
    assert "nothing to do" in metadata["message"] and metadata["recorded_before"] is False
    assert metadata["rows_written"] > 0 and metadata["small_objects"] > 0  # the commit's counts
    # Launched again (a backfill, a Materialize): recorded again, saying Dagster knew it.
    again = run_in_test_process(env)
    (mat,) = again.get_asset_materialization_events()
    repeated = {k: v.value for k, v in mat.materialization.metadata.items()}
    assert repeated == {**metadata, "recorded_before": True}
    assert_exactly_once(env)


def test_a_killed_run_loses_the_metrics_of_the_chunk_in_flight_only(
    backend: str, settings_for, tmp_path: Path, spark, children
) -> None:
    """The runner flushes the lease metrics after each chunk's commits (`_commit_chunk`), so
    after a SIGKILL the stored `partitionsCompleted` is short of the COMPLETED items by at most
    the commits of the chunk in flight (at most `chunk_size`). Here chunks of 2, 2 and 1, killed
    at the 4th commit: the second chunk is committed but not yet counted, exactly 2 short."""
    env = pipeline(settings_for(backend), tmp_path, objects=5)
    keys = [to_partition_key(k) for k in env.keys]  # type: ignore[attr-defined]
    # chunks of 2 one-object units: [2, 2, 1]
    marker = tmp_path / "committed"
    child = launch(
        env, marker, "committed", 600, partition_range=[keys[0], keys[-1]], chunk_size=2,
        pause_nth=4,
    )  # fmt: skip
    children.append(child)
    wait_for(marker, child)
    os.kill(child.pid, signal.SIGKILL)
    child.wait(30)
    store = env.store()
    sid = store.source_identifier(STREAM)
    completed = [i for i in store.iter_items(sid) if i.status is PartitionStatus.COMPLETED]
    counted = store.read_metrics().get(sid, {}).get(m.PARTITIONS_COMPLETED, 0)
    assert len(completed) == 4
    assert counted == len(completed) - 2  # the first chunk's, flushed before the second's
    store.close_store()


def test_zombie_commit_is_refused(env: PipelineEnv, children, tmp_path) -> None:
    marker = tmp_path / "zombie"
    zombie = launch(env, marker, "published", 1.0)  # pauses briefly; we freeze it there
    children.append(zombie)
    wait_for(marker, zombie)
    os.kill(zombie.pid, signal.SIGSTOP)
    time.sleep(TIMEOUT_S + 0.5)
    successor = run_in_test_process(env)
    assert successor.success
    os.kill(zombie.pid, signal.SIGCONT)  # it wakes up and tries to commit
    assert zombie.wait(120) == 0
    outcome = json.loads((tmp_path / "zombie.result").read_text())
    assert not outcome["success"] and outcome["materialized"] == []
    assert "lost the lease" in outcome["failures"][0]
    assert_exactly_once(env)
    (record_epoch,) = {o.epoch for o in env.store().ledger_objects(STREAM)}
    assert record_epoch == 2


def test_two_runs_at_once_exactly_one_commits(env: PipelineEnv, children, tmp_path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    a = launch(env, first, "published", 120.0)
    children.append(a)
    wait_for(first, a)  # a holds the lease and is about to commit
    b = launch(env, second, "published", 0.0)
    children.append(b)
    assert b.wait(120) == 0  # b tried while a held the lease, however slow its start was
    (tmp_path / "first.release").write_text("")
    assert a.wait(120) == 0
    out_a = json.loads((tmp_path / "first.result").read_text())
    out_b = json.loads((tmp_path / "second.result").read_text())
    assert out_a["success"] and len(out_a["materialized"]) == 1
    assert not out_b["success"] and "lost the lease: held by" in out_b["failures"][0]
    assert_exactly_once(env)


def test_settings_round_trip_for_children() -> None:
    settings = StoreSettings(sqlite_path="/x.db")
    assert StoreSettings(**json.loads(json.dumps(settings.__dict__))) == settings
