"""The Dagster UI, tested through the webserver's GraphQL API, as the browser sends it.

`dagster dev` on 127.0.0.1 (webserver, daemon, code server of the repo's `workspace.yaml`) over
a small generated source: 60 objects in 20 work units (3 objects each), one unit per Spark read
so a run commits unit after unit. The test does what an operator does in the UI, with the
documents the UI posts (`tests/support/dagster_graphql_ui.py`), and checks after each step that
what the UI shows is what the lease store says:

1. the asset graph: per stream ingested -> merged -> table, with descriptions, groups, owners,
   kinds, column schemas and checks; the four sensors;
2. the discovery sensor's first tick adds the 20 units as partitions; its range run is held in
   the queue (`hold_sensor_ingestion_runs`), the sensors are switched off (`stopSensor`) and
   the run terminated (`terminateRuns`): nothing ingested, the UI shows 20 missing;
3. a unit is materialized as the asset page's "Materialize" does (implicit asset job, the
   asset and its checks, the `dagster/partition` tag) while a backfill of two other units runs
   from the partition dialog: both SUCCESS, the materializations carry `dagster/row_count`;
   three more units are materialized at the same time: of these five runs the Spark pool
   (granularity `run`) lets two run at once, though none carries a leasehold tag;
4. a backfill of all partitions, its run terminated mid-way once it committed a unit: CANCELED,
   its leases handed back at once, the UI showing exactly the committed units materialized; at
   the same time a backfill of the two units already done;
5. at the end the UI's partition statuses equal the store's: COMPLETED <-> materialized, the
   others missing (a canceled run marks nothing failed), none materializing.

What the UI got wrong (issue 23) is recorded by the main test and asserted by the tests at the
end: a backfill over complete units succeeds, the checks a Materialize plans are evaluated (a
sensor's run plans none), a commit Dagster did not record shows its own counts once the
discovery sensor recorded it, a partition added by hand leaves the partitions.

Cost: eight run processes, six with a SparkSession (two at a time). Measured alone on idle
cores: about 2.5 minutes. Every wait polls with a timeout and fails naming what it waited for,
the last state it saw, the runs and the end of dagster dev's output.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest
from graphql import parse, validate

from resources.coordination.items import ItemType, PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.dagster_resources.instance import SPARK_RUN_LIMIT, write_instance_yaml
from resources.dagster_resources.runs import STREAM_TAG
from resources.dagster_resources.spark import SparkResource
from resources.ingestion.check_suite import CHECKS
from resources.ingestion.partition_keys import from_partition_key, to_partition_key
from resources.ingestion.sample_data import write_sample_sources
from resources.stores import build_store
from resources.stores.settings import StoreSettings
from tests.support import dagster_graphql_ui
from tests.support.dagster_dev import DagsterDev, project_env
from tests.support.dagster_graphql_ui import (
    TERMINAL_BACKFILL_STATUSES,
    TERMINAL_RUN_STATUSES,
    DagsterUi,
    PartitionStatuses,
    tags_of,
)
from tests.support.pipeline_env import STREAM, PipelineEnv, write_streams

REPO = Path(__file__).resolve().parents[2]
OBJECTS = 60
OBJECTS_PER_UNIT = 3
RECORDS = 10  # per object
UNITS = OBJECTS // OBJECTS_PER_UNIT
LEASE_TIMEOUT_S = 10.0
BUDGET_S = 900.0  # from `dagster dev`'s start to the last assertion
INGESTED = [STREAM, "ingested"]
MERGED = [STREAM, "merged"]
TABLE = [STREAM, "table"]
OWNER = "team:data-platform"
SCHEMA = {"event_id": "string", "user_id": "string", "amount": "double", "event_time": "timestamp"}
INGESTION_CHECKS = set(CHECKS)

T = TypeVar("T")


@dataclass
class Ui:
    """The running `dagster dev`, its GraphQL endpoint, the store, and what was observed."""

    dev: DagsterDev
    gql: DagsterUi
    store: LeaseStore
    pipeline: PipelineEnv
    """The same streams, store and lake, for work done outside Dagster."""
    t0: float = field(default_factory=time.time)
    observed: dict[str, Any] = field(default_factory=dict)

    def note(self, what: str) -> None:
        print(f"[{time.time() - self.t0:6.1f} s] {what}", flush=True)

    def items(self) -> dict[str, PartitionStatus]:
        """Each work unit's status, by its Dagster partition key."""
        sid = self.store.source_identifier(STREAM, ItemType.PARTITION)
        return {to_partition_key(i.partition_key): i.status for i in self.store.iter_items(sid)}

    def completed(self) -> set[str]:
        return {k for k, s in self.items().items() if s is PartitionStatus.COMPLETED}

    def counts(self) -> Counter[PartitionStatus]:
        return Counter(self.items().values())

    def wait_for(
        self, what: str, found: Callable[[], T | None], timeout_s: float, state: Callable[[], Any]
    ) -> T:
        """`found()`'s first truthy value, polled every 0.5 s; fails naming `what`, the last
        `state()` seen and the end of dagster dev's output. No wait outlives the budget."""
        deadline = min(time.time() + timeout_s, self.t0 + BUDGET_S)
        while True:
            value = found()
            if value:
                return value
            assert self.dev.running(), f"dagster dev exited waiting for {what}\n{self.report()}"
            if time.time() >= deadline:
                raise AssertionError(
                    f"no {what} after {time.time() - self.t0:.0f} s of the test "
                    f"(waited up to {timeout_s:.0f} s); last state seen: {state()}\n"
                    f"{self.report()}"
                )
            time.sleep(0.5)

    def run_status(self, run_id: str) -> str:
        return self.gql.run(run_id)["status"]

    def wait_run_end(self, run_id: str, what: str, timeout_s: float) -> str:
        return self.wait_for(
            f"end of {what} (run {run_id[:8]})",
            lambda: (s := self.run_status(run_id)) in TERMINAL_RUN_STATUSES and s,
            timeout_s,
            lambda: self.run_status(run_id),
        )

    def statuses(self) -> PartitionStatuses:
        return self.gql.partition_statuses(INGESTED)

    def report(self) -> str:
        try:
            runs = "\n".join(
                f"  {r['id'][:8]} {r['status']:9} {json.dumps(tags_of(r))[:160]}"
                for r in self.gql.runs({})
            )
        except Exception as exc:  # the report of a failure must not fail itself
            runs = f"  (runs not readable: {exc})"
        return (
            f"store: {dict(self.counts())}\nruns (newest first):\n{runs}\n"
            f"dagster dev output (last lines):\n{self.dev.log_tail(80)}"
        )


def hold_sensor_ingestion_runs(instance_yaml: Path) -> None:
    """A limit of 0 on runs tagged `leasehold/stream` (the discovery sensor's) added to the
    instance: its first tick adds the units as partitions, and the range run it asks for stays
    queued until the test terminates it, so the units are left for the UI to materialize. The
    UI's runs carry no such tag and are not held."""
    text = instance_yaml.read_text()
    limits = "    tag_concurrency_limits:\n"
    assert text.count(limits) == 1, text
    held = f"{limits}      - key: {STREAM_TAG}\n        limit: 0\n"
    instance_yaml.write_text(text.replace(limits, held))


@pytest.fixture(scope="module")
def ui(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ui]:
    root = tmp_path_factory.mktemp("ui")
    sources, data_dir, home = root / "sources", root / "data", root / "dagster_home"
    write_sample_sources(sources, objects=OBJECTS, records_per_object=RECORDS, days=2)
    streams = write_streams(
        root / "streams.yaml",
        f"file://{sources}",
        f"file://{root / 'lake'}",
        {"max_objects": OBJECTS_PER_UNIT},
    )
    # No table partition closes and no merge falls due while the test runs: a merge run (a
    # SparkSession) would compete for the 2 cores; tests/dagster/test_merge_sensor.py covers
    # merges. The merged and table assets are still in the graph.
    with streams.open("a") as f:
        f.write("    merge: {close_grace: P3650D, interval: P3650D}\n")
    data_dir.mkdir()
    hold_sensor_ingestion_runs(write_instance_yaml(home))
    # One unit per Spark read: the run commits unit after unit, so there is a moment with
    # some, not all, committed to terminate it at.
    env = project_env(
        streams, data_dir, home, lease_timeout_s=LEASE_TIMEOUT_S, chunk_size=OBJECTS_PER_UNIT
    )
    dev = DagsterDev(
        REPO / "workspace.yaml", env, root / "dagster_dev.log", f"LEASEHOLD_DATA_DIR={data_dir}"
    )
    settings = StoreSettings(sqlite_path=str(data_dir / "leasehold.db"))
    store = build_store(settings)
    session = Ui(dev, DagsterUi(dev.port), store, PipelineEnv(root, settings, streams))
    try:
        dev.start()
        session.note(f"dagster dev started (pid {dev.process.pid}, port {dev.port})")
        yield session
    finally:
        survivors = dev.stop()
        session.note("dagster dev stopped")
        print("observed:\n" + json.dumps(session.observed, indent=1, default=str))
        store.close_store()
        assert not survivors, f"processes of the test's dagster dev survived: {survivors}"


def test_the_documents_are_valid_against_the_installed_schema() -> None:
    """Every document the helper posts validates against Dagster's own schema: a field the UI
    no longer has fails here, in a second, not as a GraphQL error minutes into the daemon
    test."""
    from dagster_graphql.schema import create_schema

    schema = create_schema().graphql_schema
    documents = {
        name: value
        for name, value in vars(dagster_graphql_ui).items()
        if name.isupper() and isinstance(value, str) and ("query " in value or "mutation " in value)
    }
    assert len(documents) >= 12
    for name, document in documents.items():
        errors = validate(schema, parse(document))
        assert not errors, f"{name}: {[e.message for e in errors]}"


def names(keys: list[dict[str, list[str]]]) -> set[str]:
    return {"/".join(k["path"]) for k in keys}


def assert_asset_graph(u: Ui) -> str:
    """Lineage, presentation and checks of every asset as the asset graph loads them; the
    ingestion asset's job name (what "Materialize" launches)."""
    nodes = u.wait_for(
        "asset graph of the loaded code location",
        lambda: u.dev.webserver_up() and "events/table" in (n := u.gql.asset_nodes()) and n,
        timeout_s=300,
        state=lambda: "webserver up" if u.dev.webserver_up() else "webserver not answering",
    )
    u.note(f"asset graph loaded: {sorted(nodes)}")
    ingested, merged, table = (
        nodes["events/ingested"],
        nodes["events/merged"],
        nodes["events/table"],
    )
    assert names(ingested["dependedByKeys"]) == {"events/merged"}
    assert names(merged["dependencyKeys"]) == {"events/ingested"}
    assert names(merged["dependedByKeys"]) == {"events/table"}
    assert names(table["dependencyKeys"]) == {"events/merged"}
    assert names(table["dependedByKeys"]) == set()
    expected_kinds = {
        "events/ingested": {"spark", "parquet", "sqlite"},
        "events/merged": {"spark", "parquet", "sqlite"},
        "events/table": {"parquet", "sqlite"},
        "coordination_status": {"sqlite"},
    }
    for key, node in nodes.items():
        assert node["description"], f"{key} has no description"
        assert node["owners"] == [{"team": OWNER.removeprefix("team:")}], (key, node["owners"])
        assert set(node["kinds"]) == expected_kinds[key], (key, node["kinds"])
        assert node["groupName"] == ("coordination" if key == "coordination_status" else STREAM)
        checks = node["assetChecksOrError"]["checks"]
        assert checks, f"{key} has no checks"
        for check in checks:
            assert check["description"], f"check {key}:{check['name']} has no description"
        if key == "coordination_status":
            continue
        assert node["isPartitioned"], key
        (schema_entry,) = [e for e in node["metadataEntries"] if "schema" in e]
        assert schema_entry["label"] == "dagster/column_schema"
        columns = {c["name"]: c for c in schema_entry["schema"]["columns"]}
        assert {n: c["type"] for n, c in columns.items()} == SCHEMA, key
        assert not columns["event_time"]["constraints"]["nullable"]
        assert not columns["event_id"]["constraints"]["nullable"]
        assert columns["amount"]["constraints"]["nullable"]
    assert {c["name"] for c in ingested["assetChecksOrError"]["checks"]} == INGESTION_CHECKS
    assert ingested["partitionDefinition"]["type"] == "DYNAMIC"
    (job_name,) = [j for j in ingested["jobNames"] if j.startswith("__ASSET_JOB")]
    return job_name


def assert_sensors(u: Ui) -> dict[str, dict[str, Any]]:
    sensors = u.gql.sensors()
    u.note(f"sensors: {sorted(sensors)}")
    expected = {f"{STREAM}_{s}" for s in ("discovery", "merge", "publish", "checks")}
    assert expected <= set(sensors), sorted(sensors)
    for name in expected:
        assert sensors[name]["description"], name
        assert sensors[name]["minIntervalSeconds"] == 30, name
    return sensors


def assert_ui_equals_store(u: Ui, what: str, timeout_s: float = 20.0) -> PartitionStatuses:
    """The UI shows materialized exactly the COMPLETED units, nothing as materializing, and no
    COMPLETED unit as failed. Events reach the UI a moment after the store's commit: polled."""

    def agree() -> PartitionStatuses | None:
        shown, completed = u.statuses(), u.completed()
        ok = (
            shown.materialized == completed
            and not shown.materializing
            and not (shown.failed & completed)
            and set(shown.keys) == set(u.items())
        )
        return shown if ok else None

    def state() -> str:
        shown, completed = u.statuses(), u.completed()
        return (
            f"materialized-not-COMPLETED {sorted(shown.materialized - completed)}, "
            f"COMPLETED-not-materialized {sorted(completed - shown.materialized)}, "
            f"materializing {sorted(shown.materializing)}, failed {sorted(shown.failed)}, "
            f"{len(shown.keys)} partitions vs {len(u.items())} units"
        )

    shown = u.wait_for(
        f"UI partition statuses equal to the store's ({what})", agree, timeout_s, state
    )
    u.note(
        f"{what}: UI materialized {len(shown.materialized)} = store COMPLETED; "
        f"failed {len(shown.failed)}, missing {len(shown.unmaterialized)}; stats {shown.stats}"
    )
    return shown


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_ui_end_to_end(ui: Ui) -> None:
    u = ui
    job_name = assert_asset_graph(u)
    sensors = assert_sensors(u)
    u.observed["sensor_ticks_at_start"] = {
        n: s["sensorState"]["ticks"][:1] for n, s in sensors.items()
    }

    # -- the discovery sensor found the units; switched off, and its run terminated ---------
    stream_runs = lambda: u.gql.runs({"leasehold/stream": STREAM})  # noqa: E731
    first = u.wait_for(
        "range run requested by the discovery sensor",
        lambda: next(iter(stream_runs()), None),
        timeout_s=150,
        state=lambda: {n: s["sensorState"]["ticks"][:1] for n, s in u.gql.sensors().items()},
    )
    # Switched off in the UI before anything else: the discovery sensor's next tick would ask
    # again for whatever no run covers; the other sensors' runs would only compete for the
    # cores (no merge is due; checks and publication are not what this test judges).
    for name in (f"{STREAM}_discovery", f"{STREAM}_checks", f"{STREAM}_publish", f"{STREAM}_merge"):
        assert u.gql.stop_sensor(name) == "STOPPED", name
    # A tick in flight when its sensor is stopped writes its state back as RUNNING when it
    # ends (seen once, on idle cores): stopped again, as a user would click again.
    u.wait_for(
        "every sensor STOPPED",
        lambda: stop_running_sensors(u) == [],
        timeout_s=60,
        state=lambda: {n: s["sensorState"]["status"] for n, s in u.gql.sensors().items()},
    )
    assert u.run_status(first["id"]) == "QUEUED"  # held: hold_sensor_ingestion_runs
    # A sensor's run plans no checks (they would show SKIPPED until the checks run, issue 23).
    assert u.gql.run(first["id"])["assetCheckSelection"] == [], u.gql.run(first["id"])
    terminate(u, first["id"], "the discovery's queued run")
    assert u.wait_run_end(first["id"], "the discovery's queued run", 30) == "CANCELED"
    u.note(f"sensors stopped; discovery's queued run {first['id'][:8]} terminated")
    assert u.counts() == Counter({PartitionStatus.UNASSIGNED: UNITS}), u.report()
    assert_ui_equals_store(u, "before any ingestion")

    # -- Materialize four units and backfill two others, at the same time --------------------
    keys = list(u.statuses().keys)
    one, pair = keys[-1], (keys[0], keys[1])  # a contiguous range: one run (single_run policy)
    others = keys[-4:-1]  # Materialized at once too, without checks: the Spark pool's test
    materialize_id = u.gql.materialize(INGESTED, one, sorted(INGESTION_CHECKS), job_name)
    at_once = [materialize_id] + [u.gql.materialize(INGESTED, k, [], job_name) for k in others]
    selection_id = u.gql.backfill([INGESTED], partitions=list(pair))
    u.note(f"Materialize {[one, *others]} (runs {[r[:8] for r in at_once]}); backfill {pair}")
    run = u.gql.run(materialize_id)
    assert tags_of(run)["dagster/partition"] == one
    assert run["assetSelection"] == [{"path": INGESTED}]
    assert len(run["assetCheckSelection"]) == len(INGESTION_CHECKS)
    assert u.wait_run_end(materialize_id, "the Materialize run", 240) == "SUCCESS", u.report()
    selection_runs = wait_backfill_runs_ended(u, selection_id, "the selection backfill", 240)
    assert [r["status"] for r in selection_runs] == ["SUCCESS"], selection_runs
    for run_id in at_once[1:]:
        assert u.wait_run_end(run_id, "a Materialize", 240) == "SUCCESS", u.report()
    assert {one, *others, *pair} <= u.completed(), u.report()
    assert_ui_equals_store(u, "after Materialize and the selection backfill")
    # Five runs that ingest, launched at once, none tagged by leasehold: the Spark pool lets two
    # run at a time (issue 23 point 2: a tag limit let every one of them start).
    spans = [(r["startTime"], r["endTime"]) for r in map(u.gql.run, at_once)]
    spans += [(r["startTime"], r["endTime"]) for r in map(u.gql.run, [selection_runs[0]["id"]])]
    u.observed["Spark pool: runs' (start, end)"] = sorted(spans)
    assert most_at_once(spans) <= SPARK_RUN_LIMIT, sorted(spans)
    for key in (one, *pair):
        (latest, *_) = u.gql.materializations(INGESTED, [key])
        rows = latest["metadata"]["dagster/row_count"]
        assert rows == latest["metadata"]["rows_written"] == OBJECTS_PER_UNIT * RECORDS, latest
    u.observed["materialize_run"] = {
        "tags": tags_of(u.gql.run(materialize_id)),
        "check_executions": {
            name: [
                e["status"]
                for e in u.gql.check_executions(INGESTED, name)
                if e["runId"] == materialize_id
            ]
            for name in sorted(INGESTION_CHECKS)
        },
    }
    u.note(f"Materialize run: {json.dumps(u.observed['materialize_run'])}")

    # -- a backfill of all partitions, its run terminated mid-way; a backfill of done units --
    done = u.completed()
    all_id = u.gql.backfill([INGESTED], all_partitions=True)
    # The units just ingested, again: what a user does who backfills "to be sure".
    again_id = u.gql.backfill([INGESTED], partitions=list(pair))
    u.note(f"backfill of all partitions {all_id}; of the 2 done {pair}: {again_id}")
    all_run = u.wait_for(
        "run of the backfill of all partitions, committing",
        lambda: (rs := u.gql.backfill_status(all_id)["runs"]) and u.completed() - done and rs[0],
        timeout_s=240,
        state=lambda: (u.gql.backfill_status(all_id), dict(u.counts())),
    )
    terminate(u, all_run["id"], "the backfill's run")
    at_terminate = dict(u.counts())
    u.note(f"backfill run {all_run['id'][:8]} terminated mid-way; store then {at_terminate}")
    assert u.wait_run_end(all_run["id"], "the terminated backfill run", 90) == "CANCELED"
    after = wait_no_lease_held(u, "the terminated backfill run")
    u.note(f"store after the terminated backfill run: {dict(after)}")
    assert 0 < after[PartitionStatus.UNASSIGNED] and len(done) < after[PartitionStatus.COMPLETED]

    # -- the end: the UI's statuses are the store's --------------------------------------------
    shown = assert_ui_equals_store(u, "at the end")
    assert shown.stats["numMaterialized"] == after[PartitionStatus.COMPLETED], shown.stats
    assert shown.stats["numPartitions"] == UNITS, shown.stats
    backfills = {
        "selection": selection_id,
        "all (run terminated)": all_id,
        "done units again": again_id,
    }
    for what, backfill_id in backfills.items():
        u.observed[f"backfill: {what}"] = wait_backfill_end(u, backfill_id, what, 90)
    assert u.observed["backfill: selection"]["status"] == "COMPLETED_SUCCESS"
    again_runs = u.observed["backfill: done units again"]["runs"]
    u.observed["done units again: the run's ingestion step"] = [
        (e["eventType"], e["level"], (e["message"] or "")[:200])
        for r in again_runs
        for e in u.gql.run_logs(r["id"])
        if e.get("stepKey") == "events__ingested"
    ]
    # A run over complete units is not silent (issue 23 point 5): it says so for each.
    said = [m for _, _, m in u.observed["done units again: the run's ingestion step"]]
    assert [k for k in pair if any(m.startswith(f"{k}: already complete") for m in said)] == list(
        pair
    ), said
    u.observed["sensors at the end"] = {
        n: {"status": v["sensorState"]["status"], "ticks": v["sensorState"]["ticks"][:2]}
        for n, v in u.gql.sensors().items()
    }
    u.note(f"done in {time.time() - u.t0:.0f} s")


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most runs in progress at one moment, from their (start, end) times."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    running = most = 0
    for _, step in edges:  # at equal times an end (-1) sorts before a start
        running += step
        most = max(most, running)
    return most


def stop_running_sensors(u: Ui) -> list[str]:
    """Stop every sensor the UI shows running; the ones it did."""
    running = [n for n, s in u.gql.sensors().items() if s["sensorState"]["status"] != "STOPPED"]
    for name in running:
        u.gql.stop_sensor(name)
    return running


def terminate(u: Ui, run_id: str, what: str) -> str:
    """The run page's "Terminate" (SAFE_TERMINATE) once the UI offers it: Dagster refuses to
    terminate a STARTING run (`TerminateRunFailure`: "could not be terminated due to having
    status STARTING"), and the UI's other choice, force termination, only marks the run
    canceled and leaves its process running. The status the run had when terminated."""
    status = u.wait_for(
        f"{what} terminable (QUEUED or STARTED)",
        lambda: (s := u.run_status(run_id)) in ("QUEUED", "STARTED") and s,
        timeout_s=120,
        state=lambda: u.run_status(run_id),
    )
    results = u.gql.terminate([run_id])
    assert [r["__typename"] for r in results] == ["TerminateRunSuccess"], results
    return status


def wait_no_lease_held(u: Ui, what: str) -> Counter[PartitionStatus]:
    """A terminated run hands back what it did not commit: no ASSIGNED unit, well before its
    leases would expire."""
    return u.wait_for(
        f"hand-back of every lease {what} held",
        lambda: (c := u.counts())[PartitionStatus.ASSIGNED] == 0 and c,
        timeout_s=LEASE_TIMEOUT_S,
        state=lambda: dict(u.counts()),
    )


def wait_backfill_runs_ended(
    u: Ui, backfill_id: str, what: str, timeout_s: float
) -> list[dict[str, Any]]:
    return u.wait_for(
        f"runs of {what}, ended",
        lambda: (
            (rs := u.gql.backfill_status(backfill_id)["runs"])
            and all(r["status"] in TERMINAL_RUN_STATUSES for r in rs)
            and rs
        ),
        timeout_s,
        state=lambda: u.gql.backfill_status(backfill_id),
    )


def wait_backfill_end(u: Ui, backfill_id: str, what: str, timeout_s: float) -> dict[str, Any]:
    """The backfill daemon (every 30 s) marks a backfill done after its runs end."""
    backfill = u.wait_for(
        f"terminal status of the backfill of {what}",
        lambda: (
            (b := u.gql.backfill_status(backfill_id))["status"] in TERMINAL_BACKFILL_STATUSES and b
        ),
        timeout_s,
        state=lambda: u.gql.backfill_status(backfill_id),
    )
    u.note(f"backfill of {what}: {json.dumps(backfill)}")
    return backfill


# -- issue 23: what the UI got wrong, asserted on what the end-to-end test observed -----------


def observed(ui: Ui, key: str) -> Any:
    if key not in ui.observed:
        pytest.skip(f"the end-to-end test did not get as far as {key!r}")
    return ui.observed[key]


@pytest.mark.slow
def test_a_backfill_over_completed_units_succeeds(ui: Ui) -> None:
    backfill = observed(ui, "backfill: done units again")
    assert backfill["status"] == "COMPLETED_SUCCESS", backfill


@pytest.mark.slow
def test_checks_selected_by_a_ui_materialize_are_evaluated(ui: Ui) -> None:
    """The asset's own step evaluates the checks its run planned (`evaluate_planned_checks`):
    each one's latest execution in the Materialize run is SUCCEEDED, not SKIPPED."""
    run = observed(ui, "materialize_run")
    assert run["check_executions"] == {n: ["SUCCEEDED"] for n in sorted(INGESTION_CHECKS)}, run


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_commit_dagster_did_not_record_is_shown_with_its_counts(ui: Ui, spark: Any) -> None:
    """What a run that ended badly leaves (issue 23 point 4): a unit committed in the store that
    Dagster never heard of — made here deterministically by ingesting one free unit outside
    any run. The discovery sensor, switched on again in the UI, records it at its next tick
    (an ended run of the stream, the discovery's canceled one, is new to it), and the UI shows
    the commit's own counts: rows, small objects, bytes and dates, not zeros."""
    u = ui
    observed(u, "backfill: done units again")  # the end-to-end test got to its end
    free = sorted(k for k, status in u.items().items() if status is PartitionStatus.UNASSIGNED)
    assert free, u.report()
    key = free[0]
    env = u.pipeline
    runner = env.lake().ingestion_runner(
        STREAM, env.coordination(), SparkResource(), owner="outside-dagster"
    )
    (outcome,) = runner.ingest([from_partition_key(key)])
    assert outcome.ok and outcome.small_objects > 0 and outcome.bytes > 0, outcome
    assert key not in u.statuses().materialized
    assert u.gql.start_sensor(f"{STREAM}_discovery") == "RUNNING"
    try:
        (shown, *_) = u.wait_for(
            f"the UI showing {key} materialized",
            lambda: u.gql.materializations(INGESTED, [key]),
            timeout_s=120,
            state=lambda: u.gql.sensors()[f"{STREAM}_discovery"]["sensorState"]["ticks"][:1],
        )
    finally:
        u.wait_for(
            "every sensor STOPPED again",
            lambda: stop_running_sensors(u) == [],
            timeout_s=60,
            state=lambda: {n: s["sensorState"]["status"] for n, s in u.gql.sensors().items()},
        )
    u.observed["commit recorded without a run"] = shown
    u.note(f"commit recorded without a run: {json.dumps(shown)}")
    assert shown["runId"] == "", shown  # runless: recorded by the sensor
    commit = outcome.metadata()
    fields = ("rows_written", "rows_quarantined", "small_objects", "bytes", "table_partitions")
    assert {f: shown["metadata"][f] for f in fields} == {f: commit[f] for f in fields}, shown
    assert (
        shown["metadata"]["dagster/row_count"] == outcome.rows_written == OBJECTS_PER_UNIT * RECORDS
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_partition_added_by_hand_fails_saying_discovery_creates_them(ui: Ui) -> None:
    """docs/concepts/recovery.md: a partition added by hand in the UI, without a source object,
    fails saying partitions are created by discovery, and leaves Dagster's partitions: it does
    not stay failed for good, off by one from the store (issue 23)."""
    u = ui
    u.wait_for(
        "asset graph of the loaded code location",
        lambda: u.dev.webserver_up() and "events/ingested" in u.gql.asset_nodes(),
        timeout_s=300,
        state=lambda: "webserver up" if u.dev.webserver_up() else "webserver not answering",
    )
    key = "by-hand/no-such-object.jsonl"
    u.gql.add_dynamic_partition(f"{STREAM}_source_partitions", key)
    assert key in u.statuses().keys
    run_id = u.gql.materialize(INGESTED, key, sorted(INGESTION_CHECKS))
    assert u.wait_run_end(run_id, "the Materialize run of the added partition", 300) == "FAILURE"
    messages = [
        (e["eventType"], (e["message"] or "")[:300])
        for e in u.gql.run_logs(run_id)
        if e.get("stepKey") == "events__ingested" and e["level"] in ("ERROR", "CRITICAL")
    ]
    shown = u.statuses()
    u.observed["hand-added partition"] = {
        "messages": messages,
        "failed": key in shown.failed,
        "store": key in u.items(),
    }
    u.note(f"hand-added partition: {json.dumps(u.observed['hand-added partition'])}")
    assert any("discovery" in m for _, m in messages), messages
    assert key not in shown.keys and key not in shown.failed, shown
    assert key not in u.items()
