"""Records by key: what a dedupe policy adds to committing and publishing, and to merges.

    .venv/bin/python bench/dedupe.py [--existing 1000000] [--objects 200] [--records 5000]
        [--resend 0.2] [--shape producers|scattered] [--merge-objects 400] [--repeats 2]
        [--work DIR]

One table partition already holding `--existing` records (published, so its key index exists),
then `--objects` new small objects of `--records` records each, a `--resend` share of their
records ids already in the date or repeated across the new objects, placed as `--shape` says
(`producers`: whole objects retried under new names and writers repeating half an object after
a rebalance; `scattered`: one by one in every object, the worst case for copies), written as
ingestion writes them (`write_table_object`), each committed through the real fenced commit
(SQLite store), then one publication (the manifests target: what the policy adds is the same
for both formats). Timed, wall and CPU of this process: the writes + commits + publication,
under `none` and under `first` (scope date) on the same records, alternately, `--repeats`
times. The Spark read of the source objects is the same code under every policy (the policy
acts at publication and merge), so it is left out: the ratio here is over the part a policy
changes, a stricter ratio than over a whole ingestion.

Then a merge of `--merge-objects` small objects (with re-sends) without the policy, and under
`first` twice: of the ledger's objects (not yet published: the writer keeps one row per key)
and of what their publication serves (published, as a date's objects are when it was
published live while open and merged once closed; `MergeRunner` then hands the writer the
served files). Reported: medians, the ratios (targets: publication path <= 1.3x, merge <=
1.2x), the key index's bytes per key and the resolution's cost per new record.
"""

from __future__ import annotations

import argparse
import random
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.catalog.hive_target import HiveManifestsTarget  # noqa: E402
from resources.catalog.local import LocalCatalog  # noqa: E402
from resources.compaction.merge_runner import served_inputs  # noqa: E402
from resources.compaction.merge_writer import MergeWriter  # noqa: E402
from resources.dedupe.served import INDEX_NAME, ServedRange  # noqa: E402
from resources.ingestion.table_objects import write_table_object  # noqa: E402
from resources.key_settings import FIRST, NONE, DedupeSettings  # noqa: E402
from resources.ledger.model import SmallObject  # noqa: E402
from resources.objects.factory import object_store_for  # noqa: E402
from resources.publication.current_keys import current_keys  # noqa: E402
from resources.publication.deduped_files import DedupedFiles  # noqa: E402
from resources.publication.publisher import Publisher  # noqa: E402
from resources.schema.columns import ColumnSpec  # noqa: E402
from resources.stores.sqlite.store import SqliteLeaseStore  # noqa: E402
from resources.streams import StreamConfig  # noqa: E402

DT = "2026-03-01"
PUBLISHED = "first, published"
"""The merges of objects a publication covers (under `first`: of what it serves)."""
START_US = 1_772_323_200_000_000  # 2026-03-01T00:00:00Z


def config(table: Path, mode: str) -> StreamConfig:
    return StreamConfig(
        name="events",
        source="file:///nowhere",
        format="jsonl",
        columns=(
            ColumnSpec("event_id", "string"),
            ColumnSpec("user_id", "string"),
            ColumnSpec("amount", "double"),
            ColumnSpec("event_time", "timestamp"),
        ),
        event_time="event_time",
        table=f"file://{table}",
        quarantine=f"file://{table}_q",
        record_id="event_id",
        dedupe=DedupeSettings(mode),
    )


def rows(ids: list[str], rng: random.Random) -> pa.Table:
    return pa.table(
        {
            "event_id": ids,
            "user_id": [f"u{rng.randrange(1000)}" for _ in ids],
            "amount": [rng.random() * 100 for _ in ids],
            "event_time": pa.array(
                [START_US + rng.randrange(86_400_000_000) for _ in ids],
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


class Table:
    """One stream's table, store and publisher under one policy."""

    def __init__(self, work: Path, mode: str) -> None:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        self.work, self.mode = work, mode
        self.config = config(work / "table", mode)
        self.store = SqliteLeaseStore(work / "store.db")
        self.objects = object_store_for(self.config.table)
        self.target = HiveManifestsTarget(LocalCatalog(work / "catalog.json"))
        self.n = 0

    def commit(self, table: pa.Table) -> None:
        path = self.work / "table" / f"dt={DT}" / f"small-{self.n:06d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        size = write_table_object(
            table, path, self.config.column_names, self.config.dictionary_columns
        )
        small = SmallObject("events", DT, f"file://{path}", size, table.num_rows)
        sid = self.store.source_identifier("events")
        key = f"src/{self.n:06d}"
        self.store.create_partitions(sid, [key])
        lease = self.store.acquire(sid, key, "bench", 600.0)
        self.store.commit(lease.token, [small], merge_after_s={"events": 3600.0})
        self.n += 1

    def publish(self) -> Any:
        publisher = Publisher(self.config, self.store, self.objects, self.target)
        (outcome,) = publisher.publish([DT])
        assert outcome.ok, outcome.describe()
        return outcome


SCATTERED, PRODUCERS = "scattered", "producers"
SHAPES = (PRODUCERS, SCATTERED)
"""How re-sends lie among the new objects: as the issue's producers make them, or one by one in
every object (the worst case for copy-on-write: every new object loses rows and is copied)."""


def batches(args: argparse.Namespace, seed: int) -> tuple[list[pa.Table], list[pa.Table]]:
    """The existing records (in objects of 100,000) and the new objects, a `--resend` share of
    their records re-sends, placed as `--shape` says."""
    rng = random.Random(seed)
    existing = [f"old-{i}" for i in range(args.existing)]
    old = [rows(existing[i : i + 100_000], rng) for i in range(0, args.existing, 100_000)]
    place = producer_resends if args.shape == PRODUCERS else scattered_resends
    return old, [rows(ids, rng) for ids in place(args, existing, rng)]


def scattered_resends(
    args: argparse.Namespace, existing: list[str], rng: random.Random
) -> list[list[str]]:
    """Each record of each new object a re-send of a random existing one with `--resend`'s
    probability, a fresh id otherwise."""
    new, fresh = [], 0
    for _ in range(args.objects):
        ids = []
        for _ in range(args.records):
            if rng.random() < args.resend:
                ids.append(existing[rng.randrange(len(existing))])
            else:
                ids.append(f"new-{fresh}")
                fresh += 1
        new.append(ids)
    return new


def producer_resends(
    args: argparse.Namespace, existing: list[str], rng: random.Random
) -> list[list[str]]:
    """Re-sends as the producers of issue 45 make them, half of them each way:
    - a retry under a new name: a `--resend` / 2 share of the new objects repeat a whole
      object's records — an earlier new one, or (half of them) `--records` existing ones;
    - an at-least-once writer after a rebalance: a `--resend` share of the new objects start
      with the last half of the object before them (what it wrote since its last commit),
      then go on with fresh records."""
    n, size = args.objects, args.records
    picked = rng.sample(range(n), min(n, round(n * args.resend * 1.5)))
    retries = set(picked[: round(n * args.resend / 2)])
    rewrites = set(picked[len(retries) :])
    new: list[list[str]] = []
    fresh = 0
    for i in range(n):
        if i in retries and (not new or rng.random() < 0.5):
            start = rng.randrange(max(1, len(existing) - size))
            ids = existing[start : start + size]
        elif i in retries:
            ids = list(rng.choice(new))
        else:
            head = (new[-1] if new else existing)[-(size // 2) :] if i in rewrites else []
            ids = head + [f"new-{fresh + j}" for j in range(size - len(head))]
            fresh += size - len(head)
        new.append(ids)
    return new


def clocked(fn: Any) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), resource.getrusage(resource.RUSAGE_SELF)
    result = fn()
    after = resource.getrusage(resource.RUSAGE_SELF)
    spent = (after.ru_utime - cpu.ru_utime) + (after.ru_stime - cpu.ru_stime)
    return time.perf_counter() - wall, spent, result


def publication_run(work: Path, mode: str, old: list, new: list) -> dict[str, Any]:
    table = Table(work / mode, mode)
    for t in old:
        table.commit(t)
    table.publish()  # the date as it was: published, its key index written

    def ingest() -> Any:
        for t in new:
            table.commit(t)
        return table.publish()

    wall, cpu, outcome = clocked(ingest)
    pub = outcome.publication
    return {
        "wall": wall,
        "cpu": cpu,
        "rows": pub.rows,
        "dropped": outcome.dropped,
        "index_bytes": newest_index(table.work) if mode == FIRST else 0,
    }


def newest_index(work: Path) -> int:
    indexes = sorted(
        (work / "table").glob(f"_manifests/dt={DT}/*/{INDEX_NAME}"), key=lambda p: p.stat().st_mtime
    )
    return indexes[-1].stat().st_size


def merge_run(work: Path, mode: str, new: list, published: bool) -> tuple[float, float]:
    """One merge of the objects `new`, as `MergeRunner` hands it to the writer: under `first`
    and `published`, of what their publication serves (`served_inputs`), else of the ledger's
    objects (the writer keeping one row per key under `first`)."""
    table = Table(work / f"merge-{mode}", mode)
    for t in new:
        table.commit(t)
    objects = table.store.ledger_objects("events", DT)
    inputs, served_range = [o.url for o in objects], None
    if published:
        table.publish()  # not timed: the live publications a closed date had before its merge
        current = current_keys(table.store, DedupedFiles(table.config, table.objects), "events", DT)
        assert current is not None
        served = served_inputs(objects, current.state)
        assert served is not None
        inputs, left_out = served
        rows = sum(o.row_count for o in objects) - left_out
        served_range = ServedRange(rows, left_out, None)  # every object published: no index
    writer = MergeWriter(lambda: None, table.config, arrow_max_bytes=1 << 40)  # never Spark
    target = table.work / "merged.parquet"
    wall, cpu, _ = clocked(lambda: writer.write(inputs, target, served_range))
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--existing", type=int, default=1_000_000)
    parser.add_argument("--objects", type=int, default=200)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--resend", type=float, default=0.2)
    parser.add_argument("--shape", choices=SHAPES, default=PRODUCERS)
    parser.add_argument("--merge-objects", type=int, default=400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--work", type=Path, default=None)
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="bench-dedupe-"))
    old, new = batches(args, 7)
    results: dict[str, list[dict[str, Any]]] = {NONE: [], FIRST: []}
    merges: dict[str, list[tuple[float, float]]] = {NONE: [], FIRST: [], PUBLISHED: []}
    merge_new = (new * (1 + args.merge_objects // max(1, len(new))))[: args.merge_objects]
    for r in range(args.repeats):
        for mode in (NONE, FIRST) if r % 2 == 0 else (FIRST, NONE):
            results[mode].append(publication_run(work, mode, old, new))
            print(f"repeat {r} {mode}: {results[mode][-1]}", flush=True)
    # Merges in a loop of their own: one right after a publication of 10⁷ rows would pay for
    # the memory that publication left behind.
    for r in range(args.repeats):
        for kind in (NONE, FIRST, PUBLISHED) if r % 2 == 0 else (PUBLISHED, FIRST, NONE):
            mode = NONE if kind == NONE else FIRST
            merges[kind].append(merge_run(work, mode, merge_new, kind == PUBLISHED))
            print(f"merge {r} {kind}: wall {merges[kind][-1][0]:.2f} s", flush=True)
    report(args, results, merges)
    shutil.rmtree(work, ignore_errors=True)
    return 0


def med(values: list[float]) -> float:
    return statistics.median(values)


def report(args: argparse.Namespace, results: dict, merges: dict) -> None:
    new_records = args.objects * args.records
    keys = args.existing + new_records - results[FIRST][-1]["dropped"]
    print(
        f"\n{args.existing:,} records in the date, {args.objects:,} new objects x "
        f"{args.records:,} records ({args.resend:.0%} re-sent), {args.repeats} repeats"
    )
    print(
        "| path | none wall s | first wall s | wall ratio | none CPU s | first CPU s | CPU ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    none, first = results[NONE], results[FIRST]
    nw, fw = med([x["wall"] for x in none]), med([x["wall"] for x in first])
    nc, fc = med([x["cpu"] for x in none]), med([x["cpu"] for x in first])
    print(f"| commit + publish | {nw:.2f} | {fw:.2f} | {fw / nw:.2f} | ", end="")
    print(f"{nc:.2f} | {fc:.2f} | {fc / nc:.2f} |")
    added = (fw - nw) / new_records * 1e6
    nw, nc = med([m[0] for m in merges[NONE]]), med([m[1] for m in merges[NONE]])
    for kind, what in ((PUBLISHED, "published"), (FIRST, "unpublished")):
        fw, fc = med([m[0] for m in merges[kind]]), med([m[1] for m in merges[kind]])
        print(
            f"| merge of {args.merge_objects} objects, {what} | {nw:.2f} | {fw:.2f} | "
            f"{fw / nw:.2f} | {nc:.2f} | {fc:.2f} | {fc / nc:.2f} |"
        )
    print(f"\nadded per new record under first: {added:.2f} µs (wall)")
    index = results[FIRST][-1]["index_bytes"]
    print(f"\nkey index: {keys:,} keys, {index:,} bytes: {index / keys:.1f} bytes a key")
    print(
        f"rows served under first: {results[FIRST][-1]['rows']:,} "
        f"(left out {results[FIRST][-1]['dropped']:,}); under none {results[NONE][-1]['rows']:,}"
    )


if __name__ == "__main__":
    sys.exit(main())
