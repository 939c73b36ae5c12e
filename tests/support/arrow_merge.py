"""A pyarrow stand-in for the Spark `MergeWriter`, for the merge protocol's tests.

What those tests put under load is the protocol around the write — the job lease, publishing
under an attempt-unique prefix, the fenced commit, takeover — not the merge itself. They run
several merger processes at once on a 2-core CI box, where a SparkSession per child would cost
~7 s and ~1 GB each; the Spark merge has its own tests (`MergeWriter` over `local[*]` and Spark
Connect). This writer keeps `MergeWriter.write`'s contract, so the runner cannot tell them apart:
read exactly the given inputs (local paths or `file://` URLs, never a directory), keep the
stream's columns, sort rows by `merge.sort_by` (stable: equal keys keep input order), write
exactly one Parquet object at `target`, and report its length and the row count of its footer
(what was written, not what was meant to be).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from resources.streams import StreamConfig


@dataclass(frozen=True)
class ArrowWritten:
    path: Path
    content_length: int
    row_count: int
    schema_version: int = 1  # it reads version 1's columns only
    dropped_now: int = 0  # it keeps every row (no dedupe policy)


class ArrowMergeWriter:
    def __init__(self, config: StreamConfig, *, min_duration_s: float = 0.0) -> None:
        """`min_duration_s`: a write lasts at least this long. A Spark merge takes seconds, this
        one milliseconds; a race test slows it so that commits land while merges run, as they
        do in production."""
        self.columns = config.column_names
        self.sort_by = config.merge.sort_by or config.event_time
        self.min_duration_s = min_duration_s

    def write(self, inputs: Sequence[str], target: Path) -> ArrowWritten:
        if not inputs:
            raise ValueError("a merge needs at least one input object")
        started = time.monotonic()
        try:
            return self._write(inputs, target)
        finally:
            time.sleep(max(0.0, started + self.min_duration_s - time.monotonic()))

    def _write(self, inputs: Sequence[str], target: Path) -> ArrowWritten:
        tables = [pq.read_table(local_path(i), columns=self.columns) for i in inputs]
        rows = pa.concat_tables(tables).sort_by(self.sort_by)
        target = Path(target).absolute()
        target.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(rows, target)
        return ArrowWritten(target, target.stat().st_size, pq.read_metadata(target).num_rows)


def local_path(path: str) -> str:
    """The runner hands over local paths; a `file://` URL is accepted as `MergeWriter` does."""
    return path[len("file://") :] if path.startswith("file://") else path
