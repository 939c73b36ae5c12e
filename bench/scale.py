"""How costs grow with history: one-record objects landing in waves through `leasehold run`.

    .venv/bin/python bench/scale.py [--waves 5] [--per-wave 20000]

On the embedded default (SQLite store, SQLite Dagster instance, local catalog), in a fresh
project directory: each wave writes `--per-wave` one-record JSON-lines objects under a new
date's folder (keys grow, as the README asks), then times
  - `leasehold run` (discovery, ingestion, closing, merges, publication, checks): per object;
  - an idle `leasehold run` right after it (nothing new): what a tick costs with that history;
and reports the Dagster partitions of the ingestion asset and the storage per object (the
Dagster instance's directory, the lease store). Each command is a process of its own, its
SparkSession's start included, as a user runs it. The first wave is the baseline: a cost that
grows with history shows as a ratio above 1 in the last wave's row.
Targets (issue 20): last wave's per-object cost <= 1.1x the first; idle run <= 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import date, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STREAMS = """
streams:
  events:
    source: file://sources
    format: jsonl
    schema: {event_id: string, user_id: string, amount: double, event_time: timestamp}
    event_time: event_time
    record_id: event_id
    table: file://lake/events
"""


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def write_wave(sources: Path, wave: int, n: int) -> None:
    day = date(2026, 2, 1) + timedelta(days=wave)
    folder = sources / day.strftime("%Y/%m/%d")
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        record = {
            "event_id": f"w{wave}-{i}",
            "user_id": f"u{i % 97}",
            "amount": 1.0,
            "event_time": f"{day.isoformat()}T{i % 24:02d}:00:00Z",
        }
        (folder / f"obj-{i:07d}.jsonl").write_text(json.dumps(record) + "\n")


def leasehold(project: Path, env: dict[str, str], *args: str) -> float:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "resources.cli.main", *args],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"leasehold {' '.join(args)} failed:\n{done.stdout[-3000:]}")
    return elapsed


def partitions(project: Path, env: dict[str, str]) -> int:
    code = (
        "from dagster import DagsterInstance\n"
        "with DagsterInstance.get() as i:\n"
        "    print(len(i.get_dynamic_partitions('events_source_partitions')))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=project, env=env, capture_output=True, text=True
    )
    return int(out.stdout.strip() or 0)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--waves", type=int, default=5)
    parser.add_argument("--per-wave", type=int, default=20_000)
    parser.add_argument("--keep", action="store_true", help="keep the project directory")
    args = parser.parse_args()
    project = Path(tempfile.mkdtemp(prefix="leasehold-scale-"))
    (project / "streams.yaml").write_text(STREAMS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LEASEHOLD_", "DAGSTER_"))}
    env.update(
        PYTHONPATH=str(ROOT),
        SPARK_LOCAL_IP="127.0.0.1",
        DAGSTER_HOME=str(project / "dagster_home"),
        LEASEHOLD_DATA_DIR=str(project / "data"),
        LEASEHOLD_STREAMS=str(project / "streams.yaml"),
    )
    rows = []
    try:
        for wave in range(args.waves):
            write_wave(project / "sources", wave, args.per_wave)
            run_s = leasehold(project, env, "run")
            idle_s = leasehold(project, env, "run")
            objects = (wave + 1) * args.per_wave
            rows.append(
                {
                    "objects": objects,
                    "run_s": run_s,
                    "per_object_ms": run_s / args.per_wave * 1000,
                    "idle_s": idle_s,
                    "partitions": partitions(project, env),
                    "dagster_bytes": size_of(project / "dagster_home"),
                    "store_bytes": sum(
                        p.stat().st_size for p in (project / "data").glob("leasehold.db*")
                    ),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(project, ignore_errors=True)
    first, last = rows[0], rows[-1]
    print(f"\n### {args.waves} waves of {args.per_wave:,} one-record objects\n")
    print(
        "| objects | `leasehold run` s | ms per new object | idle run s | Dagster partitions "
        "| Dagster bytes per object | store bytes per object |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print(
            f"| {r['objects']:,} | {r['run_s']:.1f} | {r['per_object_ms']:.2f} | "
            f"{r['idle_s']:.1f} | {r['partitions']} | {r['dagster_bytes'] / r['objects']:.0f} | "
            f"{r['store_bytes'] / r['objects']:.0f} |"
        )
    per_object = last["per_object_ms"] / first["per_object_ms"]
    idle = last["idle_s"] / first["idle_s"]
    ok = per_object <= 1.1 and idle <= 1.2
    print(
        f"\nlast wave / first: per object {per_object:.2f}x (<= 1.1), idle run {idle:.2f}x "
        f"(<= 1.2): {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
