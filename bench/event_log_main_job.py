"""`leasehold run` end to end with each event log storage of the embedded instance.

    .venv/bin/python bench/event_log_main_job.py [--repeat 3]

Per round and storage (`LEASEHOLD_EVENT_LOG=pooled`, leasehold's, then `dagster`, Dagster's own
SQLite storage), alternated: in a fresh directory holding only a copy of `streams.yaml` (so
`data/` there is new: the sample written afresh, a new lease store and embedded instance),
`leasehold run` timed from the outside, then `leasehold run` again (nothing new: discovery, the
sensors' ticks and the checks only). Each stage's own time is read from
the output. The best of the rounds counts, per storage and per figure: the machine is shared.
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LEASEHOLD = ROOT / ".venv" / "bin" / "leasehold"
STAGE = re.compile(r"^\S+ > ([^:]+):.*\((\d+(?:\.\d+)?) s\)\s*$")
STORAGES = ("pooled", "dagster")


def timed_run(cwd: Path, env: dict[str, str]) -> dict[str, float]:
    """Wall seconds of one `leasehold run` and each stage's own seconds, from its output."""
    started = time.perf_counter()
    done = subprocess.run(
        [str(LEASEHOLD), "run"], cwd=cwd, env=env, capture_output=True, text=True, timeout=900
    )
    wall = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"leasehold run failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    figures = {"wall": wall}
    for line in done.stdout.splitlines():
        match = STAGE.match(line)
        if match:
            figures[match.group(1)] = float(match.group(2))
    return figures


def one_round(storage: str) -> tuple[dict[str, float], dict[str, float]]:
    cwd = Path(tempfile.mkdtemp(prefix=f"leasehold-event-log-{storage}-"))
    shutil.copyfile(ROOT / "streams.yaml", cwd / "streams.yaml")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "LEASEHOLD_"))}
    env["LEASEHOLD_EVENT_LOG"] = storage
    try:
        return timed_run(cwd, env), timed_run(cwd, env)
    finally:
        shutil.rmtree(cwd, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    rounds = parser.parse_args().repeat
    best: dict[tuple[str, str], dict[str, float]] = {}
    for i in range(rounds):
        for storage in STORAGES if i % 2 == 0 else STORAGES[::-1]:
            first, again = one_round(storage)
            print(f"round {i + 1}, {storage}: first {first}, again {again}", flush=True)
            for which, figures in (("first run", first), ("run again", again)):
                kept = best.setdefault((which, storage), {})
                for name, seconds in figures.items():
                    kept[name] = min(kept.get(name, seconds), seconds)
    print(f"\nbest of {rounds}, storages alternated, seconds")
    print("| run | figure | pooled (leasehold) | dagster (Dagster's own) |")
    print("| --- | --- | --- | --- |")
    for which in ("first run", "run again"):
        names = best[(which, "pooled")].keys() & best[(which, "dagster")].keys()
        for name in sorted(names, key=lambda n: (n != "wall", n)):
            pooled, dagster = best[(which, "pooled")][name], best[(which, "dagster")][name]
            print(f"| {which} | {name} | {pooled:.1f} | {dagster:.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
