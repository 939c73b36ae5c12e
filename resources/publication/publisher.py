"""`Publisher`: make each table partition's due publication current, in the ledger and the catalog.

One publication of one table partition, in the order that keeps every reader safe:
1. Read the partition and decide what is due (`publication_due`): its live small objects
   (`1..live_upper`: every id while open, never a delayed one) before the switch, its merge
   chain's objects once it is closed and the chain covers every live id, and again after each
   later merge.
2. Write the version's two manifests under a directory no other attempt uses
   (`manifest.new_version_key`): nothing points at it yet, so a crash leaves an orphan only.
3. Record it in the ledger (`Ledger.record_publication`, one conditional write): it becomes
   current only if it is newer than the current one, so two publishers racing, or a slow one,
   never move a partition back. The loser's directory is an orphan for garbage collection.
4. Give the catalog table the columns of the stream's latest schema version (only ever
   adding: `Catalog.add_columns`), then point the catalog partition at the version's
   `symlink/` directory with the publication's `seq`; the catalog refuses a lower `seq` too.

A crash between 3 and 4 leaves the catalog behind the ledger: the next run sees the catalog's
`seq` below the partition's `publication_seq` and points it at the ledger's current publication
(`CATALOG_REPAIRED`). No lease is needed: every step is either private (2) or refused when
stale (3, 4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from resources.catalog.base import (
    HIVE_TYPES,
    Catalog,
    CatalogPartition,
    Column,
    TableDefinition,
)
from resources.errors import LeaseholdError
from resources.ledger.merge import chain_problems
from resources.ledger.model import TablePartition
from resources.ledger.publication import (
    LIVE,
    MERGED,
    DataFile,
    Publication,
    PublicationKind,
    StalePublicationError,
    live_files,
    live_upper,
    merged_files,
    publication_due,
)
from resources.objects.base import ObjectStore
from resources.publication.manifest import catalog_location, new_version_key, write_version
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import followed_config
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

PUBLISHED = "published"
UP_TO_DATE = "up_to_date"
CATALOG_REPAIRED = "catalog_repaired"
FAILED = "failed"

MAX_CATCH_UPS = 3
"""Corrections of a catalog partition moved back by a racing writer, per publication."""


@dataclass(frozen=True)
class PublicationOutcome:
    """What publishing one partition did: the outcome, why, and the publication recorded."""

    dt: str
    outcome: str
    """PUBLISHED, UP_TO_DATE, CATALOG_REPAIRED or FAILED (retried by the next run)."""
    message: str
    publication: Publication | None
    """The publication now current: the one recorded (PUBLISHED), the one the catalog was
    pointed at (CATALOG_REPAIRED); None otherwise."""
    switched_now: bool
    """This publication switched the partition from live to merged objects."""

    @property
    def ok(self) -> bool:
        return self.outcome != FAILED

    def metadata(self) -> dict[str, Any]:
        """What the published-table asset records per table partition."""
        p = self.publication
        return {
            "outcome": self.outcome,
            "message": self.message,
            "seq": p.seq if p else 0,
            "manifest_version": p.manifest_version if p else -1,
            "switched": p.switched if p else False,
            "switched_now": self.switched_now,
            "upper": p.upper if p else 0,
            "files": p.files if p else 0,
            "rows": p.rows if p else 0,
            "bytes": p.bytes if p else 0,
            "location": catalog_location(p.location) if p else "",
        }

    def describe(self) -> str:
        p = self.publication
        if p is None or self.outcome not in (PUBLISHED, CATALOG_REPAIRED):
            return f"dt={self.dt}: {self.outcome}" + (f": {self.message}" if self.message else "")
        kind = "merged" if p.switched else "live"
        switched = " (switched)" if self.switched_now else ""
        verb = "published" if self.outcome == PUBLISHED else "catalog repaired to"
        return (
            f"dt={self.dt}: {verb} seq {p.seq}, {kind} up to id {p.upper}{switched}: "
            f"{p.files} files, {p.rows} rows, {p.bytes} bytes"
        )


class PublicationError(LeaseholdError):
    """This partition cannot be published now (the ledger read is inconsistent or
    incomplete); the next run tries again."""


class Publisher:
    """Publishes a table's date partitions to readers: writes a manifest version (the files
    that make up each partition now), records it in the ledger as current
    (`Ledger.record_publication`) and points the catalog partition at it."""

    def __init__(
        self,
        config: StreamConfig,
        store: CoordinationStore,
        objects: ObjectStore,
        catalog: Catalog,
        *,
        clock_ms: Callable[[], int] | None = None,
        on_step: Callable[[str, str], None] | None = None,
    ) -> None:
        """`objects` is the table's object store (`config.table`): manifests are written under
        its `_manifests/`. `clock_ms` stamps the proposed publication (the ledger sets the
        recorded `published_at_ms`); default the store's clock."""
        self.config = config
        self.table = config.name
        self.store = store
        self.objects = objects
        self.catalog = catalog
        self.clock_ms = clock_ms or store.now_ms
        # ("written" | "recorded" | "cataloged", dt): where a crash matters; the crash tests
        # stop there.
        self.on_step = on_step or (lambda step, dt: None)
        self._cataloged_version: int | None = None
        """The schema version whose columns this publisher last gave the catalog (None: it
        has not ensured the table yet)."""

    def table_definition(self, config: StreamConfig | None = None) -> TableDefinition:
        """The columns of `config` (default: the publisher's own), in their order (`dt` is
        the partition key, not a column), and the table's root URL. Pure: raises nothing."""
        config = config or self.config
        columns = tuple(Column(c.name, HIVE_TYPES[c.type]) for c in config.columns)
        return TableDefinition(self.table, columns, config.table)

    # -- what is due ---------------------------------------------------------------------------

    def due(self) -> list[str]:
        """The dts whose publication is due, or whose catalog partition lags the ledger's
        current publication (a publisher crashed between recording and cataloging), by dt.
        Read-only. Raises the store errors (`LeaseStoreError`) and `CatalogError`."""
        catalog_seq = {p.dt: p.seq for p in self._catalog_partitions()}
        return sorted(
            tp.dt
            for tp in self.store.table_partitions(self.table)
            if publication_due(tp) is not None or _lags(tp, catalog_seq.get(tp.dt))
        )

    def _catalog_partitions(self) -> list[CatalogPartition]:
        if self.catalog.table(self.table) is None:
            return []
        return self.catalog.partitions(self.table)

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, dts: Sequence[str]) -> Iterator[PublicationOutcome]:
        """Outcomes of publishing each table partition, in order (`publish_one` each), lazily;
        never raises for one partition's failure. Raises what `publish_one` lets through."""
        for dt in dts:
            yield self.publish_one(dt)

    def publish_one(self, dt: str) -> PublicationOutcome:
        """Publish partition `dt` if due: `PUBLISHED`, `UP_TO_DATE`, `CATALOG_REPAIRED` (the
        catalog caught up with the ledger's current publication) or `FAILED` (a store, object
        store or catalog error after its retries, or a ledger read this attempt cannot trust:
        nothing current moved; the next run retries). Raises only what is neither a
        `LeaseholdError` nor an `OSError` (a bug)."""
        try:
            return self._publish(dt)
        except (LeaseholdError, OSError) as exc:
            # Store, object store and catalog errors (after their bounded retries), and a
            # ledger read this attempt cannot trust: nothing current moved; next run retries.
            message = f"{type(exc).__name__}: {exc}"
            log.error("%s dt=%s: publication failed: %s", self.table, dt, message)
            return PublicationOutcome(dt, FAILED, message, None, False)

    def _publish(self, dt: str) -> PublicationOutcome:
        tp = self.store.table_partition(self.table, dt)
        if tp is None:
            raise PublicationError("no such table partition in the ledger")
        kind = publication_due(tp)
        if kind is None:
            return self._repair_catalog(tp)
        upper, files = self._files(tp, kind)
        written_at_ms = self.clock_ms()
        version_url = write_version(self.objects, new_version_key(dt, kind, upper), files)
        self.on_step("written", dt)
        proposed = Publication(
            table=self.table,
            dt=dt,
            seq=0,
            switched=kind == MERGED,
            upper=upper,
            location=version_url,
            files=len(files),
            rows=sum(f.row_count for f in files),
            bytes=sum(f.content_length for f in files),
            published_at_ms=self.clock_ms(),
            written_at_ms=written_at_ms,
        )
        try:
            recorded = self.store.record_publication(proposed)
        except StalePublicationError as exc:
            log.info(
                "%s dt=%s: %s; %s is an orphan for garbage collection",
                self.table, dt, exc, version_url,
            )  # fmt: skip
            return PublicationOutcome(dt, UP_TO_DATE, f"{exc} (another publisher)", None, False)
        self.on_step("recorded", dt)
        self._catalog(recorded)
        self.on_step("cataloged", dt)
        outcome = PublicationOutcome(
            dt, PUBLISHED, "", recorded, recorded.switched and not tp.switched
        )
        log.info("%s %s", self.table, outcome.describe())
        return outcome

    def _files(self, tp: TablePartition, kind: PublicationKind) -> tuple[int, list[DataFile]]:
        """(upper, files) of the publication due: every id `1..upper` exactly once."""
        if kind == LIVE:
            upper = live_upper(tp)
            files = live_files(self.store.ledger_objects(self.table, tp.dt), upper)
            if len(files) != upper:
                raise PublicationError(
                    f"the ledger lists {len(files)} small objects with ids 1..{upper}, "
                    f"expected {upper}"
                )
            return upper, files
        ranges = self.store.merge_ranges(self.table, tp.dt)
        # Ids only grow: the partition read after the chain holds every id the chain covers,
        # so a chain "past the committed ids" of that read is really broken.
        after = self.store.table_partition(self.table, tp.dt) or tp
        problems = chain_problems(ranges, after.next_object_id)
        if problems:
            # A DynamoDB Query may see half of a merge commit (the open range replaced): the
            # next run reads the chain whole.
            raise PublicationError(f"the merge chain is not valid now: {'; '.join(problems)}")
        upper = ranges[-1].upper if ranges else 0
        if upper < tp.merged_upper or upper < (tp.last_live_object_id or 0) or upper < 1:
            raise PublicationError(
                f"the merge chain ends at {upper}, below the partition's merged_upper "
                f"{tp.merged_upper} or its last live id {tp.last_live_object_id}"
            )
        return upper, merged_files(ranges)

    def _repair_catalog(self, tp: TablePartition) -> PublicationOutcome:
        """Nothing to publish; point the catalog at the ledger's current publication if it
        lags (a publisher crashed after recording)."""
        current_catalog = (
            self.catalog.partition(self.table, tp.dt) if self._table_exists() else None
        )
        if not _lags(tp, None if current_catalog is None else current_catalog.seq):
            return PublicationOutcome(tp.dt, UP_TO_DATE, "", None, False)
        publications = self.store.publications(self.table, tp.dt)
        if not publications:
            raise PublicationError(
                f"the partition's publication_seq is {tp.publication_seq} but the ledger keeps "
                "no publication record"
            )
        current = publications[-1]
        self._catalog(current)
        was = "none" if current_catalog is None else f"seq {current_catalog.seq}"
        log.warning(
            "%s dt=%s: the catalog lagged the ledger (%s, ledger seq %d): repaired",
            self.table, tp.dt, was, current.seq,
        )  # fmt: skip
        return PublicationOutcome(tp.dt, CATALOG_REPAIRED, f"the catalog had {was}", current, False)

    def _table_exists(self) -> bool:
        return self._cataloged_version is not None or self.catalog.table(self.table) is not None

    def _catalog(self, publication: Publication) -> None:
        """Point the catalog at `publication`, its columns first: the stream's latest schema
        version, read after the publication's files were decided, holds every column they do,
        so an engine never meets a file column its table does not declare. The first time,
        `ensure_table` (creates the table, or grows an existing one: never removes a column);
        after that, when the version moved, `add_columns` appends the columns it added. Both
        only ever add, so a publisher that followed an older version and writes after a newer
        one cannot take a column away. Raises `CatalogError`, `LeaseStoreError`."""
        latest = followed_config(self.store, self.config)
        if self._cataloged_version is None:
            self.catalog.ensure_table(self.table_definition(latest))
        elif latest.schema_version > self._cataloged_version:
            added = self.catalog.add_columns(self.table, self.table_definition(latest).columns)
            if added:
                log.info(
                    "%s: the catalog table gained %s (schema version %d)",
                    self.table, ", ".join(c.name for c in added), latest.schema_version,
                )  # fmt: skip
        self._cataloged_version = max(self._cataloged_version or 0, latest.schema_version)
        self.catalog.publish_partition(
            self.table, publication.dt, catalog_location(publication.location), publication.seq
        )
        self._catch_up(publication.dt)

    def _catch_up(self, dt: str) -> None:
        """Put the catalog partition forward again if it is behind the ledger's current
        publication. Glue has no conditional update (`publish_partition` reads, then writes):
        two publishers racing can leave the older version written last. Each checks after its
        write, so the last one to write also sees the newest record and restores it."""
        for _ in range(MAX_CATCH_UPS):
            tp = self.store.table_partition(self.table, dt)
            cataloged = self.catalog.partition(self.table, dt)
            if tp is None or not _lags(tp, None if cataloged is None else cataloged.seq):
                return
            current = self.store.publications(self.table, dt)[-1]
            log.warning(
                "%s dt=%s: the catalog had seq %s after our write, the ledger %d: put forward",
                self.table, dt, None if cataloged is None else cataloged.seq, current.seq,
            )  # fmt: skip
            self.catalog.publish_partition(
                self.table, dt, catalog_location(current.location), current.seq
            )
        raise PublicationError(
            f"the catalog partition still lags the ledger after {MAX_CATCH_UPS} corrections "
            "(another writer keeps moving it back); the next run repairs it"
        )


def _lags(tp: TablePartition, catalog_seq: int | None) -> bool:
    """The ledger has a current publication the catalog partition does not point at yet."""
    return tp.publication_seq > 0 and (catalog_seq is None or catalog_seq < tp.publication_seq)
