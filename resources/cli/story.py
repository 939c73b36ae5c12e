"""What `leasehold run` shows: a line per stage while it works, then per stream a table of its
dates and an audit line.

The audit is the exactly-once promise in numbers a data engineer can check by hand: the
records this run read from the source, less those it quarantined, are the rows it committed,
and the rows its publications added to the table are those same rows — nothing lost, nothing
twice (the duplicate count is the `unique_record_ids` check's). Per-unit and per-date proofs
are the checks; this is their sum, for this run.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING, Any

from resources.catalog.settings import CatalogSettings
from resources.ledger.model import TablePartition
from resources.streams import StreamConfig

if TYPE_CHECKING:
    from coordination_assets.run_report import MainJobReport, TablePartitionState

MAX_DATES = 30
"""Dates the table shows (those this run changed first); `leasehold table ls` lists all."""


class TerminalProgress:
    """A live status line per stage on a terminal (rich), replaced by its finishing line."""

    def __init__(self, out: IO[str] | None = None) -> None:
        from rich.console import Console

        self.console = Console(file=out or sys.stdout, highlight=False)
        self.status: Any = None
        self.stream, self.stage, self.started = "", "", 0.0

    def start(self, stream: str, stage: str) -> None:
        self.stream, self.stage, self.started = stream, stage, time.monotonic()
        self.status = self.console.status(f"{stream} > {stage} ...")
        self.status.start()

    def update(self, text: str) -> None:
        if self.status is not None:
            self.status.update(f"{self.stream} > {self.stage}: {text}")

    def finish(self, text: str) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        elapsed = time.monotonic() - self.started
        self.console.print(f"{self.stream} > {self.stage}: {text} ({elapsed:.1f} s)", markup=False)


def stream_table(
    stream: str, report: MainJobReport, partitions: Sequence[TablePartition]
) -> list[str]:
    """Per date: published rows, small objects committed, files published, version, whether
    this run changed it; the checks' verdicts below."""
    ledger = {tp.dt: tp for tp in partitions}
    changed = set(report.published_now())
    dates = sorted(set(report.table) | set(ledger))
    shown = sorted(sorted(dates, key=lambda dt: dt not in changed)[:MAX_DATES])
    header = ("dt", "rows", "small objects", "files", "published", "")
    rows = [header]
    for dt in shown:
        state = report.table.get(dt)
        tp = ledger.get(dt)
        rows.append(
            (
                dt,
                f"{state.rows:,}" if state and state.seq else "-",
                str(tp.next_object_id - 1) if tp else "-",
                str(state.files) if state and state.seq else "-",
                _version(state),
                "changed now" if dt in changed else "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = [f"table {stream}:"]
    for row in rows:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:5], widths[1:5], strict=True)
        ]
        lines.append("  " + "  ".join(cells) + ("  " + row[5] if row[5] else ""))
    if len(dates) > len(shown):
        lines.append(f"  (and {len(dates) - len(shown)} more dates: leasehold table ls {stream})")
    from coordination_assets.run_report import checks_verdict

    lines.append(f"  checks: {checks_verdict(report)}")
    return lines


def _version(state: TablePartitionState | None) -> str:
    if state is None or state.seq == 0:
        return "not published"
    return f"v{state.seq} {'merged' if state.switched else 'live'}"


def audit_line(stream: str, report: MainJobReport) -> str:
    """`<stream> audit: N records read - Q quarantined = C committed = P published; duplicates
    D, losses L`, or, when this run did nothing, that it ingested nothing twice — and, as the
    ingestion line says it, what waits.

    Committed rows are the ledger's (`MainJobReport.committed`): every row this invocation's
    runs committed is counted, reported by its run or not, and none of an earlier one's; so
    rows published beyond them are earlier runs' commits."""
    if report.idle:
        from coordination_assets.run_report import waiting_line

        unchanged = "no source object ingested twice, the table unchanged"
        waits = waiting_line(report)
        return f"{stream}: {waits}; {unchanged}" if waits else f"{stream}: nothing new: {unchanged}"
    rows = report.committed
    read, quarantined, committed = (
        rows["rows_read"],
        rows["rows_quarantined"],
        rows["rows_written"],
    )
    published = sum(report.published_now().values())
    dropped, retracted = report.dropped_now(), report.retracted_now()
    by_key = dropped - retracted
    duplicates = report.check_metadata.get("unique_record_ids", {}).get("duplicated_ids", 0)
    lost = read - quarantined - published - dropped
    left_out = (
        f" + {by_key:,} records left out by dedupe (another record of their key is served)"
        if by_key
        else ""
    )
    if retracted:
        left_out += f" + {retracted:,} taken out by replacements (their object was rewritten)"
    net = "a net " if published < 0 else ""  # keys moved to later records, on other dates
    line = (
        f"{stream} audit: {read:,} source records read - {quarantined:,} quarantined = "
        f"{committed:,} rows committed = {net}{published:,} rows published now{left_out}; "
        f"duplicates {duplicates}, losses {max(lost, 0)}"
    )
    if committed != read - quarantined:
        line += " (COMMITTED ROWS DO NOT ADD UP: see leasehold check)"
    elif lost > 0:
        line += f" ({lost:,} committed rows wait for their table partition's publication)"
    elif lost < 0:
        line += f" ({-lost:,} rows of earlier runs' commits published now)"
    return line


def query_line(config: StreamConfig, catalog: CatalogSettings) -> str:
    """How to query the stream's table from outside leasehold, in one line
    (docs/concepts/table-formats.md, docs/concepts/querying.md)."""
    name = config.name
    if config.table_format == "manifests":
        return (
            f"{name} query: leasehold table read {name} DATE (Hive manifests; Athena, DuckDB, "
            "Spark: docs/concepts/querying.md)"
        )
    if catalog.catalog == "glue":
        where = f"{catalog.glue_database}.{name.lower()}"
        return (
            f"{name} query: SELECT * FROM {where} (Athena, Trino); "
            f'polars.scan_iceberg(load_catalog("glue", type="glue").load_table("{where}"))'
        )
    if catalog.catalog == "rest":
        uri = catalog.iceberg_rest_uri
        return (
            f'{name} query: polars.scan_iceberg(RestCatalog("leasehold", uri="{uri}")'
            f'.load_table("leasehold.{name}"))'
        )
    path = catalog.iceberg_sqlite_path().resolve()
    return (
        f'{name} query: polars.scan_iceberg(SqlCatalog("leasehold", uri="sqlite:///{path}")'
        f'.load_table("leasehold.{name}"))  (Iceberg; or: leasehold table read {name} DATE)'
    )
