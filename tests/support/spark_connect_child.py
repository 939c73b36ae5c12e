"""Runs the reader over a local Spark Connect server, in its own process.

A Python process holds either a classic session or a Connect one; the test session already
has a classic one, so the Connect run gets a process of its own.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from resources.ingestion.source_reader import SourceReader
from resources.spark.session import build_spark_session
from resources.streams import load_streams


def main() -> None:
    streams, source_dir, staging, out = (Path(a) for a in sys.argv[1:5])
    spark = build_spark_session(remote="local[2]", app_name="leasehold-connect-test")
    assert type(spark).__module__.startswith("pyspark.sql.connect"), type(spark)
    config = load_streams(streams)["events"]
    files = {p.name: p for p in sorted(source_dir.iterdir())}
    results = SourceReader(spark, config).read(files, staging, "connect")
    out.write_text(
        json.dumps(
            {
                key: {
                    "rows_read": r.rows_read,
                    "rows_quarantined": r.rows_quarantined,
                    "dts": sorted(f.dt for f in r.table_files),
                    "unreadable": r.unreadable,
                }
                for key, r in results.items()
            }
        )
    )
    spark.stop()


if __name__ == "__main__":
    main()
