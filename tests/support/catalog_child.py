"""Local-catalog publishers and a reader in their own OS processes (multiprocessing targets).

`publish`: publish every (dt, seq) in a shuffled order and note any call after which the
partition holds an older seq than the one just offered. `watch`: read the catalog file until
told to stop, raw and through `LocalCatalog`, and note any read that fails to parse or that
sees a partition's seq go down or its location not match its seq.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from resources.catalog.base import CatalogError
from resources.catalog.local import LocalCatalog


def location(dt: str, seq: int) -> str:
    return f"file:///data/events/_manifests/dt={dt}/v{seq:06d}/symlink/"


def publish(
    path: str, table: str, dts: list[str], seqs: list[int], seed: int, go: Any, out: str
) -> None:
    catalog = LocalCatalog(Path(path))
    go.wait(60)  # all publishers start together, so their writes overlap
    work = [(dt, seq) for dt in dts for seq in seqs]
    random.Random(seed).shuffle(work)
    problems: list[str] = []
    changed = 0
    for dt, seq in work:
        changed += catalog.publish_partition(table, dt, location(dt, seq), seq)
        now = catalog.partition(table, dt)
        if now is None or now.seq < seq:
            problems.append(f"after publishing {dt} seq {seq} the catalog holds {now}")
    Path(out).write_text(json.dumps({"problems": problems, "changed": changed}))


def watch(path: str, table: str, stop: Any, out: str) -> None:
    catalog = LocalCatalog(Path(path))
    seen: dict[str, int] = {}
    problems: list[str] = []
    reads = 0
    while not stop.is_set() or reads == 0:
        reads += 1
        try:
            json.loads(Path(path).read_text())
            parts = catalog.partitions(table)
        except (ValueError, CatalogError) as exc:
            problems.append(f"read {reads}: {exc}")
            continue
        for part in parts:
            if part.seq < seen.get(part.dt, -1):
                problems.append(f"{part.dt} went from seq {seen[part.dt]} to {part.seq}")
            if part.location != location(part.dt, part.seq):
                problems.append(f"{part.dt} seq {part.seq} points at {part.location}")
            seen[part.dt] = part.seq
    Path(out).write_text(json.dumps({"problems": problems, "reads": reads}))
