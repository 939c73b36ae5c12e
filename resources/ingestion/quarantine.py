"""Bad records: find what a line-mode read does not know about them, and write quarantine.

Bad records never vanish (ARCHITECTURE §7): each goes to its source's quarantine object with
source key, line number, reason and text. A line-mode read does not know two of those, and they
are found afterwards, for the few bad records only: the text of a line that parsed but fails a
check (no event time, no record id) — a second, text read of just the sources that have such
lines (`lines_failing_checks`) — and the line numbers of bad records, by scanning their (local)
source object in Python (`line_numbers`).
"""

from __future__ import annotations

import re
import uuid
from collections import defaultdict, deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.ingestion.read_plan import CORRUPT, check_reason, json_schema, source_column
from resources.ingestion.runner import StagedFile
from resources.ingestion.source_files import INPUT_DIGITS, open_lines
from resources.streams import StreamConfig

REPLACEMENTS = re.compile("\ufffd+")

BadRows = dict[int, tuple[list[str], list[str | None]]]
"""src -> (reasons, raw lines) of its bad records, in their order in the object; a raw line is
None where the read does not know it (a JSON record that parsed but failed a check)."""


def write_quarantine(
    spark: Any,
    config: StreamConfig,
    files: dict[str, Path],
    index: dict[int, str],
    bad: BadRows,
    inputs: Path,
    out: Path,
    attempt: str,
    header_skipped: bool,
    groups: dict[str, str],
    line_offsets: dict[str, int],
) -> Iterator[tuple[str, StagedFile]]:
    """One quarantine object per group (work unit) with bad records — source key, line,
    reason, text per record — as (group, staged file). One object per unit rather than per
    source object keeps a unit's commit within one store transaction however many of its
    objects hold a bad line. The raw line of a JSON record that parsed but failed a check is not
    known yet (None) and is looked up here."""
    unseen = sorted(src for src, (_, raws) in bad.items() if None in raws)
    if unseen:
        again = [next(inputs.glob(f"{src:0{INPUT_DIGITS}d}.*")) for src in unseen]
        found = lines_failing_checks(spark, config, again)
        for src in unseen:
            reasons, raws = bad[src]
            for i, (reason, raw) in enumerate(zip(reasons, raws, strict=True)):
                if raw is None and found[src][reason]:
                    raws[i] = found[src][reason].popleft()
    by_group: dict[str, list[pa.Table]] = defaultdict(list)
    for src, (reasons, raws) in sorted(bad.items()):
        key = index[src]
        shift = line_offsets.get(key, 0)
        lines = [
            n if n is None else n + shift for n in line_numbers(files[key], raws, header_skipped)
        ]
        table = {
            "source_key": pa.array([key] * len(raws), pa.string()),
            "line": pa.array(lines, pa.int64()),
            "reason": pa.array(reasons, pa.string()),
            "raw": pa.array(raws, pa.string()),
        }
        by_group[groups[key]].append(pa.table(table))
    for group, tables in by_group.items():
        rows = pa.concat_tables(tables)
        # Unique per call too: a unit read in several reads writes a quarantine object per read.
        target = out / f"{attempt}-{uuid.uuid4().hex[:12]}-quarantine.parquet"
        pq.write_table(rows, target)
        yield group, StagedFile("", target, rows.num_rows, target.stat().st_size)


def lines_failing_checks(
    spark: Any, config: StreamConfig, staged: list[Path]
) -> dict[int, dict[str, deque[str]]]:
    """src -> reason -> text of each line that parses but fails a check, read again as text
    from only the objects that have such lines, and parsed as the JSON reader parses them (the
    same Jackson parser and types; a leading byte-order mark skipped; an array line's records
    each checked) so that the same lines fail."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType

    schema, options = json_schema(config)
    text = F.regexp_replace("raw", "^\ufeff", "")
    records = F.when(
        F.ltrim(text).startswith("["), F.from_json(text, ArrayType(schema), options)
    ).otherwise(F.array(F.from_json(text, schema, options)))
    rows = (
        spark.read.text([str(path) for path in staged])
        .select(source_column(), F.col("value").alias("raw"))
        .where(F.is_valid_utf8("raw"))
        .select("src", "raw", F.explode(records).alias("p"))
        .where(F.col("p").isNotNull() & F.col(f"p.{CORRUPT}").isNull())
        .select("src", "raw", "p.*")
        .select("src", "raw", check_reason(config).alias("reason"))
        .where(F.col("reason").isNotNull())
        .collect()
    )
    found: dict[int, dict[str, deque[str]]] = defaultdict(lambda: defaultdict(deque))
    for row in rows:
        found[row["src"]][row["reason"]].append(row["raw"])
    return found


def line_numbers(path: Path, raws: list[str | None], header_skipped: bool) -> list[int | None]:
    """Number the bad lines by finding them in the object (bad lines are rare; a line-mode read
    cannot number them itself). Equal lines are interchangeable, so the k-th occurrence of a
    text gets the k-th line holding it. Runs of U+FFFD are compared as one, since Java and
    Python may replace one invalid byte sequence with a different number of them."""

    def norm(text: str) -> str:
        return REPLACEMENTS.sub("\ufffd", text) if "\ufffd" in text else text

    wanted: dict[str, deque[int]] = defaultdict(deque)
    for i, raw in enumerate(raws):
        if raw is not None:
            wanted[norm(raw)].append(i)
    numbers: list[int | None] = [None] * len(raws)
    remaining = sum(len(slots) for slots in wanted.values())
    if not remaining:
        return numbers
    with open_lines(path) as lines:
        for number, line in enumerate(lines, start=1):
            if header_skipped and number == 1:
                continue
            slots = wanted.get(norm(line.rstrip("\n")))
            if slots:
                numbers[slots.popleft()] = number
                remaining -= 1
                if not remaining:
                    break
    return numbers
