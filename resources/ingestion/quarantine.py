"""Bad records: find what a line-mode read does not know about them, and write quarantine.

Bad records never vanish (docs/architecture.md): each goes to its source's quarantine object with
source key, line number, reason and text. A line-mode read does not know two of those, and they
are found afterwards, for the few bad records only: the text of a line that parsed but fails a
check (no event time, no record id) — a second, text read of just the sources that have such
lines (`lines_failing_checks`) — and the line numbers of bad records, by scanning their (local)
source object in Python (`line_numbers`). A CSV record knows both: it carries its text and line
number from its staging (`csv_records`).
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

from resources.ingestion.batch_results import StagedFile
from resources.ingestion.read_plan import CORRUPT, check_reason, json_schema, source_column
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
    known_lines: dict[int, list[int]],
    groups: dict[str, str],
    line_offsets: dict[str, int],
) -> Iterator[tuple[str, StagedFile]]:
    """One quarantine object per group (work unit) with bad records — source key, line,
    reason, text per record — as (group, staged file). One object per unit rather than per
    source object keeps a unit's commit within one store transaction however many of its
    objects hold a bad line. The raw line of a JSON record that parsed but failed a check is not
    known yet (None) and is looked up here, and a JSON record's line number found in its
    object, shifted by `line_offsets` (a chunk's); a CSV record carries both, its line number
    in `known_lines` (src -> the bad rows' numbers, as the object numbers them)."""
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
        if src in known_lines:
            lines: list[int | None] = list(known_lines[src])
        else:
            shift = line_offsets.get(key, 0)
            lines = [n if n is None else n + shift for n in line_numbers(files[key], raws)]
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


def line_numbers(path: Path, raws: list[str | None]) -> list[int | None]:
    """Number the bad lines by finding them in the object (bad lines are rare; a line-mode read
    cannot number them itself). Equal lines are interchangeable, so the k-th occurrence of a
    text gets the k-th line holding it. Runs of U+FFFD are compared as one, since Java and
    Python may replace one invalid byte sequence with a different number of them.

    The object is read in blocks of whole lines and each bad text is looked for with
    `str.find`: a Python loop over every line cost ~3 ms per 5,000-line object, and held the
    interpreter while the next read's rows came from Spark. A loop over lines stays for texts
    `find` cannot match alone (holding U+FFFD, or empty) and for blocks with many distinct bad
    texts, where one pass over the lines beats one `find` per text."""
    wanted: dict[str, deque[int]] = defaultdict(deque)
    for i, raw in enumerate(raws):
        if raw is not None:
            wanted[_normalized(raw)].append(i)
    numbers: list[int | None] = [None] * len(raws)
    remaining = sum(len(slots) for slots in wanted.values())
    if not remaining:
        return numbers
    by_find = "" not in wanted and not any("\ufffd" in t or "\n" in t for t in wanted)
    before = 0  # lines before the current block
    with open_lines(path) as source:
        for block in _blocks_of_lines(source):
            if by_find and len(wanted) <= MAX_FIND_TEXTS:
                found = _found_by_find(block, wanted)
            else:
                found = _found_by_lines(block, wanted)
            for text, offset_line in found:
                number = before + offset_line
                slots = wanted[text]
                if slots:
                    numbers[slots.popleft()] = number
                    remaining -= 1
            if not remaining:
                break
            before += block.count("\n")
    return numbers


MAX_FIND_TEXTS = 32
"""Distinct bad texts in a block up to which one `find` per text beats one pass over lines."""

BLOCK_CHARS = 4 << 20


def _normalized(text: str) -> str:
    return REPLACEMENTS.sub("\ufffd", text) if "\ufffd" in text else text


def _blocks_of_lines(source: Any) -> Iterator[str]:
    """The text in blocks of whole lines, each ending with "\n" (the last one given one)."""
    carry = ""
    while True:
        chunk = source.read(BLOCK_CHARS)
        if not chunk:
            if carry:
                yield carry + "\n"
            return
        text = carry + chunk
        cut = text.rfind("\n") + 1
        carry = text[cut:]
        if cut:
            yield text[:cut]


def _found_by_find(block: str, wanted: dict[str, deque[int]]) -> list[tuple[str, int]]:
    """(text, line within the block, from 1) of each whole line of `block` equal to a wanted
    text, in line order per text."""
    hits: list[tuple[int, str]] = []
    for text in wanted:
        end = len(text)
        pos = block.find(text)
        while pos >= 0:
            if (pos == 0 or block[pos - 1] == "\n") and block[pos + end] == "\n":
                hits.append((pos, text))
            pos = block.find(text, pos + 1)
    hits.sort()
    found, line, counted = [], 1, 0
    for pos, text in hits:
        line += block.count("\n", counted, pos)
        counted = pos
        found.append((text, line))
    return found


def _found_by_lines(block: str, wanted: dict[str, deque[int]]) -> list[tuple[str, int]]:
    found = []
    for number, line in enumerate(block[:-1].split("\n"), start=1):
        text = _normalized(line)
        if text in wanted:
            found.append((text, number))
    return found
