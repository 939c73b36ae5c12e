"""How costs grow with history: one-record objects landing in waves through `leasehold run`.

    .venv/bin/python bench/scale.py [--waves 5] [--per-wave 20000]

On the embedded default (SQLite store, SQLite Dagster instance, local catalog), in a fresh
project directory: each wave writes `--per-wave` one-record JSON-lines objects under a new
date's folder (keys grow, as the README asks), then times
  - `leasehold run` (discovery, ingestion, closing, merges, publication, the `per_user`
    rollup, checks): per object;
  - an idle `leasehold run` right after it (nothing new): what a tick costs with that history;
and reports the Dagster partitions of the ingestion asset and the storage per object (the
Dagster instance's directory, the lease store). Each command is a process of its own, its
SparkSession's start included, as a user runs it. The first wave is the baseline: a cost that
grows with history shows as a ratio above 1 in the last wave's row.
Also per wave: one discovery sensor tick (the sensor's evaluation alone, from `leasehold run`'s
cursor); after the first and the last wave, the webserver's partition-status GraphQL query
(every asset node's partition statuses, as the UI's asset pages ask), timed on a webserver
started for it. Targets (issue 20): last wave's per-object cost <= 1.1x the first; idle run
and discovery tick <= 1.2x.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import date, timedelta
from pathlib import Path
from typing import Any

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
    rollups:
      per_user:
        group_by: [user_id]
        aggregates: {events: count, amount: sum(amount)}
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


DISCOVERY_TICK = """
import sys, time
from dataclasses import replace
from dagster import DagsterInstance, build_sensor_context
from coordination_assets.definitions import build_definitions
from coordination_assets.ingestion import build_discovery_sensor, main_job_cursor_key
from resources.dagster_resources.discovery_tick import SensorCursor
from resources.ingestion.reconciliation import ReconcileState
defs = build_definitions()
sensor = build_discovery_sensor("events")
key = main_job_cursor_key("events")
with DagsterInstance.get() as instance:
    cursor = SensorCursor.parse(instance.run_storage.get_cursor_values({key}).get(key))
    now_ms = int(time.time() * 1000)
    variants = {
        # Nothing new and no reconciliation pass due: the tick's own floor.
        "idle": replace(cursor, reconcile=ReconcileState(None, now_ms)),
        # One step of a reconciliation pass, its first page: what a tick in a pass adds.
        "reconciling": replace(cursor, reconcile=ReconcileState(None, 0, in_pass=True)),
    }
    for name, variant in variants.items():
        times = []
        for _ in range(3):
            with build_sensor_context(
                instance=instance, cursor=variant.dump(), resources=defs.resources
            ) as c:
                started = time.perf_counter()
                sensor(c)
                times.append(time.perf_counter() - started)
        print(name, sorted(times)[1])
"""


def discovery_tick_s(project: Path, env: dict[str, str]) -> dict[str, float]:
    """The discovery sensor evaluated from `leasehold run`'s cursor, as the daemon's tick runs
    it (the sensor alone: not the process start or the code location's import); the median of
    three, the same cursor each time (an idle tick changes nothing). Two variants: no
    reconciliation pass due (`idle`), and the first step of a pass (`reconciling`: a page of
    `LEASEHOLD_MAX_OBJECTS_PER_TICK` keys listed again and walked beside the lease items).
    A pass over N objects takes N / that page ticks, so at 10⁶ objects most ticks are in one."""
    done = subprocess.run(
        [sys.executable, "-c", DISCOVERY_TICK],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise SystemExit(f"discovery tick failed:\n{done.stderr[-3000:]}")
    return {
        name: float(value)
        for name, value in (line.split() for line in done.stdout.strip().splitlines()[-2:])
    }


PARTITION_STATUSES = """
query PartitionStatuses {
  assetNodes {
    assetKey { path }
    assetPartitionStatuses {
      __typename
      ... on DefaultPartitionStatuses {
        materializedPartitions failedPartitions materializingPartitions
      }
      ... on TimePartitionStatuses { ranges { status startKey endKey } }
    }
  }
}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def graphql(port: int, query: str) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=600) as response:
        body: dict[str, Any] = json.loads(response.read())
    if body.get("errors"):
        raise SystemExit(f"GraphQL errors: {body['errors']}")
    return body


def partition_status_query(env: dict[str, str]) -> tuple[float, int]:
    """The webserver's partition-status query, as the asset pages send it, timed at the end:
    (seconds of the second call — the first also warms the code location's snapshot — and
    the partitions it reported materialized)."""
    port = free_port()
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "dagster-webserver"), "-h", "127.0.0.1",
         "-p", str(port), "-w", str(ROOT / "workspace.yaml")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                nodes = graphql(port, "{ assetNodes { id } }")["data"]["assetNodes"]
                if nodes:
                    break
            except (OSError, SystemExit):
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the webserver did not serve the code location in 300 s")
            time.sleep(1)
        graphql(port, PARTITION_STATUSES)
        started = time.perf_counter()
        body = graphql(port, PARTITION_STATUSES)
        elapsed = time.perf_counter() - started
        materialized = sum(
            len(n["assetPartitionStatuses"].get("materializedPartitions", []))
            for n in body["data"]["assetNodes"]
        )
        return elapsed, materialized
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=60)


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
            ticks = discovery_tick_s(project, env)
            objects = (wave + 1) * args.per_wave
            graphql_s: float | None = None
            if wave in (0, args.waves - 1):
                graphql_s, materialized = partition_status_query(env)
                print(f"partition-status query: {graphql_s:.2f} s, {materialized} materialized")
            rows.append(
                {
                    "objects": objects,
                    "run_s": run_s,
                    "per_object_ms": run_s / args.per_wave * 1000,
                    "idle_s": idle_s,
                    "tick_s": ticks["idle"],
                    "reconciling_tick_s": ticks["reconciling"],
                    "graphql_s": graphql_s,
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
        "| objects | `leasehold run` s | ms per new object | idle run s | discovery tick s "
        "| tick with a reconciliation step s | partition-status query s | Dagster partitions "
        "| Dagster bytes per object | store bytes per object |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        query = "" if r["graphql_s"] is None else f"{r['graphql_s']:.2f}"
        print(
            f"| {r['objects']:,} | {r['run_s']:.1f} | {r['per_object_ms']:.2f} | "
            f"{r['idle_s']:.1f} | {r['tick_s']:.3f} | {r['reconciling_tick_s']:.3f} | {query} | "
            f"{r['partitions']} | "
            f"{r['dagster_bytes'] / r['objects']:.0f} | {r['store_bytes'] / r['objects']:.0f} |"
        )
    per_object = last["per_object_ms"] / first["per_object_ms"]
    idle = last["idle_s"] / first["idle_s"]
    tick = last["tick_s"] / first["tick_s"]
    step = last["reconciling_tick_s"] / first["reconciling_tick_s"]
    ok = per_object <= 1.1 and idle <= 1.2 and tick <= 1.2 and step <= 1.2
    print(
        f"\nlast wave / first: per object {per_object:.2f}x (<= 1.1), idle run {idle:.2f}x "
        f"(<= 1.2), discovery tick {tick:.2f}x (<= 1.2), tick with a reconciliation step "
        f"{step:.2f}x (<= 1.2): {'met' if ok else 'MISSED'}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
