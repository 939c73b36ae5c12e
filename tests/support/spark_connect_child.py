"""Runs the reader (its Spark tasks parse and write), then the merge writer on what it wrote,
over a local Spark Connect server, in its own process.

A Python process holds either a classic session or a Connect one; the test session already
has a classic one, so the Connect run gets a process of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pyarrow.parquet as pq

from resources.compaction.merge_writer import MergeWriter
from resources.ingestion.split_task import StoreAddress
from resources.ingestion.task_reader import TaskReader
from resources.ingestion.work_units import UnitObject
from resources.spark.session import build_spark_session
from resources.streams import load_streams


def main() -> None:
    streams, source_dir, work, out = (Path(a) for a in sys.argv[1:5])
    spark = build_spark_session(remote="local[2]", app_name="leasehold-connect-test")
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    config = load_streams(streams)["events"]
    reading = {p.name: [UnitObject(p.name, p.stat().st_size)] for p in sorted(source_dir.iterdir())}
    results = TaskReader(spark, config, StoreAddress.of(config, None, None)).read(reading, "c")
    report: dict[str, object] = {
        key: {
            "rows_read": r.rows_read,
            "rows_quarantined": r.rows_quarantined,
            "dts": sorted(f.dt for f in r.table_files),
            "unreadable": r.unreadable,
        }
        for key, r in results.items()
    }
    # The merge of the last date's small objects, as a merge job would take them.
    dt = max(f.dt for r in results.values() for f in r.table_files)
    inputs = [
        f.url.removeprefix("file://") for r in results.values() for f in r.table_files if f.dt == dt
    ]
    # On Spark (a zero Arrow budget): the path a merge too big for memory takes, over Connect.
    merge = MergeWriter(spark, config, arrow_max_bytes=0)
    written = merge.write(inputs, work / "merged" / "part.parquet")
    report["merged"] = {
        "dt": dt,
        "inputs": len(inputs),
        "row_count": written.row_count,
        "event_ids": pq.read_table(written.path)["event_id"].to_pylist(),
        "same_schema": pq.read_schema(written.path).remove_metadata()
        == pq.read_schema(inputs[0]).remove_metadata(),
    }
    out.write_text(json.dumps(report))
    spark.stop()


if __name__ == "__main__":
    main()
