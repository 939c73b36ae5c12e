"""`leasehold run` on a Spark cluster whose machines see none of the run worker's disk (issue 34).

A standalone master and two workers (tests/support/spark_cluster.py), each worker in a mount
namespace of its own with an empty tmpfs over the run worker's `LEASEHOLD_WORK_DIR` and
`LEASEHOLD_DATA_DIR` and over the project's package directories, and a Spark Connect server
hidden the same way. The sources and the tables are on the loopback S3 server, the leases on
its DynamoDB, the catalog its Glue (tests/support/cluster_run.py): the executors fetch, parse
and write with their own credentials (the cluster's environment, `SparkCluster.env`), nothing
of them comes from the driver, and the project's code reaches them with the session.

- `LEASEHOLD_SPARK_MASTER=spark://…`: every record is published once, and the tasks ran on
  both workers, none failed (the driver's event log, `spark.eventLog.*` in a
  `spark-defaults.conf` of the run worker's `SPARK_CONF_DIR`; each executor found by its
  directory under a worker's work dir);
- the same with worker 0 SIGKILLed (its JVM, its executor, their Python workers) while one of
  its tasks is between two parts: worker 0's S3 requests go through a proxy of its own
  (`HTTP_PROXY`, tests/support/gate_proxy.py) that holds its first source GET after its first
  table PUT, and the kill lands then. The event log shows that task lost with its executor
  (`ExecutorLostFailure`) and run again, to success, on worker 1; the object the dead attempt
  wrote is on S3, no commit names it (the ledger), and the table is still exact;
- `LEASEHOLD_SPARK_REMOTE=sc://…`: the same run through the Connect server (`local[2]`: its
  own executors, in its own hidden namespace; on the cluster's master it would hold both
  workers' cores for as long as it runs).

Nothing of ingestion passes through the run worker's disk: its work directory, polled while
the run runs, only ever holds merge scratch (merges of small table objects are done on the run
worker, in pyarrow), and nothing after it (`KEPT`).

The sources are clean JSON lines, plain and gzip (`cluster_run.source_objects` has the spot for
malformed lines). 110 s on this project's shared 2 cores (cluster start 13 s, three runs of
22-38 s each).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer
from tests.support.cli_project import kill_group
from tests.support.cluster_run import (
    RunHost,
    RunLake,
    Sources,
    SparkApp,
    source_objects,
    spark_app,
)
from tests.support.gate_proxy import GateProxy
from tests.support.spark_cluster import (
    SparkCluster,
    command_line,
    source_package_dirs,
    wait_until,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

# 12 units of 5 objects, ~0.3-0.4 MB each: a unit is a part of its own, and parts are packed into
# tasks of about 1 MiB (split_plan.pack_tasks), so the read job has ~5 tasks of 2-3 parts for
# the 2 workers; a task writes a part's table object before it fetches the next part's sources.
OBJECTS, RECORDS, DAYS, GZIP_EVERY, UNIT_OBJECTS = 60, 800, 2, 4, 5
RUN_TIMEOUT_S = 180.0
TASK_START_TIMEOUT_S = 120.0
SCENARIOS = ("master", "killed", "connect")
KEPT: frozenset[str] = frozenset()
"""Files the runner itself keeps under its work directory after a run: none."""
MERGE_SCRATCH = "merge-"
"""The one thing a run writes there meanwhile: a merge's scratch (merges of small table objects
run on the run worker, in pyarrow, and remove it: resources/compaction/merge_runner.py)."""


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunHost]:
    """A run worker's directories per scenario (all hidden from the cluster)."""
    root = tmp_path_factory.mktemp("run-workers")
    return {name: RunHost(root / name).make() for name in SCENARIOS}


@pytest.fixture(scope="module")
def proxy() -> Iterator[GateProxy]:
    """Worker 0's HTTP proxy: its executors' S3 requests, and the gate the kill waits at."""
    with GateProxy() as started:
        yield started


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, hosts: dict[str, RunHost], proxy: GateProxy
) -> Iterator[SparkCluster]:
    hidden = [d for host in hosts.values() for d in host.hidden] + source_package_dirs()
    root = tmp_path_factory.mktemp("cluster")
    via_proxy = {"HTTP_PROXY": proxy.url, "http_proxy": proxy.url, "NO_PROXY": "", "no_proxy": ""}
    with SparkCluster(
        root, hidden=hidden, connect=True, env=AWS_TEST_ENV, worker_env={0: via_proxy}
    ) as started:
        yield started


@pytest.fixture(scope="module")
def sources() -> Sources:
    return source_objects(OBJECTS, RECORDS, DAYS, GZIP_EVERY)


def lake_for(host: RunHost, aws_server: LocalAwsServer, sources: Sources) -> RunLake:
    lake = RunLake(aws_server.endpoint_url).create(sources)
    lake.streams_yaml(host.root / "streams.yaml", UNIT_OBJECTS)
    return lake


def master_env(host: RunHost, lake: RunLake, cluster: SparkCluster) -> dict[str, str]:
    spark = {
        "LEASEHOLD_SPARK_MASTER": cluster.master_url,
        "SPARK_CONF_DIR": str(host.spark_conf_dir()),
    }
    return host.env(lake.env(host.root / "streams.yaml"), spark)


def assert_published_once(lake: RunLake, sources: Sources, context: str) -> None:
    ids = lake.published_ids()
    lost = sources.ids - ids
    twice = {i: n for i, n in ids.items() if n > 1}
    extra = set(ids) - set(sources.ids)
    assert not lost and not twice and not extra, (
        f"{len(lost)} lost (e.g. {sorted(lost)[:5]}), {len(twice)} twice "
        f"(e.g. {sorted(twice)[:5]}), {len(extra)} not in the sources\n{context}"
    )


def assert_work_dir_kept_only(host: RunHost) -> None:
    """After the run, nothing under the work directory but `KEPT`; while it ran, nothing but
    merge scratch: no source object, no row of ingestion passed through the driver's disk."""
    left = [f for f in host.files_written() if f not in KEPT]
    assert not left, f"left under the run worker's work dir {host.work}: {left[:20]}"
    other = sorted(f for f in host.seen if not f.startswith(MERGE_SCRATCH))
    assert not other, f"written under the run worker's work dir {host.work}: {other[:20]}"
    print(f"seen under the work dir while the run ran: {sorted(host.seen)[:12]}")


def test_leasehold_run_on_a_cluster_publishes_every_record_once(
    cluster: SparkCluster, hosts: dict[str, RunHost], aws_server: LocalAwsServer, sources: Sources
) -> None:
    host = hosts["master"]
    lake = lake_for(host, aws_server, sources)
    out = host.finish(
        host.start_run(master_env(host, lake, cluster)), RUN_TIMEOUT_S, cluster.logs()
    )
    app = spark_app(host.events)
    by_worker = app.by_worker(cluster)
    print(f"tasks by worker (end reasons): {by_worker}\n{out[-2000:]}")
    assert_published_once(lake, sources, out[-3000:])
    assert_work_dir_kept_only(host)
    # Tasks ran on both workers, and none failed.
    assert all(counts["Success"] for counts in by_worker.values()), by_worker
    assert all(set(counts) == {"Success"} for counts in by_worker.values()), by_worker


def test_a_worker_killed_mid_task_is_survived_and_its_files_never_read(
    cluster: SparkCluster,
    hosts: dict[str, RunHost],
    aws_server: LocalAwsServer,
    sources: Sources,
    proxy: GateProxy,
) -> None:
    host = hosts["killed"]
    lake = lake_for(host, aws_server, sources)
    gate = proxy.arm(f"/{lake.lake_bucket}/tables/", f"/{lake.source_bucket}/events/")
    proc = host.start_run(master_env(host, lake, cluster))
    try:

        def worker_0_wrote_and_fetches_more() -> bool:
            assert proc.poll() is None, f"the run ended first\n{host.output()[-3000:]}"
            host.seen.update(host.files_written())
            return gate.holding.is_set()

        wait_until(
            "task on worker-0 that wrote a table object and fetches its next part",
            worker_0_wrote_and_fetches_more,
            TASK_START_TIMEOUT_S,
            lambda: f"{host.output()[-3000:]}\n{cluster.logs()}",
        )
        killed = cluster.kill_worker(0)
    except BaseException:
        kill_group(proc)
        raise
    finally:
        proxy.release()
    assert any("CoarseGrainedExecutorBackend" in cmd for _, cmd in killed), killed
    assert sum("pyspark.daemon" in cmd for _, cmd in killed) >= 2, killed  # daemon + worker
    out = host.finish(proc, RUN_TIMEOUT_S, cluster.logs())

    app = spark_app(host.events)
    assert_lost_and_run_again(app, cluster)
    assert_published_once(lake, sources, out[-3000:])
    assert_work_dir_kept_only(host)
    # The dead attempt's files are there, and no commit names them: never read.
    dead = {f"s3://{path.lstrip('/')}" for path in gate.written}
    on_s3 = {f"s3://{lake.lake_bucket}/{key}" for key in lake.table_objects()}
    committed = lake.ledger_urls()
    print(f"the dead attempt wrote {sorted(dead)}; {len(committed)} objects committed")
    assert dead and dead <= on_s3, (dead, sorted(on_s3))
    assert not dead & committed, (
        f"committed: {sorted(dead & committed)} — worker 0's task had ended before the held "
        "GET (a task of one part?), so the kill did not catch an attempt with files of its own"
    )


def assert_lost_and_run_again(app: SparkApp, cluster: SparkCluster) -> None:
    """The kill landed while a task ran on worker 0: Spark saw that task lost with its
    executor, and ran it again, to success, on worker 1."""
    by_worker = app.by_worker(cluster)
    lost = [t for t in app.tasks if t.reason == "ExecutorLostFailure"]
    print(f"tasks by worker (end reasons): {by_worker}\nlost: {lost}")
    assert lost and all(app.worker_of(cluster, t.executor) == 0 for t in lost), app.tasks
    for task in lost:
        again = [
            t
            for t in app.tasks
            if (t.stage, t.index) == (task.stage, task.index) and t.attempt > task.attempt
        ]
        assert any(t.reason == "Success" for t in again), (task, app.tasks)
        assert all(app.worker_of(cluster, t.executor) == 1 for t in again), (task, again)


def test_leasehold_run_through_spark_connect_publishes_every_record_once(
    cluster: SparkCluster, hosts: dict[str, RunHost], aws_server: LocalAwsServer, sources: Sources
) -> None:
    host = hosts["connect"]
    lake = lake_for(host, aws_server, sources)
    env = host.env(
        lake.env(host.root / "streams.yaml"), {"LEASEHOLD_SPARK_REMOTE": cluster.connect_url}
    )
    out = host.finish(host.start_run(env), RUN_TIMEOUT_S, cluster.logs())
    print(out[-2000:])
    assert_published_once(lake, sources, out[-3000:])
    assert_work_dir_kept_only(host)
    # The tasks ran in the Connect server's namespace: its executors' Python workers.
    server = next(d for d in cluster.daemons if d.name == "connect")
    workers = [pid for pid in server.tree() if "pyspark.daemon" in command_line(pid)]
    assert workers, f"no Python worker under the Connect server\n{server.tail()}"
