"""A standalone cluster whose workers see none of the driver's disk
(tests/support/spark_cluster.py): the project's code reaches the executors with the session
(resources/spark/code_shipping.py), classic and over Spark Connect, and a job survives a worker
SIGKILLed mid-task."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.spark_cluster import SparkCluster, driver_env, source_package_dirs, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(420)]

ROOT = Path(__file__).resolve().parents[2]
CHILD_TIMEOUT_S = 240.0
PARTITIONS = 4


@pytest.fixture(scope="module")
def driver_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The driver's work and data directories, a file in the work one."""
    root = tmp_path_factory.mktemp("driver")
    dirs = {"work": root / "work", "data": root / "data"}
    for d in dirs.values():
        d.mkdir()
    (dirs["work"] / "probe.txt").write_text("the driver's own file")
    return dirs


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, driver_dirs: dict[str, Path]
) -> Iterator[SparkCluster]:
    hidden = [driver_dirs["work"], driver_dirs["data"], *source_package_dirs()]
    root = tmp_path_factory.mktemp("cluster")
    with SparkCluster(root, hidden=hidden, workers=2, connect=True) as started:
        yield started


def run_driver(
    payload: dict[str, Any], dirs: dict[str, Path], out: Path
) -> subprocess.Popen[bytes]:
    env = driver_env(
        {
            "LEASEHOLD_DATA_DIR": str(dirs["data"]),
            "LEASEHOLD_WORK_DIR": str(dirs["work"]),
            "PYTHONPATH": str(ROOT),
        }
    )
    payload = {**payload, "out": str(out), "conf": SparkCluster.executor_conf()}
    return subprocess.Popen(
        [sys.executable, "-m", "tests.support.spark_cluster_child", json.dumps(payload)],
        cwd=ROOT,
        env=env,
    )


def finished(proc: subprocess.Popen[bytes], out: Path, cluster: SparkCluster) -> dict[str, Any]:
    try:
        code = proc.wait(CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        raise AssertionError(
            f"the driver did not finish in {CHILD_TIMEOUT_S:.0f} s\n{cluster.logs()}"
        ) from None
    assert code == 0, f"the driver exited with {code}\n{cluster.logs()}"
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def probe_paths(dirs: dict[str, Path]) -> list[str]:
    return [str(dirs["work"] / "probe.txt")] + [
        str(d / "__init__.py") for d in source_package_dirs()
    ]


def assert_shipped_and_hidden(report: dict[str, Any], dirs: dict[str, Path]) -> None:
    tasks = report["tasks"]
    assert sorted(t["partition"] for t in tasks) == list(range(PARTITIONS))
    for task in tasks:
        # The package came from the shipped zip: the driver's copies are not on the executors.
        assert ".zip" in task["resources_file"], task
        assert ".zip" in task["module_file"], task
        assert task["visible"] == {p: False for p in probe_paths(dirs)}, task
    # ... while they are there for the driver.
    assert all(Path(p).exists() for p in probe_paths(dirs))


def test_code_is_shipped_to_workers_that_see_none_of_the_driver_disk(
    cluster: SparkCluster, driver_dirs: dict[str, Path], tmp_path: Path
) -> None:
    payload = {
        "mode": "probe",
        "master": cluster.master_url,
        "probe_paths": probe_paths(driver_dirs),
    }
    out = tmp_path / "probe.json"
    report = finished(run_driver(payload, driver_dirs, out), out, cluster)
    assert report["session"].startswith("pyspark.sql.session"), report["session"]
    assert_shipped_and_hidden(report, driver_dirs)


def test_code_is_shipped_over_spark_connect_to_a_server_that_sees_none_of_it(
    cluster: SparkCluster, driver_dirs: dict[str, Path], tmp_path: Path
) -> None:
    payload = {
        "mode": "probe",
        "remote": cluster.connect_url,
        "probe_paths": probe_paths(driver_dirs),
    }
    out = tmp_path / "connect.json"
    report = finished(run_driver(payload, driver_dirs, out), out, cluster)
    assert report["session"].startswith("pyspark.sql.connect"), report["session"]
    assert_shipped_and_hidden(report, driver_dirs)


def started_on(rendezvous: Path, pids: set[int]) -> list[Path]:
    """The start marks (`started-<partition>-<attempt>-<pid>`) of tasks run by `pids`."""
    return [m for m in rendezvous.glob("started-*") if int(m.name.split("-")[3]) in pids]


def test_a_job_survives_a_worker_killed_mid_task(
    cluster: SparkCluster, driver_dirs: dict[str, Path], tmp_path: Path
) -> None:
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    payload = {
        "mode": "blocking",
        "master": cluster.master_url,
        "rendezvous": str(rendezvous),
        "partitions": PARTITIONS,
    }
    out = tmp_path / "blocking.json"
    proc = run_driver(payload, driver_dirs, out)
    try:
        victim: list[Path] = []

        def a_task_runs_on_worker_0() -> bool:
            assert proc.poll() is None, f"the driver exited with {proc.returncode}"
            victim[:] = started_on(rendezvous, {p for p, _ in cluster.worker_processes(0)})
            return bool(victim)

        wait_until("task running on worker-0", a_task_runs_on_worker_0, 120, cluster.logs)
        killed = cluster.kill_worker(0)
        assert any("CoarseGrainedExecutorBackend" in cmd for _, cmd in killed), killed
        assert any("pyspark.daemon" in cmd for _, cmd in killed), killed
        assert cluster.worker_processes(0) == []
    finally:
        (rendezvous / "release").touch()
    report = finished(proc, out, cluster)
    tasks = report["tasks"]
    # Every partition's result once, all of them from the surviving worker.
    assert sorted(t["partition"] for t in tasks) == list(range(PARTITIONS))
    assert all(t["released"] for t in tasks)
    survivor = str(cluster.worker(1).root)
    assert all(t["cwd"].startswith(survivor) for t in tasks), tasks
    # The killed task ran again, as a later attempt.
    killed_partition = int(victim[0].name.split("-")[1])
    retried = next(t for t in tasks if t["partition"] == killed_partition)
    assert retried["attempt"] >= 1, (retried, sorted(m.name for m in rendezvous.iterdir()))
