"""`IcebergTarget`: `table_format: iceberg` — each leasehold table an Apache Iceberg table
(`resources.catalog.iceberg.catalogs`: SQLite, Glue or REST), each `switch` call ONE snapshot.

A commit is optimistic: it names the snapshot it was planned on, and the catalog refuses it
(`CommitFailedException`) when another writer committed first. pyiceberg's own replay is not
used (`internals`): the table is loaded again, the switch re-planned on the new head (the
dates' seqs, their files) and committed again, at most `COMMIT_POLICY.max_attempts` times with
full jitter. Because every switch re-plans from scratch, no pyiceberg conflict validation is
involved: two publishers switching different dates both land, one after the other, and the
same date switched twice lands once. Snapshots past the retention expire in the same commit
(`switching.expired_snapshots`); once it landed, the manifest lists of the expired snapshots
and the manifests no retained snapshot names are deleted (`references`: the metadata files on
storage stay as bounded as the metadata). No data file is ever deleted here, and
`gc.enabled=false` keeps any other engine's expiry from deleting one: leasehold's GC deletes
what no retained snapshot references (`referenced_files`), and under `metadata_prefix` only
what the current metadata does not name (`metadata_files`: a commit that never landed).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

import pyarrow as pa
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError, TableAlreadyExistsError
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from resources.catalog.base import (
    CatalogError,
    CatalogUnreachableError,
    Column,
    TableDefinition,
    grown_columns,
)
from resources.catalog.iceberg import history, internals, references
from resources.catalog.iceberg.catalogs import IcebergCatalog, unreachable
from resources.catalog.iceberg.schema import (
    hive_columns,
    iceberg_type,
    partition_spec,
    table_properties,
    table_schema,
)
from resources.catalog.iceberg.switching import expired_snapshots, plan_switch, seqs, versions
from resources.catalog.target import (
    ICEBERG,
    PartitionFile,
    PartitionSwitch,
    PublicationTarget,
    PublishedPartition,
    TableSnapshot,
)
from resources.retry import RetryPolicy, call_with_retries, log_retries

T = TypeVar("T")

log = logging.getLogger(__name__)

COMMIT_POLICY = RetryPolicy(max_attempts=10, base_delay_s=0.05, max_delay_s=2.0)
"""Commit rounds (another writer first, or the catalog not answering) before giving up."""


class ExpiredMeanwhileError(CommitFailedException):
    """A snapshot a commit expires was expired by another engine between the plan and the
    commit: nothing landed; re-planned on the new head like any other concurrent commit."""


@dataclass(frozen=True)
class _Committed:
    """A switch that landed: the dates it switched, the snapshots it expired (as they were
    before it), and the table as the commit left it."""

    dts: list[str]
    expired: list[Snapshot]
    table: Table
    listed: frozenset[str] | None
    """The manifests the new snapshot's manifest list names (None: not known)."""


def _metadata_prefix(table: Table) -> str:
    return table.location_provider().metadata_path.rstrip("/") + "/"


class IcebergTarget(PublicationTarget):
    """Publication into Iceberg tables: `switch` commits one snapshot per call; the history
    (`snapshots`, `snapshot_as_of`) and reads at any retained snapshot (`data_files`, `read`)
    come with it."""

    table_format = ICEBERG

    def __init__(
        self,
        catalog: IcebergCatalog,
        *,
        retention_s: float = 432000.0,
        max_snapshots: int = 250,
        commit_policy: RetryPolicy = COMMIT_POLICY,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.catalog = catalog
        self.retention_ms = int(retention_s * 1000)
        self.max_snapshots = max_snapshots
        self.commit_policy = commit_policy
        self.clock = clock
        self._manifest_lists: dict[str, references.ManifestLists] = {}

    def __repr__(self) -> str:
        return f"IcebergTarget({self.catalog.where})"

    # -- tables ------------------------------------------------------------------------------

    def load(self, table: str) -> Table:
        """The table as the catalog holds it now. Raises `CatalogError` when it is missing."""
        found = self._find(table)
        if found is None:
            raise CatalogError(f"{self.catalog.where} has no table {table!r}")
        return found

    def _find(self, table: str) -> Table | None:
        ident = self.catalog.identifier(table)

        def load() -> Table | None:
            try:
                return self.catalog.catalog.load_table(ident)
            except NoSuchTableError:
                return None

        return self.catalog.call(f"load table {table!r}", load)

    def ensure_table(self, table: TableDefinition) -> None:
        schema = table_schema(table.name, table.columns)  # a bad column: nothing written
        if self._find(table.name) is None:
            self.catalog.ensure_namespace()
            ident = self.catalog.identifier(table.name)

            def create() -> bool:
                try:
                    self.catalog.catalog.create_table(
                        ident,
                        schema,
                        location=table.location.rstrip("/"),
                        partition_spec=partition_spec(schema),
                        properties=table_properties(schema),
                    )
                    return True
                except TableAlreadyExistsError:
                    return False  # created meanwhile by another process: grown below

            if self.catalog.call(f"create table {table.name!r}", create):
                log.info("%s: created table %s", self.catalog.where, table.name)
                return
        self.add_columns(table.name, table.columns)

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        def attempt() -> list[Column]:
            found = self.load(table)
            held = hive_columns(table, found.schema())
            added = list(grown_columns(table, held, columns)[len(held) :])
            if added:
                with found.update_schema() as update:
                    for c in added:
                        update.add_column(c.name, iceberg_type(table, c))
            return added

        added = self._committing(f"add columns to {table!r}", attempt)
        if added:
            log.info("%s: table %s gained columns %s", self.catalog.where, table, added)
        return added

    def table(self, name: str) -> TableDefinition | None:
        found = self._find(name)
        if found is None:
            return None
        columns = hive_columns(name, found.schema())
        return TableDefinition(name, columns, found.metadata.location)

    # -- partitions --------------------------------------------------------------------------

    def partitions(self, table: str) -> list[PublishedPartition]:
        found = self.load(table)
        location = found.metadata.location
        properties = found.metadata.properties
        named = versions(properties)
        return [
            PublishedPartition(table, dt, seq, location, named.get(dt, ""))
            for dt, seq in sorted(seqs(properties).items())
        ]

    def partition(self, table: str, dt: str) -> PublishedPartition | None:
        return next((p for p in self.partitions(table) if p.dt == dt), None)

    def switch(
        self,
        table: str,
        switches: Sequence[PartitionSwitch],
        *,
        summary: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Commits, when a switch applies, one snapshot whose summary holds `summary` and
        `leasehold.seq.<dt>` per date switched; snapshots past the retention expire in it, and
        once it landed the metadata files only they referenced are deleted (`references`)."""
        committed = self._committing(
            f"switch {table!r}", lambda: self._commit_switch(table, switches, summary or {})
        )
        if committed is None:
            return []
        lists = self._manifest_lists.setdefault(table, references.ManifestLists())
        current = committed.table.current_snapshot()
        if current is not None and committed.listed is not None:  # the snapshot it made
            lists.remember(current.manifest_list, committed.listed)
        if committed.expired:
            self._delete_unreferenced(table, committed, lists)
        log.info("%s: switched %s of %s", self.catalog.where, ", ".join(committed.dts), table)
        return committed.dts

    def _commit_switch(
        self, table: str, switches: Sequence[PartitionSwitch], summary: Mapping[str, str]
    ) -> _Committed | None:
        """One attempt: load, plan on the table as it is now, commit (expiry staged in it)."""
        found = self.load(table)
        plan = plan_switch(found, switches, summary)
        if plan is None:
            return None
        planned_on = found.metadata  # the commit replaces `found.metadata` with its own
        tx = internals.transaction(found)
        tx.set_properties(plan.properties)
        now_ms = int(self.clock() * 1000)
        expired = expired_snapshots(planned_on, now_ms, self.retention_ms, self.max_snapshots)
        internals.stage_expiry(tx, expired)
        producer = internals.stage_overwrite(tx, plan.deleted, plan.added, plan.summary)
        try:
            committed = internals.commit(tx, producer)
        except ValueError as exc:
            # pyiceberg's catalogs apply our updates to the table as it is at commit time: a
            # snapshot another engine expired meanwhile cannot be removed again. Nothing landed.
            if expired and self._expired_meanwhile(table, expired):
                raise ExpiredMeanwhileError(f"{table}: a snapshot to expire is gone") from exc
            raise
        expiring = set(expired)
        gone = [s for s in planned_on.snapshots if s.snapshot_id in expiring]
        return _Committed(plan.dts, gone, committed, producer.listed)

    def _expired_meanwhile(self, table: str, snapshot_ids: Sequence[int]) -> bool:
        held = self.load(table).metadata
        return any(held.snapshot_by_id(i) is None for i in snapshot_ids)

    def _delete_unreferenced(
        self, table: str, committed: _Committed, lists: references.ManifestLists
    ) -> None:
        """Delete the manifest lists of the snapshots `committed` expired and the manifests no
        snapshot it retains names. The switch landed: a failure here is logged, not raised
        (the files are left behind; they cost only storage)."""
        done = committed.table
        try:
            doomed = references.unreferenced_metadata(
                done.io, committed.expired, done.metadata, lists
            )
        except OSError as exc:
            log.warning("%s: %s: expired metadata kept (%s)", self.catalog.where, table, exc)
            return
        prefix = _metadata_prefix(done)
        deleted, failures = references.delete_files(done.io, doomed, prefix)
        for failure in failures:
            log.warning("%s: %s: not deleted: %s", self.catalog.where, table, failure)
        log.debug("%s: %s: deleted %d expired metadata files", self.catalog.where, table, deleted)

    def _committing(self, what: str, attempt: Callable[[], T]) -> T:
        """`attempt()` (load, decide on the table as it is now, commit), again after another
        writer committed first or the catalog did not answer, bounded, with full jitter.
        Raises `CatalogError` / `CatalogUnreachableError` naming the catalog after the last."""
        where = f"{self.catalog.where}: {what}"

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            if isinstance(exc, CommitFailedException):
                return CatalogError(
                    f"{where}: another writer committed first {attempts} times in a row: {exc}"
                )
            return CatalogUnreachableError(f"{where} failed after {attempts} attempts: {exc}")

        return call_with_retries(
            attempt,
            policy=self.commit_policy,
            is_retryable=lambda e: isinstance(e, CommitFailedException) or unreachable(e),
            on_give_up=give_up,
            sleep=self.catalog.sleep,
            on_retry=log_retries(log, logging.INFO, where, self.commit_policy),
        )

    # -- history -----------------------------------------------------------------------------

    def snapshots(self, table: str) -> list[TableSnapshot]:
        """Every retained snapshot of `table`, oldest first. Raises `CatalogError`."""
        return history.snapshots(self.load(table))

    def snapshot_as_of(self, table: str, timestamp_ms: int) -> TableSnapshot | None:
        """The snapshot that was current at `timestamp_ms` (None: before the first, or
        expired). Raises `CatalogError`."""
        return history.snapshot_as_of(self.load(table), timestamp_ms)

    def data_files(
        self, table: str, dt: str, snapshot_id: int | None = None
    ) -> list[PartitionFile]:
        """The files of date `dt` at `snapshot_id` (default: the current snapshot), by URL.
        Raises `CatalogError` (also for a snapshot the table does not hold)."""
        return history.data_files(self.load(table), dt, snapshot_id)

    def files_by_date(
        self, table: str, snapshot_id: int | None = None
    ) -> dict[str, list[PartitionFile]]:
        """dt -> the files of that date at `snapshot_id` (default: the current snapshot), by
        URL, from one scan plan. Raises `CatalogError` (also for a snapshot the table does not
        hold)."""
        return history.files_by_date(self.load(table), snapshot_id)

    def read(
        self,
        table: str,
        dt: str | None = None,
        snapshot_id: int | None = None,
        columns: Sequence[str] | None = None,
    ) -> pa.Table:
        """The rows of `table` (of date `dt` only, when given) at `snapshot_id` (default: the
        current snapshot) with `columns` (default: all, in the schema's order), read by
        pyiceberg's scan. Raises `CatalogError`."""
        return history.read(self.load(table), dt, snapshot_id, columns)

    # -- garbage collection ------------------------------------------------------------------

    def referenced_files(self, table: str) -> set[str]:
        """The URL of every file a retained snapshot of `table` references (data files, and
        delete files another engine wrote): the live entries of the distinct manifests of all
        retained snapshots, each manifest read once. Leasehold's GC must keep these; a file a
        commit still in flight adds is not among them (the GC's safety delay covers it).
        Read-only. When a manifest list or manifest is gone because a commit expired its
        snapshot meanwhile, the table is loaded again and read anew. Raises `CatalogError`
        (no such table; a file the table still references is missing or unreadable: never a
        partial set), `CatalogUnreachableError`."""
        return self._read_whole(
            table, "files referenced by", lambda t: references.referenced_files(t.io, t.metadata)
        )

    def metadata_prefix(self, table: str) -> str:
        """Where `table` keeps its Iceberg metadata (metadata.json files, manifest lists,
        manifests), ending with `/`: `<table location>/metadata/`, or the table's
        `write.metadata.path`. The target deletes what its expiry leaves there itself;
        leasehold's GC deletes what no commit that landed names (`metadata_files`).
        Read-only. Raises `CatalogError` (no such table), `CatalogUnreachableError`."""
        return _metadata_prefix(self.load(table))

    def metadata_files(self, table: str) -> set[str]:
        """Every metadata file `table`'s current metadata names (`references.metadata_files`);
        reads the retained snapshots' manifest lists, again on a table a commit changed
        meanwhile. Raises `CatalogError` (no such table; a retained snapshot's manifest list
        missing or unreadable: never a partial set), `CatalogUnreachableError`."""
        return self._read_whole(
            table,
            "metadata files of",
            lambda t: references.metadata_files(t.io, t.metadata, t.metadata_location),
        )

    def _read_whole(self, table: str, what: str, read: Callable[[Table], T]) -> T:
        """`read(table as loaded)`, again on the table as loaded anew when a file it needs is
        gone because a commit expired its snapshot meanwhile (bounded). Raises `CatalogError`
        naming `what`: a file the table still references is missing or unreadable."""
        where = f"{self.catalog.where}: {what} {table!r}"
        for _ in range(self.commit_policy.max_attempts):
            found = self.load(table)
            try:
                return read(found)
            except FileNotFoundError as exc:
                if self.load(table).metadata_location == found.metadata_location:
                    raise CatalogError(f"{where}: {exc}") from exc
            except OSError as exc:
                raise CatalogError(f"{where}: {exc}") from exc
        raise CatalogError(f"{where}: the table changed under every read")
