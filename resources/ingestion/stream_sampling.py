"""Sample a source for `leasehold init`: a bounded head of a few objects.

The sample is bounded twice — `sample_objects` objects spread over the first listing page,
the first `sample_bytes` of each (decompressed, cut at a line end; CSV at a record's end) — so
inferring a stream costs the same on a prefix of ten objects or ten million. The heads are
staged as files named by index: JSON lines are first read as text lines by Spark's text
reader for the inference (`sample_lines`; CSV is inferred in Python from the same parse the
runtime uses), then parsed with the inferred stream exactly as a run's tasks parse objects
(`trial_read`), which counts what would go to the table and what to quarantine before anything
is written.
"""

from __future__ import annotations

import zlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resources.ingestion.csv_records import CsvFormat, CsvHeaderError, complete_records
from resources.ingestion.source_files import INPUT_DIGITS
from resources.ingestion.stream_inference import (
    BOM,
    GZIP_MAGIC,
    ObjectFormat,
    SourceInferenceError,
    detect_format,
)
from resources.objects.base import ObjectInfo, ObjectStore, ObjectStoreError
from resources.streams import StreamConfig

LIST_LIMIT = 10_000
"""Objects listed to count formats; the sample is spread over them."""
SAMPLE_BYTES = 256 << 10
"""Text sampled per object: a few hundred to a few thousand records."""


@dataclass
class SampledObject:
    """One source object sampled for inference: its key, size, format and the text read."""

    key: str
    size: int
    format: ObjectFormat
    text: str = ""  # its sampled text, cut at a line end

    @property
    def header(self) -> str:
        """The first line: a CSV object's header."""
        return self.text.partition("\n")[0].rstrip("\r")


@dataclass
class SourceSample:
    """What sampling a source found: the objects listed and those sampled."""

    listed: list[ObjectInfo]
    complete: bool  # the listing holds every object (fewer than LIST_LIMIT)
    sampled: list[SampledObject]


def sample_source(
    store: ObjectStore,
    *,
    sample_objects: int,
    sample_bytes: int = SAMPLE_BYTES,
    list_limit: int = LIST_LIMIT,
) -> SourceSample:
    """List the source (up to `list_limit` objects), then read the head of `sample_objects`
    non-empty ones spread evenly over that listing: nested folders and late keys are sampled
    as well as the first."""
    listed = store.list_after(None, list_limit)
    if not listed:
        raise SourceInferenceError(f"no objects under {store.root_url}: nothing to infer from")
    non_empty = [o for o in listed if o.size > 0]
    if not non_empty:
        raise SourceInferenceError(
            f"the {len(listed)} objects under {store.root_url} are all empty: nothing to infer from"
        )
    step = max(1, len(non_empty) / max(1, sample_objects))
    picked = sorted({int(i * step) for i in range(min(sample_objects, len(non_empty)))})
    sampled = [_sample(store, non_empty[i], sample_bytes) for i in picked]
    return SourceSample(listed, len(listed) < list_limit, sampled)


def _sample(store: ObjectStore, info: ObjectInfo, sample_bytes: int) -> SampledObject:
    try:
        head = store.head_bytes(info.key, sample_bytes)
    except (OSError, ObjectStoreError) as exc:
        raise SourceInferenceError(f"cannot read {store.url(info.key)}: {exc}") from exc
    data, whole = head, len(head) >= info.size
    if head[:2] == GZIP_MAGIC:
        inflate = zlib.decompressobj(wbits=31)
        try:
            data = inflate.decompress(head, sample_bytes)
        except zlib.error as exc:
            data = b""
            fmt = ObjectFormat(None, True, problem=f"corrupt gzip: {exc}")
            return SampledObject(info.key, info.size, fmt)
        whole = inflate.eof and len(data) < sample_bytes
    if not whole:  # cut at the last line end: a partial last line is not a malformed record
        data = data[: data.rfind(b"\n") + 1]
    text = data.decode("utf-8", errors="replace").removeprefix(BOM)
    fmt = detect_format(info.key, head, text)
    if fmt.format == "csv" and not whole:  # nor a record cut inside a quoted line break
        text = complete_records(text, CsvFormat(fmt.delimiter))
    return SampledObject(info.key, info.size, fmt, text)


def stage_sample(sampled: list[SampledObject], directory: Path) -> Path:
    """Each sampled object's text as a file Spark reads and maps back to it by name (the
    runtime's staging: `INPUT_DIGITS` digits of its index, keys may hold any character). A
    CSV head is staged as is."""
    directory.mkdir(parents=True, exist_ok=True)
    for i, obj in enumerate(sampled):
        (directory / f"{i:0{INPUT_DIGITS}d}.txt").write_text(obj.text, encoding="utf-8")
    return directory


def source_column() -> Any:
    """The index of the staged object a row came from, out of the staged file's name."""
    from pyspark.sql import functions as F

    return F.substring("_metadata.file_name", 1, INPUT_DIGITS).cast("int").alias("src")


def sample_lines(spark: Any, staged: Path) -> dict[int, list[str]]:
    """Every staged line, by the index of the object it came from: Spark's text reader splits
    and decodes lines as a run's read does."""
    rows = spark.read.text(str(staged)).select(source_column(), "value").collect()
    lines: dict[int, list[str]] = {}
    for row in rows:
        lines.setdefault(int(row["src"]), []).append(row["value"])
    return lines


def trial_read(spark: Any, config: StreamConfig, staged: Path) -> Counter[str | None]:
    """Records of the staged sample by why they would be quarantined (None: to the table),
    parsed exactly as a run's Spark tasks parse objects (`record_parser`). `spark` is unused:
    the parser needs none (kept so `sample_lines` and this take the same arguments)."""
    from resources.ingestion.record_parser import parse_csv, parse_json_lines

    counts: Counter[str | None] = Counter()
    for head in sorted(staged.iterdir()):
        data = head.read_bytes()
        try:
            parsed = (
                parse_csv(data, config)
                if config.format == "csv"
                else parse_json_lines(data, config)
            )
        except CsvHeaderError as exc:
            raise SourceInferenceError(str(exc)) from None
        counts[None] += parsed.rows.num_rows
        counts.update(parsed.bad.column("reason").to_pylist())
    return +counts
