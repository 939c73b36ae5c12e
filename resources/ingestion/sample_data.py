"""Deterministic JSON-lines source objects for the main job's demo run and the benchmarks.

Keys are date-prefixed (`2026/01/01/part-00000.jsonl`), the layout the lister's cursor relies
on; record ids are globally unique, so any duplicate in the table is a real duplicate.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

START = datetime(2026, 1, 1, tzinfo=timezone.utc)


def write_sample_sources(
    directory: Path,
    *,
    objects: int,
    records_per_object: int,
    days: int = 3,
    malformed_every: int = 0,
) -> list[Path]:
    """Write `objects` files spread over `days` dates. With `malformed_every=n`, every n-th
    record is a truncated line, so the quarantine path is exercised too."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    per_day = max(1, -(-objects // days))
    record = 0
    for i in range(objects):
        day = START + timedelta(days=i // per_day)
        path = directory / day.strftime("%Y/%m/%d") / f"part-{i:05d}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for j in range(records_per_object):
            record += 1
            at = day + timedelta(seconds=(j * 86399) // max(1, records_per_object))
            line = record_line(record, at)
            if malformed_every and record % malformed_every == 0:
                line = line[: len(line) // 2]
            lines.append(line)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths


def record_line(record: int, at: datetime) -> str:
    """The JSON line of the `record`-th sample record (its id is unique across the sample)."""
    return json.dumps(
        {
            "event_id": f"e{record:012d}",
            "user_id": f"u{record % 997}",
            "amount": round((record % 10007) / 100, 2),
            "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
    )


def write_story_sources(
    directory: Path,
    *,
    objects: int = 300,
    records_per_object: int = 40,
    days: int = 5,
    gzip_every: int = 4,
    late_every: int = 50,
    malformed_every: int = 997,
) -> SampleSummary:
    """The main job's sample: what a real landing prefix looks like, so the first run shows
    every path a user's data will take. Objects are spread over `days` date folders in batch
    folders whose names hold spaces (`2026/01/02/batch 03/part 00123.jsonl`); every
    `gzip_every`-th object is gzipped (`.jsonl.gz`); every `late_every`-th record is a late
    event (its event time is the day before its folder's, so it lands in an earlier table
    partition); every `malformed_every`-th record is a truncated line (quarantined)."""
    directory.mkdir(parents=True, exist_ok=True)
    per_day = max(1, -(-objects // days))
    summary = SampleSummary()
    record = 0
    for i in range(objects):
        day = START + timedelta(days=i // per_day)
        batch = (i % per_day) // 25 + 1
        name = f"part {i:05d}.jsonl" + (".gz" if gzip_every and i % gzip_every == 0 else "")
        path = directory / day.strftime("%Y/%m/%d") / f"batch {batch:02d}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        lines = []
        for j in range(records_per_object):
            record += 1
            at = day + timedelta(seconds=(j * 86399) // max(1, records_per_object))
            if late_every and record % late_every == 0 and day > START:
                at -= timedelta(days=1)
                summary.late += 1
            line = record_line(record, at)
            if malformed_every and record % malformed_every == 0:
                line = line[: len(line) // 2]
                summary.malformed += 1
            lines.append(line)
        data = ("\n".join(lines) + "\n").encode("utf-8")
        if path.name.endswith(".gz"):
            data = gzip.compress(data, mtime=0)
            summary.gzipped += 1
        path.write_bytes(data)
        summary.objects += 1
    summary.records, summary.days = record, min(days, objects)
    return summary


@dataclass
class SampleSummary:
    """What the sample data generator wrote: objects, records, days, and how many were gzipped or
    late."""

    objects: int = 0
    records: int = 0
    days: int = 0
    gzipped: int = 0
    late: int = 0
    malformed: int = 0

    def describe(self) -> str:
        return (
            f"{self.objects} objects over {self.days} days ({self.gzipped} gzipped, keys with "
            f"spaces), {self.records:,} records ({self.late} late events, {self.malformed} "
            "malformed lines)"
        )
