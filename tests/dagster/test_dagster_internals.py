"""What resources/dagster_resources/dagster_internals.py relies on in Dagster, pinned.

The embedded instance's event log subclasses Dagster's private `SqliteEventLogStorage` and
overrides or calls its private methods. A Dagster upgrade may change any of them without
notice; these tests fail first, each naming what moved: the private names and signatures, the
path Dagster takes to hand over a run's planned events, and — on the same events — the same
rows and the same answers to the queries the webserver, the daemon and leasehold make as
Dagster's own storage gives. Last, the switch back to Dagster's own storage
(`LEASEHOLD_EVENT_LOG=dagster`); `leasehold run` end to end on it: tests/cli/test_run_story.py.

No `from __future__ import annotations`: this file defines Dagster assets.
"""

import inspect
import itertools
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import dagster
import pytest
import yaml
from dagster import (
    AssetCheckResult,
    AssetExecutionContext,
    AssetKey,
    AssetMaterialization,
    BackfillPolicy,
    DagsterEventType,
    DagsterInstance,
    DynamicPartitionsDefinition,
    EventLogEntry,
    EventRecordsFilter,
    asset,
    asset_check,
    materialize,
)
from dagster._core.storage.event_log import SqliteEventLogStorage
from dagster._core.storage.event_log.sqlite import sqlite_event_log

from resources.dagster_resources import dagster_internals
from resources.dagster_resources.dagster_internals import (
    EVENT_BATCH_SIZE_VAR,
    PooledSqliteEventLogStorage,
)
from resources.dagster_resources.instance import (
    EVENT_LOG_VAR,
    event_log_choice,
    write_instance_yaml,
)
from resources.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
sources = DynamicPartitionsDefinition(name="sources")
FAIL = {"now": False}
VERSION = "dagster/data_version"  # a tag Dagster indexes per asset event (asset_event_tags)


@asset(partitions_def=sources, backfill_policy=BackfillPolicy.single_run(), output_required=False)
def ingested(context: AssetExecutionContext):
    if FAIL["now"]:
        raise RuntimeError("a failed range run: its partitions are marked failed")
    for key in context.partition_keys:
        yield AssetMaterialization(
            asset_key=context.asset_key, partition=key, metadata={"k": key}, tags={VERSION: key}
        )


@asset
def summary() -> int:
    return 1


@asset_check(asset=summary)
def summary_positive() -> AssetCheckResult:
    return AssetCheckResult(passed=True, metadata={"rows": 1})


# --- Private names and signatures -------------------------------------------------------------

# Each private method the storage overrides or calls: its parameters, as Dagster 1.13 has them.
PRIVATE_METHODS = {
    "_connect": ["self", "shard"],
    "_store_asset_event": ["self", "conn", "event", "event_id"],
    "_has_asset_key_col_on_connection": ["self", "conn", "column_name"],
    "_has_asset_key_index_cols_on_connection": ["self", "conn"],
    "_get_asset_entry_values": ["self", "event", "event_id", "has_asset_key_index_cols"],
    "_store_asset_event_tags": ["self", "conn", "events", "event_ids"],
    "_initdb": ["self", "engine", "for_index_shard"],
}
# Public methods it overrides or calls, whose shape it assumes as well.
PUBLIC_METHODS = {
    "__init__": ["self", "base_dir", "inst_data"],
    "store_event": ["self", "event"],
    "store_event_batch": ["self", "events"],
    "prepare_insert_event": ["self", "event"],
    "run_connection": ["self", "run_id"],
    "index_transaction": ["self"],
    "path_for_shard": ["self", "run_id"],
    "wipe": ["self"],
    "dispose": ["self"],
}


@pytest.mark.parametrize("name", sorted({**PRIVATE_METHODS, **PUBLIC_METHODS}))
def test_the_methods_the_storage_overrides_or_calls_have_the_pinned_parameters(name: str) -> None:
    expected = {**PRIVATE_METHODS, **PUBLIC_METHODS}[name]
    method = getattr(SqliteEventLogStorage, name, None)
    assert method is not None, (
        f"SqliteEventLogStorage.{name} is gone (Dagster {dagster.__version__})"
    )
    assert list(inspect.signature(method).parameters) == expected, name


def test_the_attributes_and_names_the_storage_uses_are_dagsters(tmp_path: Path) -> None:
    storage = SqliteEventLogStorage(str(tmp_path))
    assert os.path.samefile(storage._base_dir, tmp_path)
    assert hasattr(storage._db_lock, "acquire") and isinstance(storage._initialized_dbs, set)
    assert dagster_internals.INDEX_SHARD_NAME == "index"
    assert Path(storage.path_for_shard(dagster_internals.INDEX_SHARD_NAME)).exists()
    assert {c.name for c in dagster_internals.AssetKeyTable.c} >= {
        "asset_key",
        "last_materialization_timestamp",
    }
    assert DagsterEventType.ASSET_MATERIALIZATION_PLANNED in dagster_internals.ASSET_EVENTS
    assert DagsterEventType.RUN_SUCCESS in dagster_internals.EVENT_TYPE_TO_PIPELINE_RUN_STATUS
    storage.dispose()


def test_the_run_and_schedule_storages_it_names_are_those_of_dagsters_sqlite_storage(
    tmp_path: Path,
) -> None:
    """The `dagster.yaml` with the pooled event log names Dagster's SQLite run and schedule
    storages by module path: they must be the ones Dagster's `storage: sqlite` builds."""
    with DagsterInstance.from_config(
        str(write_instance_yaml(tmp_path / "a", "pooled").parent)
    ) as a:
        with DagsterInstance.from_config(
            str(write_instance_yaml(tmp_path / "b", "dagster").parent)
        ) as b:
            assert type(a.run_storage) is type(b.run_storage)
            assert type(a.schedule_storage) is type(b.schedule_storage)
            assert type(a.event_log_storage) is PooledSqliteEventLogStorage
            assert type(b.event_log_storage) is SqliteEventLogStorage


def test_no_private_dagster_name_outside_the_internals_module() -> None:
    """One module holds every private Dagster use: an import, or a module path in a config."""
    private = re.compile(r"\bdagster\._")
    allowed = REPO / "resources" / "dagster_resources" / "dagster_internals.py"
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in ("resources", "coordination_assets", "bin", "bench")
        for path in sorted((REPO / folder).rglob("*"))
        if path.is_file() and path.suffix in {".py", ".yaml", ".yml", ""} and path != allowed
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1)
        if private.search(line)
    ]
    assert not found, found


# --- The path Dagster takes ---------------------------------------------------------------------


def leasehold_instance(home: Path) -> DagsterInstance:
    write_instance_yaml(home, "pooled")
    return DagsterInstance.from_config(str(home))


def dagster_instance(home: Path) -> DagsterInstance:
    write_instance_yaml(home, "dagster")
    return DagsterInstance.from_config(str(home))


def materialize_range(instance: DagsterInstance, keys: list[str]) -> bool:
    instance.add_dynamic_partitions(sources.name, keys)
    return materialize(
        [ingested],
        instance=instance,
        tags={
            "dagster/asset_partition_range_start": keys[0],
            "dagster/asset_partition_range_end": keys[-1],
        },
        raise_on_error=False,
    ).success


def test_a_range_runs_planned_events_reach_the_storage_as_one_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`DAGSTER_EVENT_BATCH_SIZE` (set by the storage) makes Dagster hand a run's planned events
    to `store_event_batch` at once; without it they arrive one by one and the batch path, the
    cheaper half of what the storage saves at run creation, is never taken."""
    batches: list[list[str]] = []
    original = PooledSqliteEventLogStorage.store_event_batch

    def spy(self: PooledSqliteEventLogStorage, events: list[EventLogEntry]) -> None:
        batches.append([e.dagster_event_type.value for e in events if e.dagster_event_type])
        original(self, events)

    monkeypatch.setattr(PooledSqliteEventLogStorage, "store_event_batch", spy)
    monkeypatch.delenv(EVENT_BATCH_SIZE_VAR, raising=False)
    with leasehold_instance(tmp_path) as instance:
        assert os.environ[EVENT_BATCH_SIZE_VAR] == str(dagster_internals.EVENT_BATCH_SIZE)
        keys = [f"k{i}" for i in range(7)]
        assert materialize_range(instance, keys)
    planned = [b for b in batches if b and set(b) == {"ASSET_MATERIALIZATION_PLANNED"}]
    assert [len(b) for b in planned] == [len(keys)], batches


def test_every_connection_of_the_storage_comes_from_connect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The storage replaces Dagster's engine per transaction by overriding `_connect`: it only
    works if Dagster's storage takes every connection there. Once the shards are open, the only
    engines Dagster's module still builds are `has_table`'s (before dynamic partition reads and
    writes, and storing an asset event's indexed tags): a few per run, left as Dagster has it.
    Any other caller is a path that went around `_connect`."""
    with leasehold_instance(tmp_path) as instance:
        assert materialize_range(instance, ["warm"])
        callers: list[str] = []
        original = sqlite_event_log.create_engine

        def counting(url: Any, **kwargs: Any) -> Any:
            callers.append(sys._getframe(1).f_code.co_name)
            return original(url, **kwargs)

        monkeypatch.setattr(sqlite_event_log, "create_engine", counting)
        assert materialize_range(instance, [f"k{i}" for i in range(5)])
        (run, *_) = instance.get_runs()
        for query in queries(run.run_id).values():
            query(instance.event_log_storage)
        assert callers and set(callers) == {"has_table"}, callers


# --- The same events, the same rows and answers as Dagster's own storage -----------------------


def dagster_events(home: Path) -> list[list[EventLogEntry]]:
    """The events Dagster writes for a successful range run, a failed one and a checked asset,
    run by run in the order stored: written on Dagster's own storage, with batching on."""
    with dagster_instance(home) as instance:
        assert materialize_range(instance, [f"2026/01/0{i} part {i}, [x]" for i in range(5)])
        FAIL["now"] = True
        try:
            assert not materialize_range(instance, ["late 1", "late 2"])
        finally:
            FAIL["now"] = False
        assert materialize([summary, summary_positive], instance=instance).success
        runs = instance.get_runs()[::-1]  # oldest first
        return [
            [r.event_log_entry for r in instance.get_records_for_run(run.run_id).records]
            for run in runs
        ]


def asset_event(entry: EventLogEntry) -> bool:
    return entry.dagster_event_type in {
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        DagsterEventType.ASSET_MATERIALIZATION,
    }


def replay(storage: SqliteEventLogStorage, runs: list[list[EventLogEntry]], batched: str) -> None:
    """Store the events as Dagster does (`batched="planned"`): a run's leading planned events as
    one batch, the rest one by one; or (`"all"`) every stretch of a run's asset events as one
    batch — mixing planned events with materializations and their indexed tags, which the
    storage must store as one by one would too."""
    for events in runs:
        if batched == "all":
            for is_asset, stretch in itertools.groupby(events, key=asset_event):
                if is_asset:
                    storage.store_event_batch(list(stretch))
                else:
                    for entry in stretch:
                        storage.store_event(entry)
            continue
        planned = 0
        while planned < len(events) and events[planned].dagster_event_type in {
            DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
            None,
        }:
            planned += 1
        # the run's first events may be log lines (no Dagster event): stored one by one
        head = [e for e in events[:planned] if e.dagster_event_type is None]
        batch = [e for e in events[:planned] if e.dagster_event_type is not None]
        for entry in head:
            storage.store_event(entry)
        if batch:
            storage.store_event_batch(batch)
        for entry in events[planned:]:
            storage.store_event(entry)


def queries(run_id: str) -> dict[str, Callable[[SqliteEventLogStorage], Any]]:
    """The reads the webserver (run page, asset pages, partition status), the daemon (sensors'
    cursors, run status sensors, backfills) and leasehold (reports, checks) make."""
    key, summary_key = AssetKey("ingested"), AssetKey("summary")
    check = summary_positive.check_key
    return {
        "records for the run": lambda s: s.get_records_for_run(run_id).records,
        "logs for the run": lambda s: s.get_logs_for_run(run_id),
        "stats": lambda s: s.get_stats_for_run(run_id),
        "step stats": lambda s: s.get_step_stats_for_run(run_id),
        "asset keys": lambda s: sorted(s.get_asset_keys(), key=str),
        "asset records": lambda s: s.get_asset_records([key, summary_key]),
        "materializations": lambda s: s.fetch_materializations(key, limit=100).records,
        "materializations after a cursor": lambda s: s.fetch_materializations(
            key, limit=2, ascending=True
        ),
        "failed materializations": lambda s: s.fetch_failed_materializations(key, limit=100),
        "planned, by event filter": lambda s: s.get_event_records(
            EventRecordsFilter(DagsterEventType.ASSET_MATERIALIZATION_PLANNED, asset_key=key)
        ),
        "latest materializations": lambda s: s.get_latest_materialization_events([key]),
        "materialized partitions": lambda s: s.get_materialized_partitions(key),
        "latest storage id by partition": lambda s: s.get_latest_storage_id_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION
        ),
        "latest tags by partition": lambda s: s.get_latest_tags_by_partition(
            key, DagsterEventType.ASSET_MATERIALIZATION, [VERSION]
        ),
        "in progress or failed partitions": lambda s: (
            s.get_latest_asset_partition_materialization_attempts_without_materializations(key)
        ),
        "latest planned": lambda s: s.get_latest_planned_materialization_info(key),
        "event tags": lambda s: s.get_event_tags_for_asset(key),
        "run status changes": lambda s: s.fetch_run_status_changes(
            DagsterEventType.RUN_SUCCESS, limit=100
        ),
        "run failures": lambda s: s.fetch_run_status_changes(
            DagsterEventType.RUN_FAILURE, limit=100
        ),
        "check history": lambda s: [
            unstamped(r) for r in s.get_asset_check_execution_history(check, limit=10)
        ],
        "latest check": lambda s: {
            k: unstamped(r) for k, r in s.get_latest_asset_check_execution_by_key([check]).items()
        },
        "maximum record id": lambda s: s.get_maximum_record_id(),
    }


def unstamped(record: Any) -> Any:
    """A check execution's record without the time it was stored (not the event's time)."""
    return record._replace(create_timestamp=None)


def table_rows(db: Path) -> dict[str, list[tuple]]:
    """Every table's rows, without the columns that hold the time of the write itself."""
    written_at = {"create_timestamp", "update_timestamp", "migration_completed"}
    with sqlite3.connect(db) as conn:
        tables = [t for (t,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        rows = {}
        for table in tables:
            columns = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
            kept = ", ".join(f'"{c}"' for c in columns if c not in written_at)
            rows[table] = conn.execute(f"SELECT {kept} FROM {table} ORDER BY 1").fetchall()
        return rows


@pytest.mark.parametrize("batched", ["planned", "all"])
def test_the_same_events_leave_the_same_rows_and_answers_as_dagsters_storage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batched: str
) -> None:
    monkeypatch.setenv(EVENT_BATCH_SIZE_VAR, "2000")
    runs = dagster_events(tmp_path / "source")
    kinds = {e.dagster_event_type for events in runs for e in events}
    assert {
        DagsterEventType.ASSET_MATERIALIZATION_PLANNED,
        DagsterEventType.ASSET_MATERIALIZATION,
        DagsterEventType.ASSET_CHECK_EVALUATION,
        DagsterEventType.RUN_SUCCESS,
        DagsterEventType.RUN_FAILURE,
    } <= kinds, kinds
    theirs = SqliteEventLogStorage(str(tmp_path / "dagster"))
    ours = PooledSqliteEventLogStorage(str(tmp_path / "leasehold"))
    replay(theirs, runs, "planned")
    replay(ours, runs, batched)
    run_ids = [events[0].run_id for events in runs]
    for run_id in run_ids:
        for name, query in queries(run_id).items():
            assert query(ours) == query(theirs), (run_id, name)
    ours.dispose()
    theirs.dispose()
    for db in ["index.db", *(f"{run_id}.db" for run_id in run_ids)]:
        expected = table_rows(tmp_path / "dagster" / db)
        assert table_rows(tmp_path / "leasehold" / db) == expected, db


# --- The switch ---------------------------------------------------------------------------------


def test_the_event_log_setting_reads_pooled_by_default_and_refuses_anything_else() -> None:
    assert event_log_choice({}) == "pooled"
    assert event_log_choice({EVENT_LOG_VAR: " Dagster "}) == "dagster"
    with pytest.raises(ConfigError, match=EVENT_LOG_VAR):
        event_log_choice({EVENT_LOG_VAR: "postgres"})


def test_with_the_setting_off_the_instance_names_no_private_dagster_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(EVENT_LOG_VAR, "dagster")
    config = yaml.safe_load(write_instance_yaml(tmp_path).read_text())
    assert config["storage"] == {"sqlite": {"base_dir": str(tmp_path.resolve())}}
    assert not {"run_storage", "event_log_storage", "schedule_storage"} & config.keys()
    monkeypatch.delenv(EVENT_LOG_VAR)
    config = yaml.safe_load(write_instance_yaml(tmp_path).read_text())
    assert config["event_log_storage"]["class"] == "PooledSqliteEventLogStorage"


def test_with_the_setting_off_leasehold_does_not_import_the_internals_module(
    tmp_path: Path,
) -> None:
    """The switch is the way out when a Dagster upgrade breaks the internals: with it off, the
    module that names them is never imported, so a moved private name cannot stop a run."""
    code = f"""
import sys
from pathlib import Path
from dagster import DagsterInstance
import coordination_assets.main_job
from resources.dagster_resources.instance import write_instance_yaml
home = Path({str(tmp_path)!r})
write_instance_yaml(home)
with DagsterInstance.from_config(str(home)) as instance:
    instance.report_engine_event("hello", run_id="r1", job_name="job")
    print(type(instance.event_log_storage).__name__)
print("{dagster_internals.__name__}" in sys.modules)
"""
    env = {**os.environ, EVENT_LOG_VAR: "dagster", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["SqliteEventLogStorage", "False"], done.stdout


def test_an_instance_written_before_the_storage_moved_still_loads(tmp_path: Path) -> None:
    path = write_instance_yaml(tmp_path, "pooled")
    text = path.read_text().replace(
        f"module: {dagster_internals.__name__}", "module: resources.dagster_resources.instance"
    )
    path.write_text(text)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert type(instance.event_log_storage) is PooledSqliteEventLogStorage
