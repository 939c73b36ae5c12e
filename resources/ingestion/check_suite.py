"""Every check of a stream, in one registry, runnable without Dagster.

The Dagster asset checks and `leasehold check` (hence CI and the tests) must judge a stream by
the same code, or one of them will drift into passing what the other fails. So each check is
one function here taking plain arguments and returning a `CheckOutcome`, `run_one` runs one
with its memory (`resources.ledger.check_scope`) and `run_all` them all; a Dagster asset check
only turns an outcome into its result. What each check
computes lives in `checks` (ledger and source) and `resources.coordination.health` (leases).
"""

from __future__ import annotations

from collections.abc import Callable

from resources.check_outcome import CheckOutcome, Severity
from resources.coordination.health import lease_health_report
from resources.coordination.source_changes import PENDING
from resources.ingestion.checks import (
    ReadColumn,
    ServedUrls,
    find_duplicate_ids,
    find_unleased_objects,
    reconcile_rows,
)
from resources.ingestion.discovery import Lister
from resources.key_settings import TABLE
from resources.ledger.check_scope import CheckScope, with_memory
from resources.ledger.ledger import Ledger
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

CHECKS: dict[str, str] = {
    "rows_reconcile": "Per committed source partition: ledger rows = rows read - quarantined.",
    "unique_record_ids": "No record id appears twice in a table partition.",
    "lease_health": "No ASSIGNED lease expired for over twice its timeout, no partition "
    "UNASSIGNED past the retry window; dead letters reported.",
    "source_completeness": "Every object of the source has a lease item: one behind the "
    "discovery cursor without one fails (no run would ever ingest it before reconciliation "
    "finds it), one after the cursor only warns (the next tick discovers it).",
    "changed_sources": "No source object rewritten in place after a unit took it waits "
    "unhandled (on_change: ignore, not acknowledged): one that does only warns.",
}
"""Check name -> description, in the order `run_all` runs them."""


def _first(details: list[str], total: int | None = None) -> str:
    """`: <the first> (and n more)`, of `total` when `details` holds only the first few."""
    more = (len(details) if total is None else total) - 1
    return f": {details[0]}" + (f" (and {more} more)" if more > 0 else "")


def rows_reconcile(
    store: CoordinationStore, stream: str, table: str, scope: CheckScope | None = None
) -> CheckOutcome:
    scope = scope or CheckScope.everything()
    report = reconcile_rows(store, stream, table, None if scope.full else scope.completed_upto)
    scope.completed_upto = report.completed_upto
    unverifiable = f", {report.unverifiable} without row counts" if report.unverifiable else ""
    if report.mismatches:
        summary = (
            f"{len(report.mismatches)} of {report.checked} committed partitions do not "
            f"reconcile{_first(report.mismatches)}"
        )
    elif report.partitions_read is None:
        summary = f"{report.checked} committed partitions reconcile{unverifiable}"
    else:
        summary = (
            f"{report.checked} work units completed since the last pass reconcile{unverifiable}"
        )
    return CheckOutcome(
        "rows_reconcile", not report.mismatches, "error", summary, report.metadata()
    )


def unique_record_ids(
    store: Ledger,
    table: str,
    record_id: str | None,
    read_column: ReadColumn,
    scope: CheckScope | None = None,
    served_urls: ServedUrls | None = None,
    across_dates: bool = False,
) -> CheckOutcome:
    """No id twice in a table partition: over every committed row (no dedupe policy), or over
    what the current publications serve (`served_urls`, a policy: a duplicate there means the
    mechanism broke); `across_dates` (`dedupe.scope: table`): nor in two partitions."""
    if record_id is None:
        return CheckOutcome(
            "unique_record_ids",
            True,
            "error",
            "skipped: the stream has no record_id",
            {"skipped": "no record_id configured"},
        )
    report = find_duplicate_ids(
        store, table, record_id, read_column, scope, served_urls, across_dates
    )
    problems = []
    served = " served" if served_urls is not None else ""
    if report.duplicates:
        ids = sum(len(v) for v in report.duplicates.values())
        found = [f"dt={dt}: {sorted(v)[:5]}" for dt, v in report.duplicates.items()]
        broke = " (the dedupe policy's publication let them through)" if served else ""
        problems.append(
            f"{ids} {record_id} values appear more than once in {len(report.duplicates)}"
            f"{served} table partitions{broke}{_first(found)}"
        )
    if report.missing:
        ids = sum(len(v) for v in report.missing.values())
        found = [f"dt={dt}: {v[:5]}" for dt, v in report.missing.items()]
        problems.append(
            f"{ids} {record_id} values its ledger files hold are served by no row in "
            f"{len(report.missing)} table partitions{_first(found)}"
        )
    if report.unreadable:
        found = [f"dt={dt}: {why}" for dt, why in report.unreadable.items()]
        problems.append(
            f"{len(report.unreadable)} table partitions name a file that cannot be read"
            f"{_first(found)}"
        )
    summary = "; ".join(problems) or (
        f"no {record_id} twice in {report.partitions_checked}{served} table partitions "
        f"({report.rows_checked} rows)"
    )
    return CheckOutcome("unique_record_ids", not problems, "error", summary, report.metadata())


def lease_health(
    store: CoordinationStore,
    stream: str | None,
    ownership_timeout_s: float,
    unassigned_retry_after_s: float,
    scope: CheckScope | None = None,
) -> CheckOutcome:
    """A stuck lease is an error (no worker is picking partitions up); partitions waiting for
    a run and dead letters are warnings: they need a look, not a failed build."""
    scope = scope or CheckScope.everything()
    report = lease_health_report(
        store,
        stream,
        ownership_timeout_s,
        unassigned_retry_after_s,
        None if scope.full else scope.completed_upto,
        scope.dead_letters,
    )
    scope.completed_upto, scope.dead_letters = report.completed_upto, report.dead_letter_keys
    if report.healthy:
        summary = "no stuck lease, no partition waiting, no dead letter"
    else:
        counts = (
            f"{len(report.stuck)} stuck, {len(report.waiting)} waiting, "
            f"{len(report.dead_letters)} dead-lettered"
        )
        summary = counts + _first(report.stuck + report.waiting + report.dead_letters)
    return CheckOutcome(
        "lease_health",
        report.healthy,
        "error" if report.stuck else "warn",
        summary,
        report.metadata(),
    )


def source_completeness(
    store: CoordinationStore,
    stream: str,
    lister: Lister,
    scope: CheckScope | None = None,
    claims: bool = False,
) -> CheckOutcome:
    report = find_unleased_objects(
        store, stream, lister, scope=scope, claims=store if claims else None
    )
    if report.unleased:
        summary = (
            f"{report.unleased} of {report.listed} source objects have no lease item "
            f"({report.behind_cursor} behind the discovery cursor)"
            f"{_first(report.first, report.unleased)}"
        )
    else:
        summary = f"all {report.listed} source objects listed have a lease item"
    if report.cleaned_up:
        summary += f"; {report.cleaned_up} more were cleaned up (archived or deleted)"
    # Behind the cursor, an object without a lease item was missed (a late object, until the
    # next reconciliation pass); after it, one is only waiting for the next discovery tick.
    severity: Severity = "error" if report.behind_cursor else "warn"
    return CheckOutcome(
        "source_completeness", not report.unleased, severity, summary, report.metadata()
    )


def changed_sources(store: CoordinationStore, stream: str) -> CheckOutcome:
    """Warns while a source change of the stream is `pending` (ignored and not acknowledged:
    `leasehold changes ack`); one read of the stream's change records."""
    pending = [
        c for c in store.source_changes(store.source_identifier(stream)) if c.state == PENDING
    ]
    metadata: dict[str, object] = {"pending": len(pending)}
    if not pending:
        return CheckOutcome(
            "changed_sources", True, "warn", "no changed source object waits", metadata
        )
    summary = (
        f"{len(pending)} source objects changed since ingested, not read again (on_change: "
        f"ignore; leasehold changes ack {stream} clears them){_first([c.key for c in pending])}"
    )
    return CheckOutcome("changed_sources", False, "warn", summary, metadata)


def run_one(
    name: str,
    store: CoordinationStore,
    config: StreamConfig,
    *,
    table: str,
    lister: Lister,
    read_column: ReadColumn,
    ownership_timeout_s: float,
    unassigned_retry_after_s: float,
    full: bool = False,
    served_urls: ServedUrls | None = None,
) -> CheckOutcome:
    """The check `name` of `CHECKS` for one stream: one Dagster asset check each. `table` is
    the stream's ledger table, `lister` lists its source (`source_listing.source_lister`),
    `read_column` reads its table objects, `served_urls` the files a publication serves
    (what `unique_record_ids` judges under a dedupe policy). Each judges what changed since it
    last passed (`full`: everything; `resources.ledger.check_scope`): `unique_record_ids` the
    partitions whose row moved, `source_completeness` the source after the key it reached,
    `rows_reconcile` the work units completed since, `lease_health` the units not completed
    and those completed since (with the dead letters it found before)."""
    if name == "unique_record_ids" and config.record_id is None:
        return unique_record_ids(store, table, None, read_column)  # nothing to judge or remember
    if name == "changed_sources":
        return changed_sources(store, config.name)  # one read of a few records: no memory
    judges: dict[str, Callable[[CheckScope], CheckOutcome]] = {
        "rows_reconcile": lambda scope: rows_reconcile(store, config.name, table, scope),
        "lease_health": lambda scope: lease_health(
            store, config.name, ownership_timeout_s, unassigned_retry_after_s, scope
        ),
        "unique_record_ids": lambda scope: unique_record_ids(
            store,
            table,
            config.record_id,
            read_column,
            scope,
            served_urls if config.dedupe.active else None,
            config.dedupe.active and config.dedupe.scope == TABLE,
        ),
        "source_completeness": lambda scope: source_completeness(
            store, config.name, lister, scope, config.discovery.notifications
        ),
    }
    if name in judges:
        return with_memory(store, config.name, table, name, judges[name], full)
    # A caller's bug (the names come from CHECKS): no LeaseholdError, keep the traceback.
    raise ValueError(f"no ingestion check {name!r}; known: {', '.join(CHECKS)}")


def run_all(
    store: CoordinationStore,
    config: StreamConfig,
    *,
    table: str,
    lister: Lister,
    read_column: ReadColumn,
    ownership_timeout_s: float,
    unassigned_retry_after_s: float,
    full: bool = False,
    served_urls: ServedUrls | None = None,
) -> list[CheckOutcome]:
    """Every check of `CHECKS` for one stream, in that order (arguments as `run_one`). Writes
    nothing but the checks' memory."""
    return [
        run_one(
            name,
            store,
            config,
            table=table,
            lister=lister,
            read_column=read_column,
            ownership_timeout_s=ownership_timeout_s,
            unassigned_retry_after_s=unassigned_retry_after_s,
            full=full,
            served_urls=served_urls,
        )
        for name in CHECKS
    ]
