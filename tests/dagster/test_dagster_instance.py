"""The embedded default instance's event log: Dagster's data, read and followed as Dagster does.

No `from __future__ import annotations`: this file defines a Dagster asset.
"""

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from dagster import (
    AssetExecutionContext,
    AssetMaterialization,
    BackfillPolicy,
    DagsterInstance,
    DynamicPartitionsDefinition,
    EventLogEntry,
    asset,
    materialize,
)
from dagster._core.storage.event_log import SqliteEventLogStorage

from resources.dagster_resources.dagster_internals import (
    MAX_OPEN_RUN_SHARDS,
    PooledSqliteEventLogStorage,
)
from resources.dagster_resources.instance import write_instance_yaml

ROOT = Path(__file__).resolve().parents[2]
sources = DynamicPartitionsDefinition(name="sources")


@asset(partitions_def=sources, backfill_policy=BackfillPolicy.single_run(), output_required=False)
def ingested(context: AssetExecutionContext):
    for key in context.partition_keys:
        yield AssetMaterialization(asset_key=context.asset_key, partition=key, metadata={"k": key})


def dagster_default_instance(home: Path) -> DagsterInstance:
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    return DagsterInstance.from_config(str(home))


def leasehold_instance(home: Path) -> DagsterInstance:
    write_instance_yaml(home, "pooled")
    return DagsterInstance.from_config(str(home))


def materialize_range(instance: DagsterInstance, keys: list[str]) -> None:
    instance.add_dynamic_partitions(sources.name, keys)
    result = materialize(
        [ingested],
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
    )
    assert result.success


def log(instance: DagsterInstance, run_id: str, message: str) -> None:
    instance.report_engine_event(message, run_id=run_id, job_name="job")


def messages(storage: SqliteEventLogStorage, run_id: str) -> list[str]:
    return [
        r.event_log_entry.dagster_event.message for r in storage.get_records_for_run(run_id).records
    ]


def materialized(instance: DagsterInstance) -> list[str]:
    records = instance.fetch_materializations(ingested.key, limit=1000).records
    return sorted(r.partition_key for r in records if r.partition_key)


@pytest.mark.parametrize("writer_is_leasehold", [True, False], ids=["leasehold", "dagster"])
def test_an_instance_reads_the_same_with_either_event_log_storage(
    tmp_path: Path, writer_is_leasehold: bool
) -> None:
    """Switching storages (or going back to Dagster's default) loses no history."""
    writer, reader = (leasehold_instance, dagster_default_instance)
    if not writer_is_leasehold:
        writer, reader = reader, writer
    keys = [f"2026/01/01/part {i:03d}, [x]|…" for i in range(25)]
    with writer(tmp_path) as instance:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage) is (
            writer_is_leasehold
        )
        materialize_range(instance, keys)
        (run,) = instance.get_runs()
    with reader(tmp_path) as instance:
        assert materialized(instance) == sorted(keys)
        assert instance.get_materialized_partitions(ingested.key) == set(keys)
        assert instance.get_run_by_id(run.run_id).is_success
        materialize_range(instance, ["later"])
        assert len(materialized(instance)) == len(keys) + 1


def test_a_live_run_is_followed_by_a_file_watcher_like_the_webservers(tmp_path: Path) -> None:
    """The webserver follows a run by watching its shard file: every event must reach it while
    the writer keeps its connection open."""
    with leasehold_instance(tmp_path) as instance:
        watcher = SqliteEventLogStorage(instance.event_log_storage._base_dir)
        run_id = str(uuid.uuid4())
        log(instance, run_id, "first")  # the shard exists before watching
        seen: list[str] = []

        def follow(entry: EventLogEntry, _cursor: str) -> None:
            seen.append(entry.dagster_event.message)

        watcher.watch(run_id, None, follow)
        try:
            for i in range(5):
                log(instance, run_id, f"event {i}")
                deadline = time.monotonic() + 10
                while f"event {i}" not in seen and time.monotonic() < deadline:
                    time.sleep(0.02)
                assert f"event {i}" in seen, f"the watcher did not see event {i}: {seen}"
        finally:
            watcher.end_watch(run_id, follow)
            watcher.dispose()


def test_a_shard_deleted_by_another_process_is_reopened_not_written_to_the_void(
    tmp_path: Path,
) -> None:
    with leasehold_instance(tmp_path) as instance:
        other = SqliteEventLogStorage(instance.event_log_storage._base_dir)
        run_id = str(uuid.uuid4())
        log(instance, run_id, "before")
        other.wipe()  # deletes every run shard file
        log(instance, run_id, "after")
        assert messages(other, run_id) == ["after"]


def test_open_run_shards_are_bounded_and_nothing_is_lost(tmp_path: Path) -> None:
    with leasehold_instance(tmp_path) as instance:
        base_dir = Path(instance.event_log_storage._base_dir).resolve()
        run_ids = [str(uuid.uuid4()) for _ in range(MAX_OPEN_RUN_SHARDS + 9)]
        for run_id in run_ids:
            log(instance, run_id, "hello")
        open_shards = set()
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = Path(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                continue
            if target.parent == base_dir and target.suffix == ".db":
                open_shards.add(target.stem)
        assert open_shards - {"index"} <= set(run_ids[-MAX_OPEN_RUN_SHARDS:])
        assert len(open_shards - {"index"}) == MAX_OPEN_RUN_SHARDS
        reader = SqliteEventLogStorage(str(base_dir))
        for run_id in run_ids:
            assert messages(reader, run_id) == ["hello"]


def test_a_forked_child_opens_its_own_connections(tmp_path: Path) -> None:
    """Dagster's forking executors and daemons: a child that reused the parent's SQLite
    connection would corrupt or lose writes; it must open its own and leave the parent's be."""
    with leasehold_instance(tmp_path) as instance:
        run_id = str(uuid.uuid4())
        log(instance, run_id, "parent before")
        pid = os.fork()
        if pid == 0:  # child: no pytest machinery, just the exit code
            code = 1
            try:
                inherited = bool(instance.event_log_storage._engines)
                log(instance, run_id, "child")
                code = 2 if inherited else 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        log(instance, run_id, "parent after")
        assert messages(instance.event_log_storage, run_id) == [
            "parent before",
            "child",
            "parent after",
        ]


def write_in_child(home: Path, run_id: str, count: int, then: str) -> int:
    """Another process logs `count` events to `run_id` on the embedded instance at `home`, then
    either exits normally or is killed at once; returns its exit code."""
    code = textwrap.dedent(
        f"""
        import os, signal
        from dagster import DagsterInstance
        instance = DagsterInstance.from_config({str(home)!r})
        for i in range({count}):
            instance.report_engine_event(f"event {{i}}", run_id={run_id!r}, job_name="job")
        if {then!r} == "killed":
            os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, timeout=120).returncode


def test_a_writer_killed_right_after_its_events_loses_none(tmp_path: Path) -> None:
    """Commits do not wait for the disk (synchronous=NORMAL): a killed process must still lose
    nothing that it committed."""
    write_instance_yaml(tmp_path, "pooled")
    run_id = str(uuid.uuid4())
    assert write_in_child(tmp_path, run_id, 20, "killed") == -signal.SIGKILL
    reader = SqliteEventLogStorage(str(tmp_path / "history" / "runs"))
    assert messages(reader, run_id) == [f"event {i}" for i in range(20)]


def test_a_writer_that_exits_leaves_its_last_events_in_the_watched_file(tmp_path: Path) -> None:
    """Checkpoints are deferred, but a run worker exits right after its last event: the shard's
    `.db` file itself, which the webserver's watcher follows, must hold that event."""
    write_instance_yaml(tmp_path, "pooled")
    run_id = str(uuid.uuid4())
    assert write_in_child(tmp_path, run_id, 20, "exits") == 0
    shard = tmp_path / "history" / "runs" / f"{run_id}.db"
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copyfile(shard, copy / shard.name)  # the file alone, not its WAL
    assert messages(SqliteEventLogStorage(str(copy)), run_id) == [f"event {i}" for i in range(20)]


def table_rows(db: Path, table: str) -> list[tuple]:
    with sqlite3.connect(db) as conn:
        columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        kept = [c for c in columns if c != "create_timestamp"]  # the time of the write itself
        return conn.execute(f"SELECT {', '.join(kept)} FROM {table} ORDER BY 1").fetchall()


def test_a_batch_of_events_leaves_what_one_event_at_a_time_leaves(tmp_path: Path) -> None:
    """Run creation hands the planned events over as one batch, written with fewer statements:
    the rows must be exactly those `store_event` writes, whatever the batch mixes."""
    with dagster_default_instance(tmp_path) as instance:
        materialize_range(instance, [f"k{i}" for i in range(5)])
        (run,) = instance.get_runs()
        records = instance.get_records_for_run(run.run_id).records
    asset_events = [r.event_log_entry for r in records if r.event_log_entry.is_dagster_event]
    asset_events = [e for e in asset_events if e.dagster_event.asset_key is not None]
    # planned, materialized, planned again: each type's newest must decide its columns
    batch = (
        asset_events
        + [e for e in asset_events if e.dagster_event.is_asset_materialization_planned][:2]
    )
    assert {e.dagster_event_type.value for e in batch} == {
        "ASSET_MATERIALIZATION_PLANNED",
        "ASSET_MATERIALIZATION",
    }
    one_by_one = PooledSqliteEventLogStorage(str(tmp_path / "one"))
    batched = PooledSqliteEventLogStorage(str(tmp_path / "batch"))
    for event in batch:
        one_by_one.store_event(event)
    batched.store_event_batch(batch)
    one_by_one.dispose()
    batched.dispose()
    for db in ("index.db", f"{run.run_id}.db"):
        for table in ("event_logs", "asset_keys", "asset_event_tags"):
            expected = table_rows(tmp_path / "one" / db, table)
            assert table_rows(tmp_path / "batch" / db, table) == expected, (db, table)
    assert len(table_rows(tmp_path / "batch" / "index.db", "event_logs")) == len(batch)
