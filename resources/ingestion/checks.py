"""The checks behind the ingestion asset's asset checks, runnable without Dagster (and in CI).

They read what readers read — the ledger and the objects it names — never a prefix listing of
the table, so an orphan of a failed attempt can't make them pass or fail. Only completeness
lists, and it lists the source: every object there must have a lease item. `check_suite` runs
them all.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from resources.coordination.cleanup_state import read_cleanup_state
from resources.coordination.health import INDEX_LAG_MS, completed_since
from resources.coordination.items import LeaseItem, PartitionStatus, priority_at
from resources.coordination.lease_store import LeaseStore
from resources.coordination.object_claims import ObjectClaims
from resources.coordination.supplier import SUPPLIER_STATE
from resources.dedupe.retracted_keys import RetractedKeys, RetractedKeysError
from resources.dedupe.served import ServedStateError
from resources.errors import ComponentUnreachableError
from resources.ingestion.discovery import Lister
from resources.ingestion.source_listing import listing_pages
from resources.ingestion.unit_progress import TABLE_PARTITIONS, quarantine_table
from resources.ingestion.work_units import UnitCoverage
from resources.ledger.check_scope import CheckScope
from resources.ledger.ledger import Ledger
from resources.ledger.merge import MergeRange, chain_problems
from resources.ledger.model import TablePartition
from resources.ledger.publication import current_data_files
from resources.objects.base import ObjectStoreError
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)


@dataclass
class ReconcileReport:
    """The row reconciliation's verdict: units checked, mismatches, and how far the pass judged."""

    checked: int = 0
    mismatches: list[str] = field(default_factory=list)
    unverifiable: int = 0
    completed_upto: str | None = None
    """Every unit completed up to this priority was judged: where the next pass may start."""
    partitions_read: int | None = None
    """Table partitions read for it; None: the whole ledger."""

    def metadata(self) -> dict[str, Any]:
        return {
            "partitions_checked": self.checked,
            "mismatches": len(self.mismatches),
            "unverifiable": self.unverifiable,
            "table_partitions_read": "all"
            if self.partitions_read is None
            else self.partitions_read,
            "details": "\n".join(self.mismatches[:50]) or "none",
        }


class UnitRows:
    """The rows the ledger holds per work unit, in the table and in its quarantine, read by
    table partition as units need them: a unit's progress names the partitions its commits
    wrote to (`TABLE_PARTITIONS`), so judging the units completed since the last pass reads
    those partitions, not the table's history. A unit without the list makes it read the
    whole table, once."""

    def __init__(self, store: Ledger, sid: str, table: str, quarantine: str) -> None:
        self.store, self.sid = store, sid
        self.tables = (table, quarantine)
        self.by_partition: dict[tuple[str, str], Counter[str]] = {}
        self.totals: dict[str, Counter[str]] | None = None

    def of(self, item: LeaseItem) -> tuple[int, int]:
        """(table rows, quarantined rows) the ledger holds for the unit."""
        key = item.partition_key
        where = (item.progress or {}).get(TABLE_PARTITIONS)
        if where is None or self.totals is not None:
            totals = self.everything()
            return totals[self.tables[0]][key], totals[self.tables[1]][key]
        rows: Counter[str] = Counter()
        for part in where:
            table, dt = part.rsplit("|", 1)
            rows[table] += self._partition(table, dt)[key]
        return rows[self.tables[0]], rows[self.tables[1]]

    def _partition(self, table: str, dt: str) -> Counter[str]:
        if (table, dt) not in self.by_partition:
            counts: Counter[str] = Counter()
            for obj in self.store.ledger_objects(table, dt):
                if obj.source_identifier == self.sid:
                    counts[obj.source_partition_key] += obj.row_count
            self.by_partition[(table, dt)] = counts
        return self.by_partition[(table, dt)]

    def everything(self) -> dict[str, Counter[str]]:
        if self.totals is None:
            self.totals = {}
            for table in self.tables:
                counts: Counter[str] = Counter()
                for obj in self.store.ledger_objects(table):
                    if obj.source_identifier == self.sid:
                        counts[obj.source_partition_key] += obj.row_count
                self.totals[table] = counts
        return self.totals

    @property
    def partitions_read(self) -> int | None:
        """Table partitions read one by one; None: the whole ledger was read."""
        return None if self.totals is not None else len(self.by_partition)


def reconcile_rows(
    store: CoordinationStore, stream: str, table: str, completed_upto: str | None = None
) -> ReconcileReport:
    """Per committed work unit: table rows in the ledger = rows read - quarantined, and
    quarantine rows in the ledger = rows quarantined (counts saved by the same commit).

    Given `completed_upto` (how far an earlier pass judged), only the units completed since
    are judged, from the partitions they wrote to; without it, every unit, from the whole
    ledger. A unit's rows don't change once it is COMPLETED, so judging it once is enough;
    the full audit judges them all again."""
    sid = store.source_identifier(stream)
    now = store.now_ms()
    report = ReconcileReport(completed_upto=priority_at(now - INDEX_LAG_MS))
    rows = UnitRows(store, sid, table, quarantine_table(stream))
    if completed_upto is None:
        units: Iterable[LeaseItem] = store.iter_items(sid)
        rows.everything()
    else:
        units = completed_since(store, sid, completed_upto, now + 1)
    for item in units:
        if item.status is not PartitionStatus.COMPLETED or item.dead_letter_reason is not None:
            continue
        progress = item.progress or {}
        if "rows_read" not in progress:
            report.unverifiable += 1
            continue
        report.checked += 1
        key = item.partition_key
        table_rows, quarantine_rows = rows.of(item)
        expected = progress["rows_read"] - progress["rows_quarantined"]
        if table_rows != expected or quarantine_rows != progress["rows_quarantined"]:
            report.mismatches.append(
                f"{key}: read {progress['rows_read']}, quarantined {progress['rows_quarantined']}"
                f" but the ledger has {table_rows} table rows and {quarantine_rows}"
                " quarantined"
            )
    report.partitions_read = rows.partitions_read
    return report


@dataclass
class DuplicateReport:
    """The duplicate record id check's verdict: what was read and each id found more than once."""

    partitions_checked: int = 0
    rows_checked: int = 0
    duplicates: dict[str, list[str]] = field(default_factory=dict)
    unreadable: dict[str, str] = field(default_factory=dict)
    """dt -> why a file the ledger names for it could not be read (missing, not Parquet)."""
    missing: dict[str, list[str]] = field(default_factory=dict)
    """Under a dedupe policy: dt -> ids its publication's ledger files hold that it serves in
    no row (a key the policy must serve once, served never)."""

    def metadata(self) -> dict[str, Any]:
        details = [f"dt={dt}: {ids[:10]}" for dt, ids in self.duplicates.items()]
        details += [f"dt={dt}: unreadable: {why}" for dt, why in self.unreadable.items()]
        details += [f"dt={dt}: not served: {ids[:10]}" for dt, ids in self.missing.items()]
        return {
            "table_partitions_checked": self.partitions_checked,
            "rows_checked": self.rows_checked,
            "duplicated_ids": sum(len(v) for v in self.duplicates.values()),
            "ids_not_served": sum(len(v) for v in self.missing.values()),
            "unreadable_partitions": len(self.unreadable),
            "details": "\n".join(details) or "none",
        }


ReadColumn = Callable[[list[str], str], pa.ChunkedArray]
"""(object URLs, column) -> the column's values across those objects, by name: nulls for the
rows of an object that lacks the column (`ObjectStore.read_column`)."""
_UNREADABLE = (ObjectStoreError, OSError, pa.ArrowException, ServedStateError, RetractedKeysError)
"""What a partition's files or states that cannot be read raise."""

ServedUrls = Callable[[str | None], tuple[list[str], list[str], RetractedKeys]]
"""(a publication's version directory, or None) -> the data files it serves, the ledger's
files they were made from and the keys replacements retracted
(`resources.publication.publication_state.served_and_sources`): what readers read under a dedupe
policy, and every key they must find there but those."""


def find_duplicate_ids(
    store: Ledger,
    table: str,
    record_id: str,
    read_column: ReadColumn,
    scope: CheckScope | None = None,
    served_urls: ServedUrls | None = None,
    across_dates: bool = False,
) -> DuplicateReport:
    """No record id twice in a table partition, over exactly the files that hold its committed
    rows once each (`current_data_files`: the merged objects and the small objects above the
    chain), never the small objects a merge replaced: garbage collection deletes those once a
    published merge covers them. Only the partitions `scope` says changed are read. The files
    may span schema versions: `read_column` reads the id by name, and a null id (a file
    written before the column was added) is counted as a row but is no id. Given
    `served_urls` (a stream under a dedupe policy, whose committed rows may repeat an id by
    design), the files its current publication serves instead: what readers read.
    `across_dates` (`dedupe.scope: table`): also no id served by two partitions, and each
    ledger file's id served by some partition; every partition is read, whatever `scope`."""
    scope = CheckScope.everything() if across_dates else scope or CheckScope.everything()
    report = DuplicateReport()
    table_wide = _TableWide() if across_dates else None
    for tp in scope.changed(store.table_partitions(table)):
        dt = tp.dt
        try:
            urls, sources, retracted = _judged_urls(store, table, tp, served_urls)
            ids = read_column(urls, record_id)
        except ComponentUnreachableError:
            raise  # the store did not answer: no verdict
        except _UNREADABLE as exc:
            # A file the ledger names is gone or damaged: the partition cannot be vouched for.
            report.unreadable[dt] = f"{type(exc).__name__}: {exc}"
            continue
        if table_wide is not None:
            table_wide.add(dt, ids, _committed_ids(sources, record_id, read_column, dt))
        else:
            lost = _not_served(ids, sources, record_id, read_column, dt, retracted)
            if lost:
                report.missing[dt] = lost
        report.partitions_checked += 1
        report.rows_checked += len(ids)
        # A row without an id (an object written before the record id column was added reads
        # it as null) is no record id, so two of them are no duplicate.
        counts = pc.value_counts(ids.drop_null())
        repeated = [
            str(i)
            for i in counts.field("values")
            .filter(pc.greater(counts.field("counts"), 1))
            .to_pylist()
        ]
        if repeated:
            report.duplicates[dt] = sorted(repeated)
    if table_wide is not None:
        table_wide.judge(report)
    return report


@dataclass
class _TableWide:
    """`scope: table`'s judgement: each partition's served ids and its ledger files' ids."""

    served: dict[str, set[str]] = field(default_factory=dict)
    committed: dict[str, set[str]] = field(default_factory=dict)

    def add(self, dt: str, served: pa.ChunkedArray, committed: set[str]) -> None:
        self.served[dt] = {str(i) for i in served.drop_null().to_pylist()}
        self.committed[dt] = committed

    def judge(self, report: DuplicateReport) -> None:
        """Into `report`: per partition, the ids another partition serves too, and the ids
        its ledger files hold that no partition serves."""
        seen: dict[str, str] = {}
        for dt, ids in sorted(self.served.items()):
            for i in ids:
                other = seen.setdefault(i, dt)
                if other != dt:
                    report.duplicates.setdefault(dt, []).append(f"{i} (also dt={other})")
        everywhere = set(seen)
        for dt, ids in sorted(self.committed.items()):
            lost = sorted(ids - everywhere)
            if lost:
                report.missing[dt] = lost


def _not_served(
    ids: pa.ChunkedArray,
    sources: list[str],
    record_id: str,
    read_column: ReadColumn,
    dt: str,
    retracted: RetractedKeys,
) -> list[str]:
    """The ids the ledger files `sources` hold that `ids` (what is served) lacks, but those a
    replacement `retracted`."""
    committed = _committed_ids(sources, record_id, read_column, dt)
    lacking = sorted(committed - {str(i) for i in ids.drop_null().to_pylist()})
    if not lacking or not len(retracted):
        return lacking
    gone = retracted.holds(pa.array(lacking, pa.string()))
    return [i for i, g in zip(lacking, gone.tolist(), strict=True) if not g]


def _committed_ids(
    sources: list[str], record_id: str, read_column: ReadColumn, dt: str
) -> set[str]:
    """The ids the ledger files `sources` hold. A source gone since (a merged object a later
    merge replaced, collected after the safety delay) leaves the partition unjudged here
    (none): its served files were read whole."""
    if not sources:
        return set()
    try:
        committed = read_column(sources, record_id)
    except (ObjectStoreError, OSError, pa.ArrowException) as exc:
        log.info("dt=%s: its publication's ledger files cannot be read (%s): not judged", dt, exc)
        return set()
    return {str(i) for i in committed.drop_null().to_pylist()}


def _judged_urls(
    store: Ledger, table: str, tp: TablePartition, served_urls: ServedUrls | None
) -> tuple[list[str], list[str], RetractedKeys]:
    """The files `find_duplicate_ids` reads for `tp`, those whose ids must all be among
    theirs and the keys exempt from that: what its current publication serves, the ledger
    files it was made from and the keys replacements retracted (given `served_urls`), else
    every committed row once (and nothing more to compare)."""
    if served_urls is not None:
        publications = store.publications(table, tp.dt) if tp.publication_seq else []
        return served_urls(publications[-1].location if publications else None)
    objects = store.ledger_objects(table, tp.dt)
    # Chain after objects: a merge committed in between covers ids this read holds, so every
    # committed row read is still named exactly once.
    files = current_data_files(objects, whole_chain(store, table, tp.dt))
    return [f.url for f in files], [], RetractedKeys.empty()


def whole_chain(store: Ledger, table: str, dt: str, attempts: int = 5) -> list[MergeRange]:
    """The partition's chain, read again while it is not one valid chain: a DynamoDB Query
    may see half of a merge commit (the open range and its replacement both, or neither), which
    would count rows twice or not at all."""
    ranges = store.merge_ranges(table, dt)
    for _ in range(attempts):
        if not chain_problems(ranges, NO_LIMIT):
            break
        ranges = store.merge_ranges(table, dt)
    return ranges


NO_LIMIT = 2**62
"""`chain_problems`' committed-id bound when only the chain's shape is judged."""


@dataclass
class UnleasedReport:
    """The completeness check's verdict: source objects no work unit holds, and where they lie
    against discovery's cursor."""

    listed: int = 0
    unleased: int = 0
    behind_cursor: int = 0
    """Unleased keys discovery's cursor has passed: listed once, never leased (not late)."""
    cursor: str | None = None
    first: list[str] = field(default_factory=list)
    cleaned_up: int = 0
    """Source objects clean-up archived or deleted (or found gone): held by their units, no
    longer listed — why the source lists fewer objects than the units hold."""

    def metadata(self) -> dict[str, Any]:
        return {
            "objects_listed": self.listed,
            "objects_cleaned_up": self.cleaned_up,
            "unleased": self.unleased,
            "unleased_behind_discovery_cursor": self.behind_cursor,
            "discovery_cursor": self.cursor or "none",
            "first_unleased": "\n".join(self.first) or "none",
        }


def find_unleased_objects(
    store: LeaseStore,
    stream: str,
    lister: Lister,
    page_size: int = 1000,
    keep: int = 50,
    scope: CheckScope | None = None,
    claims: ObjectClaims | None = None,
) -> UnleasedReport:
    """Every source object is held by a work unit: else no run will ever ingest it. Lists the
    source through discovery's own lister (same keys) after `scope.source_after` (the whole
    source in a full pass), walking the lease items beside it (`UnitCoverage`): O(objects
    listed), memory O(page). An object after discovery's cursor may simply not be discovered
    yet; one behind it was listed and lost. Sets `scope.source_reached` to the end of the last
    page before the first unheld object (with the units reaching past it): the next pass
    resumes there. With `claims` (a stream discovering by notifications, whose units hold
    objects from anywhere in the key space) an object is held when it has a claim. Says how
    many objects source clean-up took out (expected missing from the listing)."""
    scope = scope or CheckScope.everything()
    sid = store.source_identifier(stream)
    report = UnleasedReport(
        cursor=store.read_global_state(stream, SUPPLIER_STATE).get("cursor"),
        cleaned_up=read_cleanup_state(store, stream).cleaned,
    )
    coverage = UnitCoverage(store, sid, scope.source_after, scope.source_covering)
    held = True
    for keys in listing_pages(lister, page_size, after=scope.source_after):
        report.listed += len(keys)
        if claims is None:
            missing = coverage.uncovered(keys)
        else:
            claimed = claims.object_claims(sid, keys)
            missing = [k for k in keys if k not in claimed]
            coverage.after = keys[-1]
        held = held and not missing
        if held:  # the next pass resumes after this page, with the units reaching past it
            scope.source_reached = (coverage.after, list(coverage.covering))
        report.unleased += len(missing)
        if report.cursor is not None:
            report.behind_cursor += sum(1 for key in missing if key <= report.cursor)
        report.first.extend(missing[: keep - len(report.first)])
    return report
