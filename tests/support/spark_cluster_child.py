"""The driver of tests/spark/test_cluster.py, in a process of its own (one Spark session per
process; the test session may hold a local one).

`python -m tests.support.spark_cluster_child <payload JSON>`, the payload naming the `mode`,
the `master` or `remote`, and the files it reads and writes. Run as `__main__`, so the task
functions below are pickled by value: the executors need no `tests` package, only what the
session ships (`resources`).

- `probe`: a task per partition imports `resources.spark.code_shipping` and reports where it
  came from and whether the driver's files (`probe_paths`) exist on its machine;
- `blocking`: every task marks its start in `rendezvous` and waits for `rendezvous/release`
  (the test kills a worker meanwhile), then reports its partition, attempt and directory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from resources.spark.session import build_spark_session

RELEASE_WAIT_S = 120.0


def probe_udf(probe_paths: list[str]) -> Any:
    from pyspark.sql.functions import udf

    def probe(partition: int) -> str:
        import os

        import resources
        import resources.spark.code_shipping as shipped

        return json.dumps(
            {
                "partition": partition,
                "resources_file": resources.__file__,
                "module_file": shipped.__file__,
                "visible": {p: os.path.exists(p) for p in probe_paths},
                "pid": os.getpid(),
            }
        )

    return udf(probe, "string")


def run_probe(spark: Any, payload: dict[str, Any]) -> list[dict[str, Any]]:
    from pyspark.sql.functions import spark_partition_id

    probe = probe_udf(payload["probe_paths"])
    frame = spark.range(0, 4, 1, 4).select(probe(spark_partition_id()).alias("report"))
    return [json.loads(row["report"]) for row in frame.collect()]


def run_blocking(spark: Any, payload: dict[str, Any]) -> list[dict[str, Any]]:
    rendezvous = Path(payload["rendezvous"])
    partitions = int(payload["partitions"])

    def blocking(index: int, rows: Any) -> Any:
        import os
        import time

        from pyspark import TaskContext

        attempt = TaskContext.get().attemptNumber()  # type: ignore[union-attr]
        (rendezvous / f"started-{index}-{attempt}-{os.getpid()}").touch()
        deadline = time.monotonic() + RELEASE_WAIT_S
        while not (rendezvous / "release").exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        yield {
            "partition": index,
            "attempt": attempt,
            "cwd": os.getcwd(),
            "released": (rendezvous / "release").exists(),
        }

    rdd = spark.sparkContext.parallelize(range(partitions), partitions)
    return list(rdd.mapPartitionsWithIndex(blocking).collect())


def main() -> None:
    payload = json.loads(sys.argv[1])
    spark = build_spark_session(
        master=payload.get("master"),
        remote=payload.get("remote"),
        app_name=f"leasehold-cluster-{payload['mode']}",
        extra_conf=payload.get("conf"),
    )
    try:
        run = {"probe": run_probe, "blocking": run_blocking}[payload["mode"]]
        report = {"session": type(spark).__module__, "tasks": run(spark, payload)}
    finally:
        spark.stop()
    Path(payload["out"]).write_text(json.dumps(report))


if __name__ == "__main__":
    main()
