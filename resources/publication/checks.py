"""Every publication check of a stream's table, in one registry, runnable without Dagster.

The same shape as the compaction registry (`resources.compaction.checks`, a sibling this layer
may not import): one function per check taking plain arguments and returning a `CheckOutcome`,
and `run_all`; the Dagster asset checks on the published-table asset and `leasehold check` only
turn outcomes into results.

They judge what an external engine is served (docs/architecture.md): the catalog points at the
ledger's current publication, whose manifest names files that exist in full and hold exactly
the rows committed for the ids it covers, and a partition switched to merged objects only once
its chain covers every live id; and that nothing committed waits for publication longer than
the interval that should have published it. Read-only but for the checks' memory
(`resources.ledger.check_scope`): most judge the partitions changed since they last passed.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import replace

from resources.catalog.base import CatalogError
from resources.catalog.target import MANIFESTS, PublicationTarget, PublishedPartition
from resources.check_outcome import CheckOutcome
from resources.dedupe.served import ServedStateError
from resources.ledger.check_scope import CheckScope, with_memory
from resources.ledger.ledger import Ledger
from resources.ledger.merge import MergeRange, chain_problems
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.publication import Publication, live_upper
from resources.ledger.publication_lag import is_behind, partition_lag
from resources.ledger.snapshot import partition_snapshot
from resources.objects.base import ObjectStore, ObjectStoreError
from resources.publication.catalog_check import catalog_current
from resources.publication.check_support import (
    MAX_LISTED,
    check_outcome,
    first_listed,
    published_partitions,
    where_of,
)
from resources.publication.manifest import (
    SYMLINK_DIR,
    SYMLINK_NAME,
    ManifestEntry,
    parse_symlink_text,
    read_spectrum,
)
from resources.publication.publication_state import served_state
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

CHECKS: dict[str, str] = {
    "manifest_entries_exist": "Every entry of each published partition's current manifest "
    "exists with its recorded content length, and the symlink manifest lists the same files.",
    "switch_coverage": "Every switched partition is closed and its merge chain is valid and "
    "covers every live id; every current publication covers only ids the ledger holds.",
    "published_rows": "Per published partition: the rows in its current manifest's files "
    "(Parquet footers) = the rows the ledger committed for the ids it covers.",
    "catalog_current": "Every partition the table serves (its Hive partition, or its Iceberg "
    "snapshot's) is its ledger's current publication (location and seq), and every published "
    "partition is served.",
    "served_files": "Per published partition the table serves at its ledger's current seq: "
    "the data files it serves (an Iceberg table's current snapshot, a Hive partition's symlink "
    "manifest) are exactly the files of that publication's record, each once.",
    "publication_lag": "No committed rows of a table partition have been missing from its "
    "published version longer than the interval that should have published them: a "
    "publication tick, or for a delayed object its merge (merge.delayed_interval after its "
    "commit, at once while the live ids are unmerged), plus a margin. Commit times the ledger "
    "does not hold are reported, not judged.",
}
"""Check name -> description, in the order `run_all` runs them."""

log = logging.getLogger(__name__)


def _no_record(table: str, tp: TablePartition) -> str:
    return (
        f"{where_of(table, tp.dt)}: publication_seq is {tp.publication_seq} but the ledger keeps "
        "no publication record"
    )


def _entries(objects: ObjectStore, p: Publication) -> list[ManifestEntry]:
    """The current manifest's entries (Spectrum), refused unless the symlink manifest of the
    same version lists the same URLs: engines read either."""
    entries = read_spectrum(objects, p.location)
    symlink_key = objects.key_of(p.location + SYMLINK_DIR + SYMLINK_NAME)
    symlinks = parse_symlink_text(objects.get_bytes(symlink_key))
    if symlinks != [e.url for e in entries]:
        raise ObjectStoreError(
            f"the symlink manifest lists {len(symlinks)} files, the Spectrum manifest "
            f"{len(entries)}, not the same"
        )
    if len(entries) != p.files:
        raise ObjectStoreError(
            f"the manifest has {len(entries)} entries, the ledger records {p.files}"
        )
    return entries


def manifest_entries_exist(
    ledger: Ledger, objects: ObjectStore, table: str, scope: CheckScope | None = None
) -> CheckOutcome:
    """A HEAD (a stat locally) per entry of each current manifest: a missing or truncated file
    fails every engine reading the partition."""
    problems: list[str] = []
    partitions = 0
    for tp, p in published_partitions(ledger, table, scope):
        partitions += 1
        where = where_of(table, tp.dt)
        if p is None:
            problems.append(_no_record(table, tp))
            continue
        try:
            entries = _entries(objects, p)
        except (ObjectStoreError, OSError) as exc:
            problems.append(f"{where}: manifest {p.location}: {exc}")
            continue
        for e in entries:
            try:
                size = objects.size(objects.key_of(e.url))
            except ObjectStoreError as exc:
                problems.append(f"{where}: {e.url}: {exc}")
                continue
            if size is None:
                problems.append(f"{where}: {e.url} does not exist")
            elif size != e.content_length:
                problems.append(
                    f"{where}: {e.url} is {size} bytes, the manifest records {e.content_length}"
                )
    return check_outcome(
        "manifest_entries_exist",
        problems,
        partitions,
        "partitions",
        f"every entry of {partitions} current manifests exists with its recorded length",
    )


def switch_coverage(ledger: Ledger, table: str, scope: CheckScope | None = None) -> CheckOutcome:
    problems: list[str] = []
    checked = 0
    for tp in (scope or CheckScope.everything()).changed(ledger.table_partitions(table)):
        checked += 1
        found = _coverage_problems(table, tp, ledger.merge_ranges(table, tp.dt))
        if found:
            # Row and chain read apart (a merge or commit in between fakes a problem, and a
            # DynamoDB Query may see half a merge commit): judge again on one moment's read.
            found = _coverage_problems(table, *partition_snapshot(ledger, table, tp))
        problems += found
    return check_outcome(
        "switch_coverage",
        problems,
        checked,
        "partitions",
        f"{checked} table partitions: every switched one is covered by its merge chain, every "
        "publication within the ledger's ids",
    )


def _coverage_problems(table: str, tp: TablePartition, ranges: list[MergeRange]) -> list[str]:
    where = where_of(table, tp.dt)
    found: list[str] = []
    chain_end = ranges[-1].upper if ranges else 0
    if tp.switched:
        if tp.last_live_object_id is None:
            found.append(f"{where}: switched but never closed")
        if not ranges:
            found.append(f"{where}: switched but never merged")
        found += [f"{where}: {p}" for p in chain_problems(ranges, tp.next_object_id)]
        if tp.last_live_object_id is not None and chain_end < tp.last_live_object_id:
            found.append(
                f"{where}: switched, but the chain ends at {chain_end}, below the last live id "
                f"{tp.last_live_object_id}"
            )
    if tp.publication_seq > 0:
        # A live publication never names a delayed object (they wait for their merge).
        limit = chain_end if tp.switched else live_upper(tp)
        if not 1 <= tp.published_upper <= limit:
            kind = "merged" if tp.switched else "live"
            found.append(
                f"{where}: the current {kind} publication covers 1..{tp.published_upper}, "
                f"outside 1..{limit}"
            )
    return found


def published_rows(
    ledger: Ledger, objects: ObjectStore, table: str, scope: CheckScope | None = None
) -> CheckOutcome:
    """Rows three ways per published partition: the current manifest's Parquet footers (only
    footers are read), the ledger's objects with ids `1..upper`, and the publication record.
    Per date, so with ingestion's reconciliation it is end-to-end exactly-once."""
    # Publications first, objects after: a publication only covers committed ids, so every id
    # it covers is in a later read of the objects.
    published = list(published_partitions(ledger, table, scope))
    problems: list[str] = []
    for tp, p in published:
        if p is None:
            problems.append(_no_record(table, tp))
            continue
        small = {o.object_id: o for o in ledger.ledger_objects(table, tp.dt)}
        problems += _rows_problems(objects, table, p, small)
    return check_outcome(
        "published_rows",
        problems,
        len(published),
        "partitions",
        f"{len(published)} published partitions serve exactly the rows the ledger committed",
    )


def _rows_problems(
    objects: ObjectStore, table: str, p: Publication, small: dict[int, RegisteredObject]
) -> list[str]:
    where = where_of(table, p.dt)
    missing = [i for i in range(1, p.upper + 1) if i not in small]
    if missing:
        return [f"{where}: small object id {missing[0]} of 1..{p.upper} is not in the ledger"]
    committed = sum(small[i].row_count for i in range(1, p.upper + 1))
    try:
        served = sum(
            objects.parquet_metadata(objects.key_of(e.url)).num_rows
            for e in read_spectrum(objects, p.location)
        )
    except (ObjectStoreError, OSError) as exc:
        return [f"{where}: cannot count the manifest's rows: {exc}"]
    try:
        state = served_state(objects, p)
    except (ObjectStoreError, OSError, ServedStateError) as exc:
        return [f"{where}: cannot read the publication's dedupe state: {exc}"]
    problems = []
    dropped = 0 if state is None else state.dropped_rows
    if state is not None and state.committed_rows != committed:
        problems.append(
            f"{where}: the dedupe state (seq {p.seq}) counts {state.committed_rows} "
            f"committed rows, the ledger {committed}"
        )
    left_out = f" less {dropped} that lost to another record of their key" if dropped else ""
    if served != committed - dropped:
        problems.append(
            f"{where}: the manifest (seq {p.seq}) serves {served} rows, the ledger committed "
            f"{committed} for ids 1..{p.upper}{left_out}"
        )
    if p.rows != committed - dropped:
        problems.append(
            f"{where}: the publication records {p.rows} rows, committed {committed}{left_out}"
        )
    return problems


def served_files(
    ledger: Ledger,
    objects: ObjectStore,
    target: PublicationTarget,
    table: str,
    scope: CheckScope | None = None,
) -> CheckOutcome:
    """What engines read against what the ledger recorded, per partition served at the ledger's
    current seq (one that lags, is missing or points elsewhere is `catalog_current`'s finding,
    not judged here): the served files — an Iceberg table's current snapshot (one scan plan
    for every date), a Hive partition's symlink manifest — are exactly the files of the
    publication's manifest version, each once. The target is read before the ledger's records
    of a date it serves ahead, so a publication recorded meanwhile is judged on the newer
    record."""
    problems: list[str] = []
    checked = 0
    try:
        served = ServedFiles(objects, target, table)
    except (CatalogError, ObjectStoreError, OSError) as exc:
        return check_outcome("served_files", [f"{table}: {exc}"], 0, "partitions", "")
    for tp, p in published_partitions(ledger, table, scope):
        partition = served.partitions.get(tp.dt)
        seq = 0 if partition is None else partition.seq
        if p is not None and seq > p.seq:
            records = ledger.publications(table, tp.dt)
            p = records[-1] if records else None
        if p is None or partition is None or seq != p.seq:
            continue
        checked += 1
        where = f"{where_of(table, tp.dt)} (seq {p.seq})"
        try:
            recorded = [e.url for e in read_spectrum(objects, p.location)]
            urls = served.urls(partition)
        except (CatalogError, ObjectStoreError, OSError) as exc:
            problems.append(f"{where}: {exc}")
            continue
        missing = sorted(set(recorded) - set(urls))
        extra = sorted(set(urls) - set(recorded))
        if missing or extra or len(urls) != len(set(urls)):
            problems.append(
                f"{where}: serves {len(urls)} files, the publication records {len(recorded)}: "
                f"{len(missing)} missing{first_listed(missing) if missing else ''}, "
                f"{len(extra)} not recorded{first_listed(extra) if extra else ''}, "
                f"{len(urls) - len(set(urls))} served twice"
            )
    return check_outcome(
        "served_files",
        problems,
        checked,
        "partitions",
        f"{checked} served partitions hold exactly their publication's files",
    )


class ServedFiles:
    """The partitions a target serves, and the files engines read for each: an Iceberg
    table's from one scan plan of its current snapshot, a Hive partition's from its symlink
    manifest (read when asked). Raises `CatalogError`, `ObjectStoreError`."""

    def __init__(self, objects: ObjectStore, target: PublicationTarget, table: str) -> None:
        self.objects = objects
        exists = target.table(table) is not None
        self.partitions = {p.dt: p for p in target.partitions(table)} if exists else {}
        self.by_date: dict[str, list[str]] | None = None
        if exists and target.table_format != MANIFESTS:
            from resources.catalog.iceberg.target import IcebergTarget  # pyiceberg: when needed

            if not isinstance(target, IcebergTarget):
                raise CatalogError(f"{table}: cannot list what a {target.table_format!r} serves")
            files = target.files_by_date(table)
            self.by_date = {dt: [f.url for f in fs] for dt, fs in files.items()}

    def urls(self, partition: PublishedPartition) -> list[str]:
        if self.by_date is not None:
            return self.by_date.get(partition.dt, [])
        key = self.objects.key_of(partition.location + SYMLINK_NAME)
        return parse_symlink_text(self.objects.get_bytes(key))


def publication_lag(
    ledger: Ledger, table: str, delayed_interval_s: float, now_ms: int
) -> CheckOutcome:
    """Per table partition, how long its oldest unpublished committed rows have waited
    (`resources.ledger.publication_lag`). `now_ms`: the store's clock (commit times are on it),
    read before the rows, so an id judged late was unpublished past its deadline when its row
    was read. Only partitions whose row shows ids past what is published have their objects
    read: the cost is the partition rows plus the objects of the partitions that are behind,
    not every object ever committed."""
    delayed_ms = round(delayed_interval_s * 1000)
    partitions = ledger.table_partitions(table)
    problems: list[str] = []
    unknown: list[str] = []
    behind = unknown_ids = 0
    for tp in partitions:
        if not is_behind(tp):
            continue
        behind += 1
        lag = partition_lag(tp, ledger.ledger_objects(table, tp.dt), now_ms, delayed_ms)
        if lag.late:
            problems.append(lag.describe())
        elif lag.unknown:
            unknown.append(lag.describe())
        unknown_ids += lag.unknown
    if unknown_ids:
        log.info(
            "%s: %d unpublished ids have no commit time in the ledger; publication_lag cannot "
            "judge them",
            table,
            unknown_ids,
        )
    good = f"{len(partitions)} table partitions: " + (
        f"{behind} behind, none past its publication deadline"
        if behind
        else "every committed row is published"
    )
    if unknown_ids:
        good += (
            f"; {unknown_ids} unpublished ids have an unknown commit time{first_listed(unknown)}"
        )
    outcome = check_outcome("publication_lag", problems, len(partitions), "partitions", good)
    return replace(
        outcome,
        metadata={
            **outcome.metadata,
            "behind": behind,
            "unknown_commit_times": unknown_ids,
            "unknown_details": "\n".join(f"- {u}" for u in unknown[:MAX_LISTED]) or "none",
        },
    )


def run_one(
    name: str,
    config: StreamConfig,
    store: CoordinationStore,
    objects: ObjectStore,
    target: PublicationTarget,
    full: bool = False,
) -> CheckOutcome:
    """The check `name` of `CHECKS` for one stream's published table (`config.name`); `objects` is
    the table's object store (manifests and data files), `target` the one the publisher switches
    (`config.table_format`). The manifest, coverage and row checks judge the partitions changed
    since they last passed (`full`: all of them; `resources.ledger.check_scope`);
    `catalog_current` and `publication_lag` read one row per partition, always all."""
    table = config.name
    judges: dict[str, Callable[[CheckScope], CheckOutcome]] = {
        "manifest_entries_exist": lambda scope: manifest_entries_exist(
            store, objects, table, scope
        ),
        "switch_coverage": lambda scope: switch_coverage(store, table, scope),
        "published_rows": lambda scope: published_rows(store, objects, table, scope),
        "served_files": lambda scope: served_files(store, objects, target, table, scope),
    }
    if name in judges:
        return with_memory(store, config.name, table, name, judges[name], full)
    if name == "catalog_current":
        return catalog_current(store, target, table)
    if name == "publication_lag":
        now_ms = store.now_ms()  # before any read: see publication_lag
        return publication_lag(store, table, config.merge.delayed_interval_s, now_ms)
    # A caller's bug (the names come from CHECKS): no LeaseholdError, keep the traceback.
    raise ValueError(f"no publication check {name!r}; known: {', '.join(CHECKS)}")


def run_all(
    config: StreamConfig,
    store: CoordinationStore,
    objects: ObjectStore,
    target: PublicationTarget,
    full: bool = False,
) -> list[CheckOutcome]:
    """Every check of `CHECKS`, in that order (arguments as `run_one`). Writes nothing but
    the checks' memory."""
    return [run_one(name, config, store, objects, target, full) for name in CHECKS]
