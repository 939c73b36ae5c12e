"""Records by key over a whole ingestion: what a dedupe policy costs, against none, same run.

    .venv/bin/python bench/dedupe_ingest.py [--existing 10000000] [--objects 2000]
        [--records 5000] [--resend 0.2] [--shape producers|scattered] [--repeats 1]
        [--table-format iceberg] [--work DIR]

One process and one SparkSession (as bench/ingest.py makes it: loopback, no UI; its start-up
is outside every figure, and a warm-up cycle of both policies on a few small objects runs
first). Per policy, `none` and `first` (scope date), alternately, `--repeats` times, each in a
fresh project of its own (streams.yaml with `record_id: event_id` and the policy, the embedded
SQLite store and Dagster instance, the embedded catalog of `--table-format`):
- Not timed: one date already holding `--existing` records, written as JSON-lines source
  objects of 100,000 records, ingested by the real path and published, so its key index exists.
- Then `--objects` new JSON-lines objects of `--records` records each, all on that date, a
  `--resend` share of the records re-sends (the same objects, seeded, for both policies),
  placed as `--shape` says (`bench/dedupe.py`): `producers` as the producers of issue 45 send
  them (retries of whole objects under new names, at-least-once writers repeating the half
  object since their last commit), `scattered` one by one in every object (every new object
  then loses rows and is copied: the worst case). Timed, wall and CPU core-seconds of this
  process and every process under it (Spark's JVM and Python workers, `bench/ingest.py`'s
  `process_cpu`): the ingestion as bench/ingest.py's leasehold path runs it (a discovery
  sensor tick, then each ingestion run it requests, in process), then the publication as
  `leasehold run` does it (the publication sensor ticked and each publication run it
  requests executed, until it requests none).
- Checked after each timed run, on the published table read as an engine reads it
  (`resources.publication.reader`): under `first` every id once, exactly the ids already there
  and the fresh ones; under `none` every row.

Reported: medians of the ingestion, the publication and the whole, their ratios first/none
and the wall time and CPU the policy adds per new record. Target (issue 45): the whole
ingestion under `first` <= 1.3x `none` in wall time and in CPU, at 2,000 x 5,000 records
into a date holding 10⁷.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dagster import DagsterInstance, Definitions  # noqa: E402

from bench.dedupe import DT, PRODUCERS, SHAPES, batches, med  # noqa: E402
from bench.ingest import (  # noqa: E402
    PIPELINED,
    STREAM,
    ingestion_pass,
    leasehold_project,
    measured,
    process_cpu,
)
from coordination_assets.range_passes import publication_pass, run_range_pass  # noqa: E402
from coordination_assets.run_report import MainJobReport  # noqa: E402
from resources.dagster_resources.catalog import CatalogResource  # noqa: E402
from resources.key_settings import FIRST, NONE  # noqa: E402
from resources.publication.reader import read_partition  # noqa: E402
from resources.schema.columns import ColumnSpec  # noqa: E402
from resources.spark.session import build_spark_session  # noqa: E402

EXISTING, NEW = "a-existing", "b-new"
"""Source folders: the existing records' objects list before the new ones (keys grow)."""
POLICY = {NONE: "{mode: none}", FIRST: "{mode: first, scope: date}"}
PARTS = ("ingestion (Spark)", "publication", "whole")


def json_lines(table: pa.Table) -> str:
    """The rows of `bench/dedupe.py`'s `rows` as a JSON-lines object (event times to the
    second, as producers write them)."""
    seconds = pc.cast(table["event_time"], pa.timestamp("s", tz="UTC"), safe=False)
    lines = pc.binary_join_element_wise(
        '{"event_id": "',
        table["event_id"],
        '", "user_id": "',
        table["user_id"],
        '", "amount": ',
        pc.cast(table["amount"], pa.string()),
        ', "event_time": "',
        pc.strftime(seconds, format="%Y-%m-%dT%H:%M:%SZ"),
        '"}',
        "",
    )
    return "\n".join(lines.to_pylist()) + "\n"


def write_sources(args: argparse.Namespace, directory: Path, seed: int) -> pa.Array:
    """The existing and the new objects under `directory` (`EXISTING`, `NEW`); the distinct ids
    of them all: what `first` serves."""
    old, new = batches(args, seed)
    ids = []
    for folder, tables in ((EXISTING, old), (NEW, new)):
        (directory / folder).mkdir(parents=True)
        for i, table in enumerate(tables):
            (directory / folder / f"part-{i:05d}.jsonl").write_text(json_lines(table))
            ids.append(table["event_id"].combine_chunks())
    return pc.unique(pa.concat_arrays(ids))


def link(sources: Path, source: Path, folder: str) -> None:
    """Put `folder`'s objects in a project's source: hard links, the same bytes and mtimes."""
    (source / folder).mkdir(parents=True)
    for path in sorted((sources / folder).iterdir()):
        os.link(path, source / folder / path.name)


def project(work: Path, mode: str, table_format: str) -> tuple[DagsterInstance, dict[str, Any]]:
    """A fresh project under `work` whose stream has `mode`'s policy, with a catalog of its
    own (never the default data directory's)."""
    fields = f"    dedupe: {POLICY[mode]}\n    table_format: {table_format}"
    instance, resources = leasehold_project(work, work / "src", PIPELINED, stream_fields=fields)
    resources["catalog"] = CatalogResource(
        catalog_path=str(work / "catalog.json"),
        iceberg_catalog_path=str(work / "iceberg" / "catalog.db"),
    )
    return instance, resources


def publication(instance: DagsterInstance, resources: dict[str, Any]) -> dict[str, Any]:
    """`leasehold run`'s publication pass; the published date's materialization metadata."""
    report = MainJobReport()
    published: list[dict[str, Any]] = []
    ranges = publication_pass(STREAM, report)

    def materialized(dt: str, metadata: Any) -> str:
        published.append(dict(metadata))
        return ranges.materialized(dt, metadata)

    runs = run_range_pass(
        dataclasses.replace(ranges, materialized=materialized),
        Definitions(resources=resources),
        instance,
        STREAM,
        report,
        max_ticks=10,
        log=lambda line: None,
    )
    problems = [*report.not_published.values(), *report.crashed_runs]
    assert runs >= 1 and len(published) == 1 and not problems, (runs, published, problems)
    return published[0]


def served_ids(resources: dict[str, Any]) -> pa.ChunkedArray:
    """The date's ids as an engine reads the published table (its catalog, its files)."""
    lake, catalog = resources["lake"], resources["catalog"]
    target = catalog.target(lake.stream(STREAM).table_format, lake)
    return read_partition(target, STREAM, DT, columns=[ColumnSpec("event_id", "string")])[
        "event_id"
    ]


def check(mode: str, ids: pa.ChunkedArray, keys: pa.Array, rows: int) -> None:
    """`first`: each id of `keys` served once, no other; `none`: all `rows`, of those ids."""
    distinct = pc.count_distinct(ids).as_py()
    outside = len(ids) - pc.sum(pc.is_in(ids, value_set=keys)).as_py()
    served = len(keys) if mode == FIRST else rows
    assert (len(ids), distinct, outside) == (served, len(keys), 0), (
        f"{mode}: {len(ids):,} rows served ({served:,} expected), {distinct:,} distinct ids "
        f"({len(keys):,} expected), {outside:,} ids never sent"
    )


def policy_run(
    args: argparse.Namespace, sources: Path, work: Path, mode: str, keys: pa.Array, cpu: Any
) -> dict[str, Any]:
    """One policy's project: the date published as it was (not timed), then the new objects
    ingested and the date published again (timed, then checked)."""
    shutil.rmtree(work, ignore_errors=True)
    instance, resources = project(work, mode, args.table_format)
    link(sources, work / "src", EXISTING)
    ingestion_pass(instance, resources)
    publication(instance, resources)
    link(sources, work / "src", NEW)
    ingest_wall, ingest_cpu, ingested = measured(cpu, ingestion_pass, instance, resources)
    publish_wall, publish_cpu, published = measured(cpu, publication, instance, resources)
    check(mode, served_ids(resources), keys, args.existing + args.objects * args.records)
    instance.dispose()
    shutil.rmtree(work, ignore_errors=True)
    return {
        "wall": parts(ingest_wall, publish_wall),
        "cpu": parts(ingest_cpu, publish_cpu),
        "runs": ingested["runs"],
        "units": ingested["materialized"],
        "files": published["files"],
        "rows": published["rows"],
        "dropped": published["dropped_by_key"],
    }


def parts(ingestion: float, publication: float) -> dict[str, float]:
    return {PARTS[0]: ingestion, PARTS[1]: publication, PARTS[2]: ingestion + publication}


def cycle(args: argparse.Namespace, base: Path, repeats: int, cpu: Any) -> dict[str, list]:
    """Both policies on the same sources, alternately, `repeats` times."""
    shutil.rmtree(base, ignore_errors=True)
    keys = write_sources(args, base / "sources", seed=7)
    results: dict[str, list[dict[str, Any]]] = {NONE: [], FIRST: []}
    for r in range(repeats):
        for mode in (NONE, FIRST) if r % 2 == 0 else (FIRST, NONE):
            result = policy_run(args, base / "sources", base / mode, mode, keys, cpu)
            results[mode].append(result)
            print(f"repeat {r} {mode}: {result}", flush=True)
    shutil.rmtree(base, ignore_errors=True)
    return results


def report(args: argparse.Namespace, results: dict[str, list[dict[str, Any]]]) -> bool:
    """The table, the cost per new record; whether the target held."""
    new_records = args.objects * args.records
    print(
        f"\n{args.existing:,} records in the date, {args.objects:,} new objects x "
        f"{args.records:,} records ({args.resend:.0%} re-sent, {args.shape}), "
        f"{args.table_format}, {args.repeats} repeat(s), medians\n"
    )
    print(
        "| path | none wall s | first wall s | wall ratio | none CPU s | first CPU s | CPU ratio |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    figures: dict[str, tuple[float, ...]] = {}
    for part in PARTS:
        nw, fw, nc, fc = (
            med([x[what][part] for x in results[mode]])
            for what in ("wall", "cpu")
            for mode in (NONE, FIRST)
        )
        figures[part] = (nw, fw, nc, fc)
        print(
            f"| {part} | {nw:.2f} | {fw:.2f} | {fw / nw:.2f} | {nc:.2f} | {fc:.2f} | "
            f"{fc / nc:.2f} |"
        )
    nw, fw, nc, fc = figures[PARTS[2]]
    print(
        f"\nadded per new record under first: {(fw - nw) / new_records * 1e6:.2f} µs wall, "
        f"{(fc - nc) / new_records * 1e6:.2f} µs CPU"
    )
    last = results[FIRST][-1]
    print(
        f"served under first: {last['rows']:,} rows (left out {last['dropped']:,}); under none "
        f"{results[NONE][-1]['rows']:,}; ingestion: {last['runs']} run(s), {last['units']} units"
    )
    held = fw / nw <= 1.3 and fc / nc <= 1.3
    print(
        f"\ntarget: whole ingestion under first <= 1.3x none ({args.shape}): "
        f"{fw / nw:.2f}x wall, {fc / nc:.2f}x CPU: {'met' if held else 'MISSED'}"
    )
    return held


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--existing", type=int, default=10_000_000)
    parser.add_argument("--objects", type=int, default=2000)
    parser.add_argument("--records", type=int, default=5000)
    parser.add_argument("--resend", type=float, default=0.2)
    parser.add_argument("--shape", choices=SHAPES, default=PRODUCERS)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--table-format", choices=("iceberg", "manifests"), default="iceberg")
    parser.add_argument("--work", type=Path, default=None, help="scratch (default: a temp dir)")
    args = parser.parse_args()
    spark = build_spark_session(
        master="local[*]",
        app_name="bench-dedupe-ingest",
        extra_conf={
            "spark.driver.memory": "6g",
            "spark.driver.host": "127.0.0.1",
            "spark.ui.enabled": "false",
        },
    )
    cpu = process_cpu(spark)
    base = args.work or Path(tempfile.mkdtemp(prefix="bench-dedupe-ingest-"))
    try:
        # Every step once on a few small objects (JIT, codegen, imports), so no policy pays it.
        warm = argparse.Namespace(**{**vars(args), "existing": 2000, "objects": 4, "records": 500})
        cycle(warm, base / "warm", 1, cpu)
        results = cycle(args, base / "run", args.repeats, cpu)
    finally:
        spark.stop()
        if args.work is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0 if report(args, results) else 1


if __name__ == "__main__":
    sys.exit(main())
