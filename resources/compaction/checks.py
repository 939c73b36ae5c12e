"""Every compaction check of a stream's table, in one registry, runnable without Dagster.

The same shape as the ingestion registry (`resources.ingestion.check_suite`, a sibling this
layer may not import): one function per check taking plain arguments and returning a
`CheckOutcome`, and `run_all`; the Dagster asset checks on the merge asset and `leasehold
check` only turn outcomes into results, so they cannot drift apart.

They judge what readers will be served once a partition switches to its merged objects
(docs/architecture.md): a chain that covers each committed id exactly once, merged objects that
exist in full and hold exactly the rows of the small objects they replace, and a merge job for
every partition with something left to merge. Read-only but for the checks' memory
(`resources.ledger.check_scope`): each judges the partitions changed since it last passed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

from resources.check_outcome import CheckOutcome, Severity
from resources.coordination.items import ItemType, PartitionStatus, iso_utc, to_millis
from resources.dedupe.served import dropped_rows
from resources.ledger.check_scope import CheckScope, with_memory
from resources.ledger.ledger import Ledger
from resources.ledger.merge import MergeRange, chain_problems
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.snapshot import partition_snapshot
from resources.objects.base import ObjectStore, ObjectStoreError
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

CHECKS: dict[str, str] = {
    "merge_chain": "Per table partition: the merge ranges chain from the (None, 0] sentinel, "
    "contiguous, upper > lower, covering only committed ids, and the partition's merged_upper "
    "is where the chain ends.",
    "merged_objects_exist": "Every merge range's merged object exists with its recorded length.",
    "merged_rows": "Per merge range: its recorded rows = the rows of the small objects it covers "
    "= the rows in its merged object's Parquet footer.",
    "merge_jobs": "At most one merge job per table partition, each for an existing one; every "
    "partition with unmerged objects has a pending job; no dead merge nobody took over (warns).",
}
"""Check name -> description, in the order `run_all` runs them."""

QUARANTINE_SUFFIX = ".quarantine"
"""Quarantine tables (`<stream>.quarantine`, named by ingestion) are never merged."""

MAX_LISTED = 20
"""Offenders listed in a check's metadata; the summary names the first and counts the rest."""


def _first(details: list[str]) -> str:
    """`: <the first> (and n more)`."""
    more = len(details) - 1
    return f": {details[0]}" + (f" (and {more} more)" if more > 0 else "")


def _where(table: str, dt: str, r: MergeRange | None = None) -> str:
    return f"{table} dt={dt}" + (f" ({r.lower}, {r.upper}]" if r is not None else "")


def _metadata(checked: int, what: str, problems: list[str]) -> dict[str, Any]:
    return {
        what: checked,
        "problems": len(problems),
        "details": "\n".join(f"- {p}" for p in problems[:MAX_LISTED]) or "none",
    }


def _skipped(name: str, table: str) -> CheckOutcome | None:
    if not table.endswith(QUARANTINE_SUFFIX):
        return None
    return CheckOutcome(
        name,
        True,
        "error",
        f"skipped: {table} is a quarantine table, never merged",
        {"skipped": "quarantine table"},
    )


def _chains(
    ledger: Ledger, table: str, scope: CheckScope | None
) -> Iterator[tuple[TablePartition, list[MergeRange]]]:
    """The partitions `scope` says changed (all without one), each with its chain."""
    for partition in (scope or CheckScope.everything()).changed(ledger.table_partitions(table)):
        yield partition, ledger.merge_ranges(table, partition.dt)


def _merged(ranges: list[MergeRange]) -> list[MergeRange]:
    return [r for r in ranges if not r.is_sentinel]


def merge_chain(ledger: Ledger, table: str, scope: CheckScope | None = None) -> CheckOutcome:
    """`chain_problems` (which includes "nothing past the committed ids") and the partition
    row agreeing with its chain: `merged_upper` decides what the next merge and the schedule
    consider unmerged, so a row ahead of its chain would strand objects for good."""
    skipped = _skipped("merge_chain", table)
    if skipped:
        return skipped
    problems: list[str] = []
    checked = broken = 0
    for partition, ranges in _chains(ledger, table, scope):
        checked += 1
        found = _chain_problems(table, partition, ranges)
        if found:
            # The row and the chain were read apart: a commit in between (a merge extending
            # the chain over ids committed after the row was read) fakes a problem. Judge
            # again on a snapshot taken at one moment.
            found = _chain_problems(table, *partition_snapshot(ledger, table, partition))
        broken += bool(found)
        problems += found
    if problems:
        summary = (
            f"{broken} of {checked} table partitions have a broken merge chain{_first(problems)}"
        )
    else:
        summary = f"{checked} table partitions have a valid merge chain"
    return CheckOutcome(
        "merge_chain", not problems, "error", summary, _metadata(checked, "partitions", problems)
    )


def _chain_problems(table: str, partition: TablePartition, ranges: list[MergeRange]) -> list[str]:
    where = _where(table, partition.dt)
    found = [f"{where}: {p}" for p in chain_problems(ranges, partition.next_object_id)]
    chain_end = ranges[-1].upper if ranges else 0
    if partition.merged_upper != chain_end:
        found.append(
            f"{where}: merged_upper is {partition.merged_upper}, the chain ends at {chain_end}"
        )
    return found


def _key(objects: ObjectStore, r: MergeRange) -> str | None:
    """The merged object's key, None if the range names none or one outside the table's
    store (both are problems the caller reports)."""
    if r.url is None:
        return None
    try:
        return objects.key_of(r.url)
    except ObjectStoreError:
        return None


def merged_objects_exist(
    ledger: Ledger, objects: ObjectStore, table: str, scope: CheckScope | None = None
) -> CheckOutcome:
    """A HEAD (a stat locally) per range: a missing or truncated merged object would break
    every reader once the partition switches to its merged objects."""
    skipped = _skipped("merged_objects_exist", table)
    if skipped:
        return skipped
    problems: list[str] = []
    checked = 0
    for partition, ranges in _chains(ledger, table, scope):
        for r in _merged(ranges):
            checked += 1
            where = _where(table, partition.dt, r)
            key = _key(objects, r)
            if key is None:
                problems.append(f"{where}: no merged object under {objects.root_url} ({r.url})")
                continue
            size = objects.size(key)
            if size is None:
                problems.append(f"{where}: {r.url} does not exist")
            elif size != r.content_length:
                problems.append(
                    f"{where}: {r.url} is {size} bytes, the ledger records {r.content_length}"
                )
    if problems:
        summary = (
            f"{len(problems)} of {checked} merged objects are missing or wrong{_first(problems)}"
        )
    else:
        summary = f"all {checked} merged objects exist with their recorded length"
    return CheckOutcome(
        "merged_objects_exist",
        not problems,
        "error",
        summary,
        _metadata(checked, "merged_objects", problems),
    )


def merged_rows(
    ledger: Ledger, objects: ObjectStore, table: str, scope: CheckScope | None = None
) -> CheckOutcome:
    """Rows three ways per range: the ledger's record, the small objects it replaces (every id
    of `(lower, upper]` must have one) and the merged object's Parquet footer — only the
    footer is read (`ObjectStore.parquet_metadata`: a local file's footer, two ranged GETs at
    most on S3), so the check costs no data reads."""
    skipped = _skipped("merged_rows", table)
    if skipped:
        return skipped
    # Per partition, chain first, objects after: a range only covers committed ids, so every
    # id a chain read covers is in a later read of the objects, however commits interleave.
    problems: list[str] = []
    checked = 0
    for partition, ranges in _chains(ledger, table, scope):
        merged = _merged(ranges)
        if not merged:
            continue
        small = {o.object_id: o for o in ledger.ledger_objects(table, partition.dt)}
        for r in merged:
            checked += 1
            problems += _range_rows(objects, table, partition.dt, r, small)
    if problems:
        summary = f"{len(problems)} row mismatches in {checked} merge ranges{_first(problems)}"
    else:
        summary = f"all {checked} merge ranges hold exactly the rows of their small objects"
    return CheckOutcome(
        "merged_rows", not problems, "error", summary, _metadata(checked, "ranges", problems)
    )


def _range_rows(
    objects: ObjectStore, table: str, dt: str, r: MergeRange, small: dict[int, RegisteredObject]
) -> list[str]:
    """The range's recorded rows against its merged object's footer, and with the rows its
    merge left out (`dropped_rows`: records that lost to another of their key) against the
    small objects it covers."""
    where = _where(table, dt, r)
    key = _key(objects, r)
    if key is None:
        return [f"{where}: no merged object under {objects.root_url} to count ({r.url})"]
    try:
        footer = objects.parquet_metadata(key)
    except ObjectStoreError as exc:
        return [f"{where}: cannot read the merged object's footer: {exc}"]
    problems = []
    lower = r.lower if r.lower is not None else 0
    ids = range(lower + 1, r.upper + 1)
    missing = [i for i in ids if i not in small]
    dropped = dropped_rows(footer)
    if missing:
        problems.append(f"{where}: small object id {missing[0]} of the range is not in the ledger")
    elif sum(small[i].row_count for i in ids) != r.row_count + dropped:
        small_rows = sum(small[i].row_count for i in ids)
        left_out = f" and left out {dropped}" if dropped else ""
        problems.append(
            f"{where}: records {r.row_count} rows{left_out}, its small objects hold {small_rows}"
        )
    footer_rows = footer.num_rows
    if footer_rows != r.row_count:
        problems.append(f"{where}: records {r.row_count} rows, {r.url} holds {footer_rows}")
    return problems


def merge_jobs(store: CoordinationStore, table: str, ownership_timeout_s: float) -> CheckOutcome:
    """A job lease item per dt at most, each for a partition that exists (the runner creates
    one per requested dt: one without a partition is a request for nothing); no partition with
    unmerged objects and no `merge_due_at_ms` (stranded: nothing would ever merge them); and a
    warning for a job ASSIGNED past twice its ownership timeout — a dead merge nobody took over
    yet, which the sensor's next request should (a human looks if it stays)."""
    skipped = _skipped("merge_jobs", table)
    if skipped:
        return skipped
    # Job items first: one is only created for a partition that exists, so a later read of
    # the partitions holds each item's partition, however merges and commits interleave.
    items = list(store.iter_items(store.source_identifier(table, ItemType.MERGE_JOB)))
    partitions = {p.dt: p for p in store.table_partitions(table)}
    errors: list[str] = []
    for dt, n in sorted(Counter(item.partition_key for item in items).items()):
        if n > 1:
            errors.append(f"{table} dt={dt}: {n} merge job items")
    for dt in sorted({item.partition_key for item in items} - partitions.keys()):
        errors.append(f"{table} dt={dt}: a merge job for no table partition")
    stranded = 0
    for dt, p in sorted(partitions.items()):
        if p.unmerged > 0 and p.merge_due_at_ms is None:
            stranded += 1
            errors.append(
                f"{table} dt={dt}: {p.unmerged} unmerged objects and no pending merge job"
            )
    dead_before = store.now_ms() - to_millis(2 * ownership_timeout_s)
    dead = [
        f"{table} dt={item.partition_key}: merge job held by {item.owner} (epoch {item.epoch}) "
        f"expired at {iso_utc(item.ownership_timeout_ms)}, nobody took it over"
        for item in sorted(items, key=lambda i: i.partition_key)
        if item.status is PartitionStatus.ASSIGNED
        and item.ownership_timeout_ms is not None
        and item.ownership_timeout_ms < dead_before
    ]
    problems = errors + dead
    if problems:
        summary = (
            f"{len(errors)} merge job problems ({stranded} partitions stranded), "
            f"{len(dead)} dead merges{_first(problems)}"
        )
    else:
        pending = sum(p.merge_due_at_ms is not None for p in partitions.values())
        summary = (
            f"{len(partitions)} table partitions, {pending} with a pending merge job, "
            "none stranded, no dead merge"
        )
    severity: Severity = "error" if errors else "warn"
    metadata = _metadata(len(partitions), "partitions", problems)
    metadata.update(job_items=len(items), stranded=stranded, dead_merges=len(dead))
    return CheckOutcome("merge_jobs", not problems, severity, summary, metadata)


def run_one(
    name: str,
    store: CoordinationStore,
    config: StreamConfig,
    *,
    objects: ObjectStore,
    ownership_timeout_s: float,
    table: str | None = None,
    full: bool = False,
) -> CheckOutcome:
    """The check `name` of `CHECKS` for one stream's table: one Dagster asset check each.
    `table` is its ledger table (default: the stream's name), `objects` the table's object
    store (where its merged objects are), `ownership_timeout_s` the merge job lease's. The
    chain checks judge the partitions changed since they last passed (`full`: all of them;
    `resources.ledger.check_scope`); `merge_jobs` reads one row per partition, always all."""
    table = table or config.name
    judges: dict[str, Callable[[CheckScope], CheckOutcome]] = {
        "merge_chain": lambda scope: merge_chain(store, table, scope),
        "merged_objects_exist": lambda scope: merged_objects_exist(store, objects, table, scope),
        "merged_rows": lambda scope: merged_rows(store, objects, table, scope),
    }
    if name in judges:
        if _skipped(name, table) is not None:  # nothing to judge, nothing to remember
            return judges[name](CheckScope.everything())
        return with_memory(store, config.name, table, name, judges[name], full)
    if name == "merge_jobs":
        return merge_jobs(store, table, ownership_timeout_s)
    # A caller's bug (the names come from CHECKS): no LeaseholdError, keep the traceback.
    raise ValueError(f"no compaction check {name!r}; known: {', '.join(CHECKS)}")


def run_all(
    store: CoordinationStore,
    config: StreamConfig,
    *,
    objects: ObjectStore,
    ownership_timeout_s: float,
    table: str | None = None,
    full: bool = False,
) -> list[CheckOutcome]:
    """Every check of `CHECKS` for one stream's table, in that order (arguments as `run_one`).
    Writes nothing but the checks' memory."""
    return [
        run_one(
            name,
            store,
            config,
            objects=objects,
            ownership_timeout_s=ownership_timeout_s,
            table=table,
            full=full,
        )  # fmt: skip
        for name in CHECKS
    ]
