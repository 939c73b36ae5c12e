"""Publication: a switch's cost with Iceberg against manifests, and as snapshots accumulate.

    .venv/bin/python bench/publication.py [--switches 10000] [--open-dates 3]
        [--files-per-switch 20] [--dates 0] [--warmup 200] [--rows 200] [--max-snapshots N]
        [--glue 0]
        [--work DIR]

One sequence of switches, published through both formats on the same Parquet files, in one
process, alternately (switch i through one target then the other, the order flipped every
switch, so load on the machine falls on both alike):
  - `manifests`: `HiveManifestsTarget(LocalCatalog)` (the local catalog file);
  - `iceberg`: `IcebergTarget` on the SQL catalog on SQLite (the embedded default), with the
    default expiry (`iceberg_snapshot_retention_seconds`, `iceberg_max_snapshots` of
    `CatalogSettings`; `--max-snapshots` sets the cap instead).
Each switch of either pays what a publication run pays for one date: leasehold's manifest
version written (`manifest.write_version`, both formats write it) and the target's `switch`.

The files (leasehold's column types: `id` string, `user_id` string, `value` double,
`event_time` timestamp[us, UTC]; written once with `write_table_object`, `--rows` rows each)
and the switches, as the publisher makes them: `--open-dates` dates are open at once and get
switches in turn; a date's live switches publish its small files 1..k, k growing by one up to
`--files-per-switch`, then the date closes and switches to one merged file holding the same
rows, and a new date opens in its place. The open dates start staggered, so the mix is the
same from the first switch to the last. Dates accumulate in the table as they would (one
merged file each); `--dates D` instead re-uses D dates round (a date coming round again is
published from its first small file, with a higher seq), all D first published (their merged
files, seq 0) by one switch, then `--warmup` switches untimed (the table's manifests settle
into the layout merges keep them in) and the history cut to two snapshots: from the first timed
switch to the last the table holds D dates in the same layout while only its history grows —
the cost of snapshots accumulating, apart from the table's growth.

Reported: per switch wall and CPU time (median, p90) of each format and the ratio; the
Iceberg switch's phases (load the table, plan the switch — read the date's current files from
the manifests and the new files' footers —, stage expiry and the overwrite — write manifests
and the manifest list —, commit — the new metadata.json and the catalog row); the median of
windows of 100 switches along the run (the first against the last: target <= 1.2x, as
snapshots accumulate: `--dates`); after the
run, the snapshots retained, the metadata.json size, the manifest lists and manifests the
current snapshot references, everything under the table's `metadata/` directory, and what
the manifest versions left under both formats. `--glue N`: the first N switches again through
both formats on Glue (a loopback moto server; the Iceberg metadata and the data on local disk:
what the catalog's round trips add, not S3's latency).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

import resources.catalog.iceberg.target as iceberg_target  # noqa: E402
from resources.catalog.base import Column, TableDefinition  # noqa: E402
from resources.catalog.iceberg import internals  # noqa: E402
from resources.catalog.opening import target_for  # noqa: E402
from resources.catalog.settings import CatalogSettings  # noqa: E402
from resources.catalog.target import (  # noqa: E402
    PartitionFile,
    PartitionSwitch,
    PublicationTarget,
)
from resources.ingestion.table_objects import write_table_object  # noqa: E402
from resources.ledger.publication import LIVE, MERGED, DataFile  # noqa: E402
from resources.objects.local import LocalObjectStore  # noqa: E402
from resources.publication.manifest import new_version_key, write_version  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TABLE = "events"
COLUMNS = (
    Column("id", "string"),
    Column("user_id", "string"),
    Column("value", "double"),
    Column("event_time", "timestamp"),
)
NAMES = [c.name for c in COLUMNS]
FIRST_DAY = date(2026, 1, 1)
WINDOW = 100
TARGET_RATIO = 1.2
FORMATS = ("manifests", "iceberg")
PHASES = ("load", "plan", "stage", "commit")


# -- the switches and their files -----------------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One switch of the sequence: date index, seq, and `k` small files (0: the merged one)."""

    day: int
    seq: int
    k: int


def schedule(switches: int, open_dates: int, n: int, dates: int) -> list[Step]:
    """The sequence: `open_dates` slots take switches in turn; a slot's date gets live switches
    of 1..n small files, then the merged one, then the slot opens the next date. Slots start
    staggered (slot i at phase i*(n+1)/open_dates). `dates` > 0: date indexes wrap."""
    life = n + 1
    phase = [i * life // open_dates for i in range(open_dates)]
    day = list(range(open_dates))
    next_day = open_dates
    seqs: dict[int, int] = defaultdict(int)
    out = []
    for i in range(switches):
        s = i % open_dates
        d = day[s] % dates if dates else day[s]
        seqs[d] += 1
        out.append(Step(d, seqs[d], phase[s] + 1 if phase[s] < n else 0))
        phase[s] += 1
        if phase[s] == life:
            phase[s], day[s], next_day = 0, next_day, next_day + 1
    return out


def dt_of(day: int) -> str:
    return (FIRST_DAY + timedelta(days=day)).isoformat()


def rows_of(day: int, k: int, rows: int) -> pa.Table:
    """Small file `k` (from 1) of date `day`: `rows` events of that day."""
    rng = np.random.default_rng(day * 100_003 + k)
    start = np.datetime64(datetime(2026, 1, 1) + timedelta(days=day), "us").astype(np.int64)
    first = (day * 1_000_000 + k) * rows
    return pa.table(
        {
            "id": [f"e{j:016d}" for j in range(first, first + rows)],
            "user_id": [f"u{u}" for u in rng.integers(0, 997, rows)],
            "value": np.round(rng.random(rows) * 1000, 2),
            "event_time": pa.array(
                start + np.sort(rng.integers(0, 86_400_000_000, rows)),
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )


def write_files(data: Path, days: int, n: int, rows: int) -> dict[int, list[PartitionFile]]:
    """Per date: small files 1..n, then the merged file (index n: the same rows, one file,
    by event time), written as ingestion writes table objects."""
    files: dict[int, list[PartitionFile]] = {}
    for day in range(days):
        directory = data / f"dt={dt_of(day)}"
        directory.mkdir(parents=True, exist_ok=True)
        small = [rows_of(day, k, rows) for k in range(1, n + 1)]
        merged = pa.concat_tables(small).sort_by("event_time")
        named = [*(f"small-{k:05d}.parquet" for k in range(1, n + 1)), "merged.parquet"]
        files[day] = []
        for table, name in zip([*small, merged], named, strict=True):
            size = write_table_object(table, directory / name, NAMES, ["user_id"])
            url = "file://" + str(directory / name)
            files[day].append(PartitionFile(url, size, table.num_rows))
    return files


def step_files(step: Step, files: dict[int, list[PartitionFile]]) -> tuple[PartitionFile, ...]:
    return tuple(files[step.day][: step.k]) if step.k else (files[step.day][-1],)


# -- one publication, timed ------------------------------------------------------------------


@dataclass
class Publishing:
    """A format's target and where its manifest versions go; per switch wall and CPU s."""

    name: str
    target: PublicationTarget
    versions: LocalObjectStore
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    phases: list[dict[str, float]] = field(default_factory=list)

    def publish(self, step: Step, files: dict[int, list[PartitionFile]]) -> None:
        chosen = step_files(step, files)
        kind = LIVE if step.k else MERGED
        upper = step.k or len(files[step.day]) - 1
        PHASE_CLOCK.clear()
        wall, cpu = time.perf_counter(), time.process_time()
        version_url = write_version(
            self.versions,
            new_version_key(dt_of(step.day), kind, upper),
            [DataFile(f.url, f.size, f.rows) for f in chosen],
        )
        switch = PartitionSwitch(dt_of(step.day), step.seq, version_url, chosen)
        switched = self.target.switch(TABLE, [switch], summary={"leasehold.version": version_url})
        self.wall.append(time.perf_counter() - wall)
        self.cpu.append(time.process_time() - cpu)
        self.phases.append(dict(PHASE_CLOCK))
        if switched != [switch.dt]:
            raise SystemExit(f"{self.name}: switch {switch} changed {switched}")


PHASE_CLOCK: dict[str, float] = defaultdict(float)


def clocked(phase: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def timed(*args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            PHASE_CLOCK[phase] += time.perf_counter() - started

    return timed


def clock_iceberg_phases() -> None:
    """Time `IcebergTarget.switch`'s steps (the functions it calls, wrapped in place)."""
    cls = iceberg_target.IcebergTarget
    cls.load = clocked("load", cls.load)  # type: ignore[method-assign]
    iceberg_target.plan_switch = clocked("plan", iceberg_target.plan_switch)
    internals.stage_expiry = clocked("stage", internals.stage_expiry)  # type: ignore[assignment]
    internals.stage_overwrite = clocked("stage", internals.stage_overwrite)  # type: ignore[assignment]
    internals.commit = clocked("commit", internals.commit)  # type: ignore[assignment]


def open_targets(
    work: Path, settings: CatalogSettings, tag: str, per_format: bool = False
) -> list[Publishing]:
    """Both formats' targets on `settings`, each table created, each with its versions
    (`per_format`: each in its own Glue database, `<database>_<format>`)."""
    out = []
    for name in FORMATS:
        own = settings
        if per_format:
            own = dataclasses.replace(settings, glue_database=f"{settings.glue_database}_{name}")
        root = work / f"{tag}-{name}" / TABLE
        root.mkdir(parents=True, exist_ok=True)
        target = target_for(own, name)
        target.ensure_table(TableDefinition(TABLE, COLUMNS, "file://" + str(root)))
        out.append(Publishing(name, target, LocalObjectStore(root)))
    return out


def prefill(pubs: list[Publishing], dates: int, files: dict[int, list[PartitionFile]]) -> None:
    """One untimed switch publishing each of `dates` dates' merged file (seq 0)."""
    switches = [PartitionSwitch(dt_of(d), 0, "prefill/", (files[d][-1],)) for d in range(dates)]
    for pub in pubs:
        done = pub.target.switch(TABLE, switches)
        if len(done) != dates:
            raise SystemExit(f"{pub.name}: prefill switched {len(done)} of {dates} dates")


def warm_up(pubs: list[Publishing], steps: list[Step], files: dict) -> None:
    """Publish `steps` untimed (the table's manifests reach the layout they keep: their
    count grows over the first switches until merges hold it), the last with the Iceberg
    table's snapshots capped at one (a switch keeps the head it replaces: two are left), so
    the timed switches start from a two-snapshot history on the table as it will stay; then
    forget the timings."""
    ice = next(p.target for p in pubs if p.name == "iceberg")
    assert isinstance(ice, iceberg_target.IcebergTarget)
    cap, last = ice.max_snapshots, len(steps) - 1
    for i, step in enumerate(steps):
        ice.max_snapshots = 1 if i == last else cap
        for pub in pubs:
            pub.publish(step, files)
    ice.max_snapshots = cap
    if len(ice.snapshots(TABLE)) != 2:
        raise SystemExit("iceberg: the warm-up did not cut the history to two snapshots")
    for pub in pubs:
        pub.wall.clear()
        pub.cpu.clear()
        pub.phases.clear()


def run(
    steps: list[Step], files: dict[int, list[PartitionFile]], pubs: list[Publishing], progress: str
) -> None:
    started = time.monotonic()
    for i, step in enumerate(steps):
        for pub in pubs if i % 2 == 0 else reversed(pubs):
            pub.publish(step, files)
        if (i + 1) % 1000 == 0:
            print(
                f"  {progress}: {i + 1} switches, {time.monotonic() - started:.0f} s",
                file=sys.stderr,
                flush=True,
            )


# -- report ----------------------------------------------------------------------------------


def ms(values: list[float], q: float = 0.5) -> float:
    return float(np.quantile(values, q)) * 1000


def comparison_table(pubs: list[Publishing], title: str) -> None:
    by = {p.name: p for p in pubs}
    print(f"\n### {title}: per switch ({len(pubs[0].wall)} switches each)\n")
    print("| format | wall median, ms | wall p90, ms | CPU median, ms | CPU p90, ms |")
    print("| --- | --- | --- | --- | --- |")
    for p in pubs:
        print(
            f"| {p.name} | {ms(p.wall):.1f} | {ms(p.wall, 0.9):.1f} | {ms(p.cpu):.1f} | "
            f"{ms(p.cpu, 0.9):.1f} |"
        )
    ice, man = by["iceberg"], by["manifests"]
    print(
        f"| iceberg / manifests | {ms(ice.wall) / ms(man.wall):.1f}x | "
        f"{ms(ice.wall, 0.9) / ms(man.wall, 0.9):.1f}x | {ms(ice.cpu) / ms(man.cpu):.1f}x | "
        f"{ms(ice.cpu, 0.9) / ms(man.cpu, 0.9):.1f}x |"
    )


def kinds_table(pubs: list[Publishing], steps: list[Step]) -> None:
    print("\n| format | live switch, median ms | merged switch, median ms |")
    print("| --- | --- | --- |")
    for p in pubs:
        live = [w for w, s in zip(p.wall, steps, strict=False) if s.k]
        merged = [w for w, s in zip(p.wall, steps, strict=False) if not s.k]
        print(f"| {p.name} | {ms(live):.1f} | {ms(merged):.1f} |")


def windows(values: list[float], cap: int) -> list[tuple[int, float]]:
    """(first switch of the window, median ms) of windows of WINDOW switches along the run:
    the first, the first at the snapshot cap (`cap`), the last and about ten between."""
    n = len(values)
    step = max(WINDOW, n // 10 // WINDOW * WINDOW)
    starts = sorted({0, *range(0, n - WINDOW + 1, step), n - WINDOW})
    if cap + WINDOW <= n - WINDOW:
        starts = sorted({*starts, cap})
    return [(s + 1, ms(values[s : s + WINDOW])) for s in starts if s >= 0]


def windows_table(pubs: list[Publishing], max_snapshots: int) -> dict[str, float]:
    """Median ms per window of each format and the Iceberg phases; returns last / first per
    column."""
    ice = next(p for p in pubs if p.name == "iceberg")
    cols: dict[str, list[float]] = {f"{p.name} wall": p.wall for p in pubs}
    cols.update({f"{p.name} CPU": p.cpu for p in pubs})
    cols.update({f"iceberg {ph}": [x.get(ph, 0.0) for x in ice.phases] for ph in PHASES})
    print(f"\n### Windows of {WINDOW} switches: median ms\n")
    print("| switches | snapshots | " + " | ".join(cols) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in cols) + " |")
    table = {name: windows(values, max_snapshots) for name, values in cols.items()}
    for i, (start, _) in enumerate(next(iter(table.values()))):
        held = min(start + WINDOW - 1, max_snapshots)
        cells = " | ".join(f"{table[name][i][1]:.1f}" for name in cols)
        print(f"| {start}-{start + WINDOW - 1} | <= {held} | {cells} |")
    ratios = {name: t[-1][1] / t[0][1] if t[0][1] else float("nan") for name, t in table.items()}
    print("| last / first | | " + " | ".join(f"{ratios[n]:.2f}x" for n in cols) + " |")
    at_cap = [
        i for i, (start, _) in enumerate(next(iter(table.values()))) if start == max_snapshots + 1
    ]
    if at_cap:
        i = at_cap[0]
        capped = {
            name: t[-1][1] / t[i][1] if t[i][1] else float("nan") for name, t in table.items()
        }
        cells = " | ".join(f"{capped[n]:.2f}x" for n in cols)
        print(
            f"| last / {max_snapshots + 1}-{max_snapshots + WINDOW} (the first at the cap) | | "
            f"{cells} |"
        )
        ratios.update({f"{name} at cap": capped[name] for name in cols})
    return ratios


def files_under(directory: Path) -> Iterator[Path]:
    return (p for p in directory.rglob("*") if p.is_file())


def metadata_report(ice: Publishing, man: Publishing, catalog_file: Path) -> dict[str, Any]:
    """What the Iceberg table's metadata and both formats' manifest versions hold after the
    run."""
    assert isinstance(ice.target, iceberg_target.IcebergTarget)
    table = ice.target.load(TABLE)
    io, meta = table.io, table.metadata
    current = table.current_snapshot()
    assert current is not None
    manifests = current.manifests(io)
    lists = {s.manifest_list for s in meta.snapshots}
    mdir = Path(meta.location[len("file://") :]) / "metadata"
    everything = list(files_under(mdir))

    def local(url: str) -> Path:
        return Path(url[len("file://") :] if url.startswith("file://") else url)

    def kind(p: Path) -> str:
        if p.name.endswith(".metadata.json"):
            return "metadata.json"
        return "manifest lists" if p.name.startswith("snap-") else "manifests"

    by_kind: dict[str, list[int]] = defaultdict(list)
    for p in everything:
        by_kind[kind(p)].append(p.stat().st_size)
    live_entries = sum(m.added_files_count + m.existing_files_count for m in manifests)
    out = {
        "snapshots": len(meta.snapshots),
        "metadata_json": local(table.metadata_location).stat().st_size,
        "properties": len(meta.properties),
        "current_list": local(current.manifest_list).stat().st_size,
        "manifests": len(manifests),
        "manifest_bytes": sum(m.manifest_length for m in manifests),
        "live_files": live_entries,
        "retained_lists": len(lists),
        "retained_list_bytes": sum(local(u).stat().st_size for u in lists),
        "by_kind": {k: (len(v), sum(v)) for k, v in sorted(by_kind.items())},
        "total_rows": int(current.summary["total-records"]) if current.summary else -1,
        "versions": {
            p.name: (
                sum(1 for _ in files_under(p.versions.root / "_manifests")),
                sum(f.stat().st_size for f in files_under(p.versions.root / "_manifests")),
            )
            for p in (man, ice)
        },
        "catalog_json": catalog_file.stat().st_size,
    }
    return out


def print_metadata(m: dict[str, Any]) -> None:
    print("\n### After the run: Iceberg metadata (expiry at the default settings)\n")
    print("| what | count | bytes |")
    print("| --- | --- | --- |")
    print(f"| snapshots retained | {m['snapshots']} | |")
    print(
        f"| current metadata.json ({m['properties']} table properties) | 1 | "
        f"{m['metadata_json']:,} |"
    )
    print(f"| manifest list of the current snapshot | 1 | {m['current_list']:,} |")
    print(
        f"| manifests the current snapshot references ({m['live_files']} live data files) | "
        f"{m['manifests']} | {m['manifest_bytes']:,} |"
    )
    print(
        f"| manifest lists of the retained snapshots | {m['retained_lists']} | "
        f"{m['retained_list_bytes']:,} |"
    )
    total_n = sum(n for n, _ in m["by_kind"].values())
    total_b = sum(b for _, b in m["by_kind"].values())
    for k, (n, b) in m["by_kind"].items():
        print(f"| `metadata/`: {k} | {n:,} | {b:,} |")
    print(f"| `metadata/`: all files | {total_n:,} | {total_b:,} |")
    for name, (n, b) in m["versions"].items():
        print(f"| leasehold manifest versions written ({name}) | {n:,} | {b:,} |")
    print(f"| local catalog file (manifests) | 1 | {m['catalog_json']:,} |")


def expected_state(steps: list[Step], files: dict[int, list[PartitionFile]]) -> tuple[dict, int]:
    """dt -> last seq, and the rows the table holds after `steps`."""
    last: dict[int, Step] = {}
    for s in steps:
        last[s.day] = s
    seqs = {dt_of(d): s.seq for d, s in last.items()}
    return seqs, sum(f.rows for s in last.values() for f in step_files(s, files))


def check_agree(pubs: list[Publishing], steps: list[Step], files: dict, rows: int) -> None:
    seqs, _ = expected_state(steps, files)
    for p in pubs:
        held = {x.dt: x.seq for x in p.target.partitions(TABLE)}
        if held != seqs:
            raise SystemExit(f"{p.name}: partitions {len(held)} disagree with the sequence")
    print(f"\nBoth formats hold the {len(seqs)} dates at their last seq; ", end="")
    print(f"the Iceberg current snapshot holds {rows:,} rows, as the last switches name.")


def load_average() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


# -- main ------------------------------------------------------------------------------------


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--switches", type=int, default=10_000)
    parser.add_argument("--open-dates", type=int, default=3)
    parser.add_argument(
        "--files-per-switch", type=int, default=20, help="small files of a date's last live switch"
    )
    parser.add_argument(
        "--dates",
        type=int,
        default=0,
        help="re-use this many dates round (0: every date its own life)",
    )
    parser.add_argument("--rows", type=int, default=200, help="rows per small file")
    parser.add_argument(
        "--warmup",
        type=int,
        default=200,
        help="with --dates: untimed switches first, then the history cut to two snapshots",
    )
    parser.add_argument(
        "--glue", type=int, default=0, help="also run the first N switches on Glue (loopback moto)"
    )
    parser.add_argument(
        "--max-snapshots",
        type=int,
        default=None,
        help="iceberg_max_snapshots (default: the setting's default)",
    )
    parser.add_argument("--work", type=Path, default=None, help="kept after the run if given")
    return parser.parse_args()


def glue_run(work: Path, steps: list[Step], files: dict) -> list[Publishing]:
    from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer

    os.environ.update(AWS_TEST_ENV)
    server = LocalAwsServer().start()
    try:
        settings = CatalogSettings(
            catalog="glue",
            glue_database=f"bench_{uuid.uuid4().hex[:8]}",
            glue_endpoint_url=server.endpoint_url,
        )
        pubs = open_targets(work, settings, "glue", per_format=True)
        run(steps, files, pubs, "glue")
        return pubs
    finally:
        server.stop()


def main() -> int:
    args = parse()
    with tempfile.TemporaryDirectory(prefix="leasehold-bench-publication-") as tmp:
        work = args.work or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        return bench(args, work)


def bench(args: argparse.Namespace, work: Path) -> int:
    n = args.files_per_switch
    warm = args.warmup if args.dates else 0
    every = schedule(warm + args.switches, args.open_dates, n, args.dates)
    steps = every[warm:]
    days = max(s.day for s in every) + 1
    started = time.monotonic()
    files = write_files(work / "data", days, n, args.rows)
    print(
        f"{days} dates x ({n} small files of {args.rows} rows + 1 merged) written in "
        f"{time.monotonic() - started:.0f} s; {len(steps)} switches "
        f"({sum(1 for s in steps if s.k)} live, {sum(1 for s in steps if not s.k)} merged), "
        f"{args.open_dates} dates open at once.",
        flush=True,
    )
    settings = CatalogSettings(
        catalog_path=str(work / "catalog.json"),
        iceberg_catalog_path=str(work / "iceberg" / "catalog.db"),
    )
    if args.max_snapshots:
        settings = dataclasses.replace(settings, iceberg_max_snapshots=args.max_snapshots)
    print(
        f"Expiry: retention {settings.iceberg_snapshot_retention_seconds:.0f} s, "
        f"at most {settings.iceberg_max_snapshots} snapshots"
        f"{' (set here)' if args.max_snapshots else ' (the defaults)'}."
    )
    clock_iceberg_phases()
    load_start = load_average()
    pubs = open_targets(work, settings, "sql")
    if args.dates:
        prefill(pubs, args.dates, files)
        if warm:
            warm_up(pubs, every[:warm], files)
            print(f"Warm-up: {warm} switches, untimed; the history then cut to two snapshots.")
    started = time.monotonic()
    run(steps, files, pubs, "sql")
    elapsed = time.monotonic() - started
    load_end = load_average()
    print(f"\nRun: {elapsed:.0f} s. Load at the start: {load_start}")
    print(f"Load at the end:   {load_end}")
    comparison_table(pubs, "Iceberg (SQL catalog on SQLite) against manifests (local catalog)")
    kinds_table(pubs, steps)
    ratios = windows_table(pubs, settings.iceberg_max_snapshots)
    man, ice = pubs
    report = metadata_report(ice, man, work / "catalog.json")
    print_metadata(report)
    check_agree(pubs, every, files, report["total_rows"])
    if args.glue:
        glue = glue_run(work, steps[: args.glue], files)
        comparison_table(glue, "Glue (loopback moto server), both formats")
    return verdict(ratios, pubs)


def verdict(ratios: dict[str, float], pubs: list[Publishing]) -> int:
    man, ice = pubs
    wall, cpu = ratios["iceberg wall"], ratios["iceberg CPU"]
    ok = wall <= TARGET_RATIO
    print("\n## Targets\n")
    print(
        f"- Iceberg, last {WINDOW} switches against the first {WINDOW} (medians): wall "
        f"{wall:.2f}x, CPU {cpu:.2f}x: {'met' if ok else 'MISSED'} (target <= "
        f"{TARGET_RATIO}x); manifests on the same run {ratios['manifests wall']:.2f}x."
    )
    if "iceberg wall at cap" in ratios:
        print(
            f"- Iceberg once the snapshot cap is reached (the last {WINDOW} against the first "
            f"{WINDOW} with the table at its cap): wall {ratios['iceberg wall at cap']:.2f}x, "
            f"CPU {ratios['iceberg CPU at cap']:.2f}x."
        )
    print(
        f"- A switch with Iceberg costs {ms(ice.wall) / ms(man.wall):.1f}x one with manifests "
        f"(median wall, {ms(ice.wall):.1f} ms against {ms(man.wall):.1f} ms; no target: "
        f"reported)."
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
