"""What `leasehold run` did for one stream, and the words it says it in.

`MainJobReport` is filled as the main job goes (`main_job.run_stream`): the commits, merges,
publications and rollups it made, what failed and why, the checks' verdicts, and each table
partition's publication before and after. The lines below it are its wording: one finishing
line per stage (`ingestion_line`, `merge_line`, ...), one line per merge, publication or
rollup, and `describe`, the whole report as `--verbose` prints it.
"""

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from dagster import AssetKey, AssetRecordsFilter, DagsterInstance

from coordination_assets.compaction import dates_for
from coordination_assets.publication import table_asset_key
from resources.coordination.waiting import WaitingUnits

ROW_COUNTS = ("rows_read", "rows_written", "rows_quarantined")

MAX_TABLE_LINES = 30
"""Table partitions the summary lists one per line; the rest are counted (`leasehold table ls`
lists them all)."""


@dataclass(frozen=True)
class TablePartitionState:
    """What Dagster last recorded for a table partition of the published table."""

    dt: str
    seq: int = 0
    """0: never published."""
    switched: bool = False
    upper: int = 0
    files: int = 0
    rows: int = 0
    dropped: int = 0
    """Committed rows it does not serve: records that lost to another of their key, or that
    a replacement took out."""
    retracted: int = 0
    """Of `dropped`, the rows replacements took out."""

    def describe(self) -> str:
        if self.seq == 0:
            return f"dt={self.dt}: not published"
        kind = "merged" if self.switched else "live"
        return (
            f"dt={self.dt}: v{self.seq} ({kind}, ids 1..{self.upper}), "
            f"{_count(self.files, 'file')}, {self.rows} rows"
        )


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


@dataclass
class MainJobReport:
    """What one `leasehold run` did for one stream: filled stage by stage, read by the CLI."""

    ticks: int = 0
    discovery_skipped: str | None = None
    """Why the discovery sensor skipped (another node holds the supplier lease, e.g. a
    killed run's until it expires)."""
    runs: int = 0
    retry_runs: int = 0
    partitions: int = 0
    materialized: int = 0
    recorded: int = 0
    """Commits Dagster had missed, recorded by the sensor without a run."""
    rows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROW_COUNTS, 0))
    """What this invocation's runs reported committing (their materializations' counts, a
    unit's totals): the running count the progress line shows while ingestion goes."""
    committed: dict[str, int] = field(default_factory=lambda: dict.fromkeys(ROW_COUNTS, 0))
    """What the ledger registered while this invocation ingested (`rows_committed_since`),
    filled when ingestion ends: the rows this invocation committed, those its runs could not
    report too (a unit CLOSED after its readable objects were committed, a large object's
    chunks before one that failed, a run that crashed between a commit and its report) and
    none of an earlier invocation's. What the ingestion line and the audit say."""
    waiting: WaitingUnits | None = None
    """When ingestion did nothing: the units that wait, and when each kind is free."""
    schema_version: int = 0
    """The highest schema version this invocation's commits wrote with."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this invocation's commits added to the schema (`schema_evolution: add`)."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields left out of the table (`schema_evolution: ignore`): records holding each."""
    not_ingested: dict[str, str] = field(default_factory=dict)
    """Partition key -> its latest failure line (key, reason, when it is retried). A later run
    of the same invocation that ingests the partition (a retry of work a failed run left
    behind) takes it out: what is reported is what was still not ingested at the end."""
    crashed_runs: list[str] = field(default_factory=list)
    spark_stalled: bool = False
    """A run's Spark job was cancelled for making no progress (no more runs were asked)."""
    """Runs that failed for another reason than their partitions (a store down, a bug)."""
    checks: dict[str, bool] = field(default_factory=dict)
    warned: list[str] = field(default_factory=list)
    """Checks that did not pass with severity WARN (a dead letter, a partition waiting): said,
    but not a failure, as in `leasehold check`."""
    check_metadata: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each check's metadata of this invocation's checks run (its counts: duplicates, ...)."""
    new_units: int = 0
    """Work units discovery created in this invocation (one Dagster partition each)."""
    merge_runs: int = 0
    merges: list[str] = field(default_factory=list)
    """One line per merge committed: table partition, objects, rows, bytes, range."""
    not_merged: dict[str, str] = field(default_factory=dict)
    """Table partition -> why its merge failed (it stays due; the merge sensor asks again)."""
    merge_totals: dict[str, int] = field(
        default_factory=lambda: dict.fromkeys(("objects_merged", "rows", "carry_over"), 0)
    )
    publish_runs: int = 0
    publications: list[str] = field(default_factory=list)
    """One line per publication made current: table partition, version, kind, files, rows,
    the Spectrum manifest's URL."""
    switched_now: int = 0
    revised_now: int = 0
    """Publications that revised a date's current version (keys taken by later records on
    other dates)."""
    not_published: dict[str, str] = field(default_factory=dict)
    """`dt=<date>` -> why its publication failed (it stays due; the sensor asks again)."""
    rollup_runs: int = 0
    rollups: list[str] = field(default_factory=list)
    """One line per table partition whose rollups moved: batches, keys, ids covered."""
    not_rolled_up: dict[str, str] = field(default_factory=dict)
    """`dt=<date>` -> why a rollup of it failed (it stays due; the rollup sensor asks again)."""
    table: dict[str, TablePartitionState] = field(default_factory=dict)
    """Each table partition Dagster knows (its dates) -> what it publishes at the end, by dt."""
    table_before: dict[str, TablePartitionState] = field(default_factory=dict)
    """The same when this invocation started: what it published is the difference."""

    @property
    def ingested_nothing(self) -> bool:
        """Discovery found nothing new, no run was asked for, no commit was recorded."""
        return not (self.new_units or self.runs or self.recorded)

    @property
    def idle(self) -> bool:
        """Nothing was discovered, ingested, recorded, merged or published."""
        return not (
            self.new_units or self.runs or self.recorded or self.merges or self.publications
        )

    def published_now(self) -> dict[str, int]:
        """Table partition -> rows its publication gained in this invocation (only those that
        changed). With every commit published, their sum is the rows committed now."""
        gained = {}
        for dt, state in self.table.items():
            before = self.table_before.get(dt)
            rows = state.rows - (before.rows if before else 0)
            if state != before:
                gained[dt] = rows
        return gained

    def dropped_now(self) -> int:
        """Committed rows the publications of this invocation left out, over what they had
        left out before: records that lost to another of their key (a dedupe policy), or that
        a replacement took out (`retracted_now`, of these)."""
        return sum(
            state.dropped - (self.table_before[dt].dropped if dt in self.table_before else 0)
            for dt, state in self.table.items()
        )

    def retracted_now(self) -> int:
        """Of `dropped_now`, the rows replacements took out."""
        return sum(
            state.retracted - (self.table_before[dt].retracted if dt in self.table_before else 0)
            for dt, state in self.table.items()
        )

    @property
    def failed_checks(self) -> list[str]:
        """Checks that failed with severity ERROR: those fail the run."""
        return [n for n, ok in self.checks.items() if not ok and n not in self.warned]

    @property
    def failed_partitions(self) -> list[str]:
        """One line per source partition not ingested: key, reason, when it is retried."""
        return list(self.not_ingested.values())

    def add_commit_rows(self, metadata: Mapping[str, Any]) -> None:
        """Add a commit's row counts (its materialization's metadata) to the report's, and what
        it did to the schema."""

        def value(name: str) -> Any:
            raw = metadata.get(name)
            return getattr(raw, "value", raw)

        for name in self.rows:
            self.rows[name] += int(value(name) or 0)
        self.schema_version = max(self.schema_version, int(value("schema_version") or 0))
        for column in str(value("new_columns") or "").split(", "):
            if column and column not in self.new_columns:
                self.new_columns.append(column)
        for part in str(value("unknown_fields") or "none").split(", "):
            name, _, count = part.rpartition(": ")
            if name:
                self.unknown_fields[name] = self.unknown_fields.get(name, 0) + int(count)

    def record_merge(self, stream: str, dt: str, metadata: Mapping[str, Any]) -> str:
        """A merge committed (the merge asset's materialization of `dt`); its line."""
        self.not_merged.pop(dt, None)
        for name in self.merge_totals:
            self.merge_totals[name] += int(metadata[name])
        line = (
            f"{stream} dt={dt}: merged {metadata['objects_merged']} objects "
            f"({metadata['delayed_objects_merged']} delayed), {metadata['rows']} rows, "
            f"{metadata['bytes_in']} -> {metadata['bytes_out']} bytes into range "
            f"{metadata['range']}" + ("; carried over" if metadata["carry_over"] else "")
        )
        self.merges.append(line)
        return line

    def record_publication(self, stream: str, dt: str, metadata: Mapping[str, Any]) -> str:
        """A publication made current (the published table's materialization of `dt`); its
        line."""
        self.not_published.pop(f"dt={dt}", None)
        self.switched_now += bool(metadata["switched_now"])
        self.revised_now += bool(metadata.get("revises"))
        line = f"{stream} dt={dt}: {publication_line(metadata)}"
        self.publications.append(line)
        return line

    def record_rollup(self, stream: str, dt: str, metadata: Mapping[str, Any]) -> str:
        """Rollups of `dt` moved (the rollup asset's materialization); its line."""
        self.not_rolled_up.pop(f"dt={dt}", None)
        moved = {k[: -len("_upto")]: v for k, v in metadata.items() if k.endswith("_upto")}
        line = f"{stream} dt={dt}: {metadata['batches']} batches; " + ", ".join(
            f"{name} at id {upto}" for name, upto in sorted(moved.items())
        )
        self.rollups.append(line)
        return line

    def describe(self) -> str:
        checks = ", ".join(f"{k}={'pass' if v else 'FAIL'}" for k, v in self.checks.items())
        return (
            f"discovery ticks: {self.ticks}; runs: {self.runs} ({self.retry_runs} of work left "
            f"behind, {len(self.crashed_runs)} crashed); partitions: {self.partitions}; "
            f"materialized: {self.materialized}; commits recorded without a run: "
            f"{self.recorded}; failed: {len(self.failed_partitions)}\n"
            f"rows read: {self.committed['rows_read']}, written: "
            f"{self.committed['rows_written']}, quarantined: "
            f"{self.committed['rows_quarantined']} (as the ledger counts them)\n"
            f"merge runs: {self.merge_runs}; merges: {len(self.merges)} "
            f"({self.merge_totals['objects_merged']} small objects, "
            f"{self.merge_totals['rows']} rows, {self.merge_totals['carry_over']} carried over); "
            f"not merged: {len(self.not_merged)}\n"
            f"publication runs: {self.publish_runs}; publications: {len(self.publications)} "
            f"({self.switched_now} switched now); not published: {len(self.not_published)}\n"
            f"rollup runs: {self.rollup_runs}; partitions rolled up: {len(self.rollups)}; "
            f"not rolled up: {len(self.not_rolled_up)}\n"
            f"{self.describe_table()}\n"
            f"checks: {checks or 'none'}"
        )

    def describe_table(self) -> str:
        """Each table partition's published version and file count, one line each."""
        states = list(self.table.values())
        published = [s for s in states if s.seq > 0]
        merged = sum(s.switched for s in published)
        lines = [
            f"table partitions: {len(published)} published ({merged} merged, "
            f"{len(published) - merged} live), {len(states) - len(published)} not published"
        ]
        lines += [f"  {s.describe()}" for s in states[:MAX_TABLE_LINES]]
        if len(states) > MAX_TABLE_LINES:
            lines.append(
                f"  (and {len(states) - MAX_TABLE_LINES} more: leasehold table ls <stream>)"
            )
        return "\n".join(lines)


def checks_verdict(report: MainJobReport) -> str:
    """`all 13 passed`, `12 of 13 passed, 1 warned: lease_health`, or `FAILED: ...`."""
    failed, warned, total = report.failed_checks, report.warned, len(report.checks)
    parts = [f"FAILED: {', '.join(failed)}"] if failed else []
    if warned:
        parts.append(f"{len(warned)} warned: {', '.join(warned)}")
    passed = total - len(failed) - len(warned)
    if failed:
        return "; ".join(parts)
    return ", ".join([f"{passed} of {total} passed", *parts]) if warned else f"all {total} passed"


def ingestion_line(report: MainJobReport) -> str:
    """The discovery and ingestion stage's finishing line: what it ingested (the rows the
    ledger registered meanwhile), or why it ingested nothing."""
    if report.ingested_nothing:
        if report.discovery_skipped:
            return f"nothing done: discovery skipped ({report.discovery_skipped})"
        waits = waiting_line(report)
        return waits or "nothing new: every source object listed is already ingested"
    rows = report.committed
    line = (
        f"{_count(report.new_units, 'new work unit')}; {_count(report.runs, 'run')} ingested "
        f"{_count(report.materialized, 'unit')}: {rows['rows_read']:,} records read, "
        f"{rows['rows_quarantined']:,} quarantined, {rows['rows_written']:,} committed"
    )
    if report.new_columns:
        line += f"; schema version {report.schema_version} added {', '.join(report.new_columns)}"
    if report.unknown_fields:
        fields = ", ".join(f"{n} ({c:,})" for n, c in sorted(report.unknown_fields.items()))
        line += f"; records with fields left out (schema_evolution: ignore): {fields}"
    if report.recorded:
        line += f"; {_count(report.recorded, 'commit')} of earlier runs recorded"
    if report.not_ingested:
        line += f"; {_count(len(report.not_ingested), 'unit')} NOT ingested (listed below)"
    return line


def waiting_line(report: MainJobReport) -> str | None:
    """`nothing ingested now: 1 unit CLOSED after a failed read reopens at ... (in 4 min);
    leasehold status lists them`, when units wait; None when none does (nothing is new)."""
    if report.waiting is None or not report.waiting.count:
        return None
    return f"nothing ingested now: {report.waiting.describe()}"


def merge_line(report: MainJobReport) -> str:
    """The closing and merges stage's finishing line."""
    if not report.merges and not report.not_merged:
        return "nothing due"
    totals = report.merge_totals
    line = (
        f"{_count(len(report.merges), 'merge')}: {_count(totals['objects_merged'], 'small object')}"
        f", {totals['rows']:,} rows"
    )
    return _with_failures(line, report.not_merged, "merged")


def publication_summary(report: MainJobReport) -> str:
    """The publication stage's finishing line."""
    if not report.publications and not report.not_published:
        return "nothing new to publish"
    revised = (
        f"; {report.revised_now} revised: keys taken by later records on other dates"
        if report.revised_now
        else ""
    )
    line = (
        f"{_count(len(report.publications), 'table partition')} published "
        f"({report.switched_now} switched to merged files{revised})"
    )
    return _with_failures(line, report.not_published, "published")


def rollup_summary(report: MainJobReport) -> str:
    """The rollups stage's finishing line."""
    if not report.rollups and not report.not_rolled_up:
        return "nothing new to roll up"
    line = f"{_count(len(report.rollups), 'table partition')} rolled up"
    return _with_failures(line, report.not_rolled_up, "rolled up")


def _with_failures(line: str, failures: Mapping[str, str], verb: str) -> str:
    """A stage's line, and how many table partitions it did not do (`; 2 NOT merged`)."""
    return line + (f"; {len(failures)} NOT {verb}" if failures else "")


def publication_line(metadata: Mapping[str, Any]) -> str:
    """`published v3 (merged, switched now): 1 file, 3996 rows, manifest <url>` from the
    published-table asset's metadata."""
    verb = "catalog repaired to" if metadata["outcome"] == "catalog_repaired" else "published"
    kind = str(metadata["kind"]) + (", switched now" if metadata["switched_now"] else "")
    if metadata.get("revises"):
        kind += f", a revision of v{metadata['revises']}"
    return (
        f"{verb} v{metadata['seq']} ({kind}): {_count(int(metadata['files']), 'file')}, "
        f"{metadata['rows']} rows, manifest {metadata['manifest']}"
    )


def table_states(instance: DagsterInstance, stream: str) -> dict[str, TablePartitionState]:
    """Each of the stream's dates -> what Dagster last recorded as its publication."""
    key: AssetKey = table_asset_key(stream)
    states = {}
    dates = cast(str, dates_for(stream).name)  # built with its name: never None
    for dt in sorted(instance.get_dynamic_partitions(dates)):
        records = instance.fetch_materializations(
            AssetRecordsFilter(asset_key=key, asset_partitions=[dt]), limit=1
        ).records
        materialization = records[0].asset_materialization if records else None
        if materialization is None:
            states[dt] = TablePartitionState(dt)
            continue
        # The published table's counts, written by its asset as integers.
        metadata: dict[str, Any] = {k: v.value for k, v in materialization.metadata.items()}
        states[dt] = TablePartitionState(
            dt,
            seq=int(metadata["seq"]),
            switched=bool(metadata["switched"]),
            upper=int(metadata["upper"]),
            files=int(metadata["files"]),
            rows=int(metadata["rows"]),
            dropped=int(metadata.get("dropped_by_key", 0)),
            retracted=int(metadata.get("retracted_rows", 0)),
        )
    return states
