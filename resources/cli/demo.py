"""Coordination demo: several OS processes share one store and complete every partition once.

This is what `leasehold run` runs until the ingestion pipeline is wired in, and what the
concurrency tests drive. Each worker records a partition in its own file only after its
`complete` was accepted, so the records are an account independent of the store's counters:
a partition in two files (or none) is a coordination bug, whatever the store says.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming, new_owner_id
from resources.settings import default_data_dir
from resources.stores import build_store
from resources.stores.settings import StoreSettings, settings_from_env


@dataclass(frozen=True)
class DemoResult:
    """What the coordination demo's workers completed; partitions completed twice or never."""

    workers: int
    partitions: int
    completed_by_worker: dict[str, int]
    duplicates: list[str]
    missing: list[str]
    lost_leases: int
    elapsed_s: float

    @property
    def ok(self) -> bool:
        return not self.duplicates and not self.missing

    def describe(self) -> str:
        per = ", ".join(f"{w}: {n}" for w, n in sorted(self.completed_by_worker.items()))
        verdict = "every partition completed exactly once" if self.ok else "COORDINATION FAILURE"
        return (
            f"{self.workers} worker processes, {self.partitions} partitions, "
            f"{self.elapsed_s:.1f} s: {verdict}\n"
            f"completed per worker: {per}\n"
            f"duplicates: {len(self.duplicates)}, missing: {len(self.missing)}, "
            f"leases lost: {self.lost_leases}"
        )


def worker(
    settings: StoreSettings,
    stream: str,
    record_path: Path,
    timing: LeaseTiming,
    work_s: float,
) -> None:
    """Take partitions until none is left; record each only once its completion is accepted."""
    store = build_store(settings)
    owner = new_owner_id()
    sid = store.source_identifier(stream)
    lost = 0
    try:
        with record_path.open("a", encoding="utf-8") as record:
            while True:
                item = store.acquire_next(sid, owner, timing.ownership_timeout_s)
                if item is None:
                    break
                try:
                    with Lease(store, item, timing) as lease:
                        time.sleep(work_s)
                        lease.save_progress({"step": "worked", "by": owner})
                        done = lease.complete({"by": owner})
                except LeaseLostError:
                    lost += 1
                    continue
                record.write(f"{done.partition_key}\t{owner}\t{done.epoch}\n")
                record.flush()
        (record_path.with_suffix(".lost")).write_text(str(lost), encoding="utf-8")
    finally:
        store.close_store()


def run_demo(
    settings: StoreSettings,
    *,
    workers: int = 4,
    partitions: int = 300,
    stream: str = "demo",
    work_dir: Path,
    timing: LeaseTiming | None = None,
    work_s: float = 0.002,
) -> DemoResult:
    timing = timing or LeaseTiming(ownership_timeout_s=10, renew_interval_s=2)
    # A fresh stream per run, so a re-run on the same store is judged on its own partitions.
    run_id = time.strftime("%Y%m%dT%H%M%S") + f"-{uuid.uuid4().hex[:6]}"
    stream = f"{stream}-{run_id}"
    run_dir = work_dir / run_id
    run_dir.mkdir(parents=True, exist_ok=True)
    store = build_store(settings)
    sid = store.source_identifier(stream)
    keys = [f"{stream}-object-{i:06d}" for i in range(partitions)]
    store.create_partitions(sid, keys)
    store.close_store()
    started = time.monotonic()
    context = multiprocessing.get_context("spawn")
    procs = [
        context.Process(
            target=worker,
            args=(settings, stream, run_dir / f"worker-{n}.tsv", timing, work_s),
            name=f"worker-{n}",
        )
        for n in range(workers)
    ]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    elapsed = time.monotonic() - started
    failed = [p.name for p in procs if p.exitcode != 0]
    if failed:
        print(f"workers failed: {failed}", file=sys.stderr)
    lost = sum(int(p.read_text()) for p in run_dir.glob("worker-*.lost"))
    return _result(workers, partitions, run_dir, keys, lost, elapsed)


def _result(
    workers: int, partitions: int, run_dir: Path, keys: list[str], lost: int, elapsed: float
) -> DemoResult:
    per_worker: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for path in sorted(run_dir.glob("worker-*.tsv")):
        for line in path.read_text(encoding="utf-8").splitlines():
            per_worker[path.stem] += 1
            counts[line.split("\t")[0]] += 1
    return DemoResult(
        workers=workers,
        partitions=partitions,
        completed_by_worker=dict(per_worker),
        duplicates=sorted(k for k, n in counts.items() if n > 1),
        missing=sorted(set(keys) - set(counts)),
        lost_leases=lost,
        elapsed_s=elapsed,
    )


def cmd_demo(args: argparse.Namespace) -> int:
    # Here, not at the top: each spawned worker imports this module, and needs none of it.
    from resources.cli.status import print_status

    settings = settings_from_env()
    work_dir = Path(args.work_dir) if args.work_dir else default_data_dir() / "demo"
    result = run_demo(settings, workers=args.workers, partitions=args.partitions, work_dir=work_dir)
    print(result.describe())
    print_status(settings)
    return 0 if result.ok else 1


def add_demo_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    demo = add("demo", help="worker processes racing over one lease store")
    demo.add_argument("--workers", type=int, default=4)
    demo.add_argument("--partitions", type=int, default=300)
    demo.add_argument("--work-dir", default=None)
    demo.set_defaults(fn=cmd_demo)
