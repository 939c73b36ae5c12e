"""Cutting a large uncompressed object into byte ranges at line ends, and numbering them.

Before its ranges are parsed in parallel, one Spark job (one task per nominal range) finds where
each range really starts — just after the first `\\n` at or after its nominal cut — and counts
the `\\n` in it. The driver then knows each range's exact bytes and the object's number of its
first line, so bad records are quarantined with the line the object gives them, and each
range is committed with the offset and line the next one starts at (`unit_progress.CHUNK`).
The price: the object is read twice (the count runs at memory speed; on S3 it doubles the GET
bytes of large objects). Executor side: no Spark here; reads stay within `BLOCK` bytes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa

from resources.ingestion.split_task import StoreAddress
from resources.objects.base import ObjectStore

BLOCK = 8 << 20
WINDOW = 64 << 10
CENSUS_SCHEMA = pa.schema([("range", pa.int64()), ("start", pa.int64()), ("lines", pa.int64())])
CENSUS_DDL = "range bigint, start bigint, lines bigint"


@dataclass(frozen=True)
class CensusJob:
    """One object's nominal cuts: `cuts[0]` is exact (the resume offset), the last is its
    size; range k is `cuts[k]`..`cuts[k + 1]` before the census moves them."""

    stores: StoreAddress
    key: str
    cuts: tuple[int, ...]


def map_census(job: CensusJob, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """`mapInArrow`'s function over the range numbers (`spark.range`'s `id`)."""
    for batch in batches:
        rows = [census(job, int(k)) for k in batch.column("id").to_pylist()]
        yield pa.RecordBatch.from_pylist(rows, schema=CENSUS_SCHEMA)


def census(job: CensusJob, k: int) -> dict[str, int]:
    """Range k's exact start, and the `\\n` it holds up to the next range's exact start."""
    store = job.stores.open(job.stores.source)
    size = job.cuts[-1]
    start = job.cuts[0] if k == 0 else line_start(store, job.key, job.cuts[k], size)
    end = line_start(store, job.key, job.cuts[k + 1], size)
    lines = 0
    at = start
    while at < end:
        block = store.read_range(job.key, at, min(end, at + BLOCK))
        if not block:
            break
        lines += block.count(b"\n")
        at += len(block)
    return {"range": k, "start": start, "lines": lines}


def line_start(store: ObjectStore, key: str, cut: int, size: int) -> int:
    """Where the line holding byte `cut - 1` ends (just after its `\\n`), or `size`: the start
    of the first line that starts at or after `cut`."""
    if cut >= size:
        return size
    at = max(cut - 1, 0)
    if cut == 0:
        return 0
    while at < size:
        window = store.read_range(key, at, min(size, at + WINDOW))
        found = window.find(b"\n")
        if found >= 0:
            return at + found + 1
        if not window:
            break
        at += len(window)
    return size


def exact_ranges(
    census_rows: list[dict[str, int]], size: int, first_line: int
) -> list[tuple[int, int, int, int]]:
    """(start, end, first line, the next range's first line) of each non-empty range, in
    order, from the census rows."""
    rows = sorted(census_rows, key=lambda r: r["range"])
    ranges = []
    line = first_line
    for i, row in enumerate(rows):
        end = rows[i + 1]["start"] if i + 1 < len(rows) else size
        if end > row["start"]:
            ranges.append((row["start"], end, line, line + row["lines"]))
        line += row["lines"]
    return ranges
