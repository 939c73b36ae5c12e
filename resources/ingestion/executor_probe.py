"""`leasehold doctor`'s check that a Spark executor can do a task's work for a stream: import the
task code (shipped, or in the image), with pyarrow and boto3; read the head of a source object;
write, then delete, a scratch object under the table's prefix — all on an executor, with the
executor's own credentials and network, which are what a run's tasks will have.

`probe_stream` runs one Spark task (DataFrame API only: also over Spark Connect) and returns
what it found: a missing library, credential or route shows before a run fails on it.
"""

from __future__ import annotations

import json
import platform
import uuid
from collections.abc import Iterator
from functools import partial
from typing import Any

import pyarrow as pa

from resources.ingestion.split_task import StoreAddress

PROBE_DDL = "report string"
SCRATCH = "_leasehold_doctor"


def probe_stream(spark: Any, stores: StoreAddress) -> dict[str, Any]:
    """The executor's report: `host`, `python`, and `read` and `write`, each "ok ..." or the
    error; raises what Spark raises when the task itself cannot run (no Python, no code)."""
    frame = spark.range(0, 1, 1, 1).mapInArrow(partial(_map_probe, stores), PROBE_DDL)
    (row,) = frame.toArrow().to_pylist()
    report: dict[str, Any] = json.loads(row["report"])
    return report


def _map_probe(stores: StoreAddress, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for _ in batches:
        report = json.dumps(probe(stores))
        yield pa.RecordBatch.from_pylist(
            [{"report": report}], schema=pa.schema([("report", pa.string())])
        )


def probe(stores: StoreAddress) -> dict[str, str]:
    """Executor side: what this host can and cannot do of a task's work for the stream."""
    import boto3

    report = {
        "host": platform.node(),
        "python": platform.python_version(),
        "boto3": boto3.__version__,
    }
    try:
        source = stores.open(stores.source)
        first = source.list_after(None, 1)
        if first:
            head = source.head_bytes(first[0].key, 1024)
            report["read"] = f"ok: {len(head)} bytes of {first[0].key!r}"
        else:
            report["read"] = "ok: the source is listed and empty"
    except Exception as exc:  # noqa: BLE001 - whatever stops it is the report
        report["read"] = f"{type(exc).__name__}: {exc}"
    try:
        table = stores.open(stores.table)
        key = f"{SCRATCH}/probe-{uuid.uuid4().hex}"
        table.put_bytes(key, b"leasehold doctor")
        table.delete(key)
        report["write"] = f"ok: wrote and deleted {table.url(key)}"
    except Exception as exc:  # noqa: BLE001 - whatever stops it is the report
        report["write"] = f"{type(exc).__name__}: {exc}"
    return report
