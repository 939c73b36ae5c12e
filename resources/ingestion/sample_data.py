"""Deterministic JSON-lines source objects for the main job's demo run and the benchmarks.

Keys are date-prefixed (`2026/01/01/part-00000.jsonl`), the layout the lister's cursor relies
on; record ids are globally unique, so any duplicate in the table is a real duplicate.
"""

from __future__ import annotations

import json
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
            line = json.dumps(
                {
                    "event_id": f"e{record:012d}",
                    "user_id": f"u{record % 997}",
                    "amount": round((record % 10007) / 100, 2),
                    "event_time": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
                }
            )
            if malformed_every and record % malformed_every == 0:
                line = line[: len(line) // 2]
            lines.append(line)
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        paths.append(path)
    return paths
