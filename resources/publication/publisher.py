"""`Publisher`: make each table partition's due publication current, in the ledger and the table.

A publication run covers several table partitions. Steps 1-3 are per partition, step 4 is one
`PublicationTarget.switch` for every partition the run recorded (an Iceberg table commits one
snapshot per run; Hive partitions switch one after the other). Per partition, in the order
that keeps every reader safe:
1. Read the partition and decide what is due (`publication_due`): its live small objects
   (`1..live_upper`: every id while open, never a delayed one) before the switch, its merge
   chain's objects once it is closed and the chain covers every live id, and again after each
   later merge.
2. Write the version's two manifests under a directory no other attempt uses
   (`manifest.new_version_key`): nothing points at it yet, so a crash leaves an orphan only.
3. Record it in the ledger (`Ledger.record_publication`, one conditional write): it becomes
   current only if it is newer than the current one, so two publishers racing, or a slow one,
   never move a partition back. The loser's directory is an orphan for garbage collection.
4. Give the table the columns of the stream's latest schema version (only ever adding:
   `PublicationTarget.add_columns`), then switch every recorded partition to its
   publication's files with the publication's `seq`, in one call; the target refuses a
   lower `seq` too. The switch's summary carries the ledger's positions (`dt:seq`).

Under `dedupe.scope: table` steps 1-3 run for every date of the run together, under the table's
keys lease, each record fenced by it (`TableKeysPublication`); under `scope: date` the dates a
replacement touched are recorded in one transaction (`ReplacementGroups`).

A crash between 3 and 4 leaves the table behind the ledger: the next run sees the target's
`seq` below the partition's `publication_seq` and switches it to the ledger's current
publication, in the same switch as what it publishes (`CATALOG_REPAIRED`). No lease is needed:
every step is either private (2) or refused when stale (3, 4).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TypeVar

from resources.catalog.base import HIVE_TYPES, Column, TableDefinition
from resources.catalog.target import PartitionFile, PartitionSwitch, PublicationTarget
from resources.coordination.items import LeaseToken
from resources.coordination.lease import LeaseTiming
from resources.errors import LeaseholdError
from resources.key_settings import REPLACE, TABLE
from resources.ledger.merge import chain_problems
from resources.ledger.model import RegisteredObject, TablePartition
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
from resources.publication.deduped_files import DedupedFiles
from resources.publication.manifest import (
    new_version_key,
    read_spectrum,
    served_location,
    write_version,
)
from resources.publication.outcome import (
    CATALOG_REPAIRED,
    FAILED,
    PUBLISHED,
    UP_TO_DATE,
    PendingSwitch,
    PublicationOutcome,
    PublicationPlan,
)
from resources.publication.pending_date import Span
from resources.publication.publication_state import served_state
from resources.publication.replacement_groups import ReplacementGroups
from resources.publication.table_keys import TableKeysPublication
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import followed_config
from resources.streams import StreamConfig

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MAX_CATCH_UPS = 3
"""Corrections of partitions moved back by a racing writer (a Hive catalog on Glue), per run."""
SUMMARY_KEY = "leasehold.publications"
"""The switch summary's key: the ledger's publications it switches, `dt:seq`, comma-separated."""


class PublicationError(LeaseholdError):
    """This partition cannot be published now (the ledger read is inconsistent or
    incomplete); the next run tries again."""


class Publisher:
    """Publishes a table's date partitions to readers: writes a manifest version (the files
    that make up each partition now), records it in the ledger as current
    (`Ledger.record_publication`) and switches the table's partitions to their publications
    through the stream's `PublicationTarget`, in one call per run."""

    def __init__(
        self,
        config: StreamConfig,
        store: CoordinationStore,
        objects: ObjectStore,
        target: PublicationTarget,
        *,
        clock_ms: Callable[[], int] | None = None,
        on_step: Callable[[str, str], None] | None = None,
        keys_timing: LeaseTiming | None = None,
    ) -> None:
        """`objects` is the table's object store (`config.table`): manifests are written under
        its `_manifests/`. `target` serves the table (`config.table_format`). `clock_ms`
        stamps the proposed publication (the ledger sets the recorded `published_at_ms`);
        default the store's clock. `keys_timing`: the keys lease's timing under
        `dedupe.scope: table` (default `LeaseTiming()`)."""
        self.config = config
        self.table = config.name
        self.store = store
        self.objects = objects
        self.target = target
        self.clock_ms = clock_ms or store.now_ms
        # ("written" | "recorded", dt) per partition, ("cataloged", dt) per partition after
        # the run's one switch: where a crash matters; the crash tests stop there.
        self.on_step = on_step or (lambda step, dt: None)
        self.deduped = DedupedFiles(config, objects) if config.dedupe.active else None
        """Turns the ledger's files into what the stream's dedupe policy serves (None: the
        stream keeps every record)."""
        self.table_keys = (
            TableKeysPublication(self, self.deduped, keys_timing or LeaseTiming())
            if self.deduped is not None and config.dedupe.scope == TABLE
            else None
        )
        """Prepares and records the due dates together under the table's keys lease
        (`dedupe.scope: table`); None: each date on its own."""
        self.groups = (
            ReplacementGroups(self, self.deduped)
            if self.deduped is not None and self.table_keys is None
            else None
        )
        """Prepares a `scope: date` stream's dates, each replacement's recorded together."""
        self._cataloged_version: int | None = None
        """The schema version whose columns this publisher last gave the table (None: it has
        not ensured the table yet)."""

    def table_definition(self, config: StreamConfig | None = None) -> TableDefinition:
        """The columns of `config` (default: the publisher's own), in their order (`dt` is
        the partition key, not a column), and the table's root URL. Pure: raises nothing."""
        config = config or self.config
        columns = tuple(Column(c.name, HIVE_TYPES[c.type]) for c in config.columns)
        return TableDefinition(self.table, columns, config.table)

    # -- what is due ---------------------------------------------------------------------------

    def due(self) -> list[str]:
        """The dts whose publication is due, or whose served partition lags the ledger's
        current publication (a publisher crashed between recording and switching), by dt; not
        those a replacement holds back. Read-only. Raises the store errors and `CatalogError`."""
        served = self._served_seqs()
        due = sorted(
            tp.dt
            for tp in self.store.table_partitions(self.table)
            if publication_due(tp) is not None or _lags(tp, served.get(tp.dt))
        )
        held = self.groups.held(due) if self.groups and self.config.on_change == REPLACE else ()
        return [dt for dt in due if dt not in held]

    def _served_seqs(self) -> dict[str, int]:
        """dt -> the `seq` the target serves (none before the table exists)."""
        if self.target.table(self.table) is None:
            return {}
        return {p.dt: p.seq for p in self.target.partitions(self.table)}

    def _served_seq(self, dt: str) -> int | None:
        if self._cataloged_version is None and self.target.table(self.table) is None:
            return None
        served = self.target.partition(self.table, dt)
        return None if served is None else served.seq

    # -- publishing ----------------------------------------------------------------------------

    def publish(self, dts: Sequence[str]) -> list[PublicationOutcome]:
        """Outcomes of publishing each table partition of `dts`, in order (then, under `latest`
        with `scope: table`, of the other dates the run recorded with them): steps 1-3 for each
        (`PUBLISHED`, `UP_TO_DATE`, `CATALOG_REPAIRED` when the target lags the ledger's
        current publication, `FAILED`), then ONE switch of every partition published or
        repaired; if the switch (or the schema step before it) fails, those partitions are
        `FAILED` (recorded in the ledger: the next run switches them). Never raises for a
        partition's or the switch's failure; raises only what is neither a `LeaseholdError`
        nor an `OSError` (a bug)."""
        extra: list[PendingSwitch] = []
        if self.table_keys is not None:
            prepared, extra = self.table_keys.prepare(dts)
        elif self.groups is not None:
            prepared, extra = self.groups.prepare(dts)
        else:
            prepared = [self.guarded(dt, self._prepare) for dt in dts]
        pending = [p for p in prepared if isinstance(p, PendingSwitch)]
        switched = self._switch_all(pending + extra)
        outcomes = []
        for item in [*prepared, *extra]:
            outcome = item.outcome if isinstance(item, PendingSwitch) else item
            outcome = switched.get(outcome.dt, outcome)
            if outcome.outcome in (PUBLISHED, CATALOG_REPAIRED):
                log.info("%s %s", self.table, outcome.describe())
            outcomes.append(outcome)
        return outcomes

    def publish_one(self, dt: str) -> PublicationOutcome:
        """`publish([dt])`'s outcome of `dt`."""
        return self.publish([dt])[0]

    def guarded(self, dt: str, step: Callable[[str], _T]) -> _T | PublicationOutcome:
        """`step(dt)`, or `FAILED` with why when it raises a `LeaseholdError` or an `OSError`
        (store, object store and catalog errors after their bounded retries, a ledger read
        this attempt cannot trust): nothing current moved; the next run retries."""
        try:
            return step(dt)
        except (LeaseholdError, OSError) as exc:
            return self.failed(dt, exc)

    def failed(self, dt: str, exc: BaseException) -> PublicationOutcome:
        """`FAILED` for `dt` because of `exc`, logged: nothing current moved."""
        message = f"{type(exc).__name__}: {exc}"
        log.error("%s dt=%s: publication failed: %s", self.table, dt, message)
        return PublicationOutcome(dt, FAILED, message, None, False)

    def _prepare(self, dt: str) -> PendingSwitch | PublicationOutcome:
        """Steps 1-3 of `dt` without a dedupe policy: the publication recorded (or the current
        one to repair to), waiting for the switch; `UP_TO_DATE` when there is nothing to
        switch."""
        plan = self.plan(dt)
        if not isinstance(plan, PublicationPlan):
            return plan
        return self.record(plan, 0)

    def plan(self, dt: str) -> PublicationPlan | PendingSwitch | PublicationOutcome:
        """Step 1 of `dt`: what its due publication covers; the repair (or `UP_TO_DATE`) when
        none is due. Raises `PublicationError`, the store and catalog errors."""
        tp = self.store.table_partition(self.table, dt)
        if tp is None:
            raise PublicationError("no such table partition in the ledger")
        kind = publication_due(tp)
        if kind is None:
            return self._repair(tp)
        upper, files, spans = self.files_of(tp, kind)
        version_key = new_version_key(dt, kind, upper)
        return PublicationPlan(tp, kind, upper, files, spans, version_key, self.clock_ms())

    def record(
        self,
        plan: PublicationPlan,
        dropped: int,
        fence: LeaseToken | None = None,
        fence_timeout_s: float = 60.0,
    ) -> PendingSwitch | PublicationOutcome:
        """Steps 2-3 of `plan` (its `files` as served): the manifests written, the publication
        recorded (fenced by `fence` when given, renewing it by `fence_timeout_s`:
        `PartitionNotOwnedError` if it no longer holds), waiting for the switch; `UP_TO_DATE`
        when a racing publisher got there first. Raises the store and object store errors."""
        proposed = self.propose(plan)
        try:
            if fence is None:
                recorded = self.store.record_publication(proposed)
            else:
                recorded = self.store.record_fenced_publication(
                    fence, proposed, timeout_s=fence_timeout_s
                )
        except StalePublicationError as exc:
            log.info(
                "%s dt=%s: %s; %s is an orphan for garbage collection",
                self.table, plan.tp.dt, exc, proposed.location,
            )  # fmt: skip
            return PublicationOutcome(
                plan.tp.dt, UP_TO_DATE, f"{exc} (another publisher)", None, False
            )
        return self.recorded(plan, recorded, dropped)

    def propose(self, plan: PublicationPlan) -> Publication:
        """Step 2 of `plan`: its manifests written; the publication to record. Raises the
        object store errors."""
        files = plan.files
        version_url = write_version(self.objects, plan.version_key, files)
        self.on_step("written", plan.tp.dt)
        return Publication(
            table=self.table,
            dt=plan.tp.dt,
            seq=0,
            switched=plan.kind == MERGED,
            upper=plan.upper,
            location=version_url,
            files=len(files),
            rows=sum(f.row_count for f in files),
            bytes=sum(f.content_length for f in files),
            published_at_ms=self.clock_ms(),
            written_at_ms=plan.written_at_ms,
            revises=plan.revises,
        )

    def recorded(self, plan: PublicationPlan, recorded: Publication, dropped: int) -> PendingSwitch:
        """`plan` once the ledger recorded it as `recorded`, waiting for the switch."""
        dt = plan.tp.dt
        self.on_step("recorded", dt)
        switched_now = recorded.switched and not plan.tp.switched
        outcome = replace(self._outcome(dt, PUBLISHED, "", recorded, switched_now), dropped=dropped)
        files_now = tuple(_partition_file(f) for f in plan.files)
        return PendingSwitch(
            outcome, PartitionSwitch(dt, recorded.seq, recorded.location, files_now)
        )

    def _outcome(
        self, dt: str, kind: str, message: str, publication: Publication, switched_now: bool
    ) -> PublicationOutcome:
        location = served_location(
            self.target.table_format, self.config.table, publication.location
        )
        return PublicationOutcome(dt, kind, message, publication, switched_now, location)

    def files_of(
        self, tp: TablePartition, kind: PublicationKind
    ) -> tuple[int, list[DataFile], dict[str, Span]]:
        """(upper, files, spans) of the publication due: every id `1..upper` exactly once, and
        the ids each file covers (`(lower, upper]`), from the same ledger read."""
        if kind == LIVE:
            upper = live_upper(tp)
            objects = self.store.ledger_objects(self.table, tp.dt)
            files = live_files(objects, upper)
            if len(files) != upper:
                raise PublicationError(
                    f"the ledger lists {len(files)} small objects with ids 1..{upper}, "
                    f"expected {upper}"
                )
            return upper, files, {o.url: (o.object_id - 1, o.object_id) for o in objects}
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
        spans = {r.url: (r.lower or 0, r.upper) for r in ranges if r.url is not None}
        return upper, merged_files(ranges), spans

    def small_objects(self, plan: PublicationPlan) -> list[RegisteredObject]:
        """The partition's small objects, read after `plan`'s files: a superset of them."""
        return self.store.ledger_objects(self.table, plan.tp.dt)

    def dedupe_base(self, plan: PublicationPlan) -> Publication | None:
        """The newest publication below `plan`'s, where its key resolution starts (a racing
        publisher may have recorded a newer one since: this one will be refused as stale)."""
        tp = plan.tp
        publications = self.store.publications(self.table, tp.dt) if tp.publication_seq else []
        below = [p for p in publications if p.upper <= plan.upper]
        return below[-1] if below else None

    def _repair(self, tp: TablePartition) -> PendingSwitch | PublicationOutcome:
        """Nothing to publish: the ledger's current publication, to switch to, if the served
        partition lags it (a publisher crashed after recording); else `UP_TO_DATE`."""
        served = self._served_seq(tp.dt)
        if not _lags(tp, served):
            return PublicationOutcome(tp.dt, UP_TO_DATE, "", None, False)
        current, files = self._current(tp.dt)
        was = "none" if served is None else f"seq {served}"
        log.warning(
            "%s dt=%s: the table lagged the ledger (%s, ledger seq %d): repairing",
            self.table, tp.dt, was, current.seq,
        )  # fmt: skip
        outcome = self._outcome(tp.dt, CATALOG_REPAIRED, f"the table had {was}", current, False)
        return PendingSwitch(outcome, PartitionSwitch(tp.dt, current.seq, current.location, files))

    def _current(self, dt: str) -> tuple[Publication, tuple[PartitionFile, ...]]:
        """The ledger's current publication of `dt` and its files: its manifest's entries,
        each with its rows from the ledger (the small object or merged object of that URL).
        Raises `PublicationError` (no record, or a file the ledger no longer lists: the
        next run publishes anew), the store and object store errors."""
        publications = self.store.publications(self.table, dt)
        if not publications:
            raise PublicationError(
                f"dt={dt}: the partition has a publication_seq but the ledger keeps no "
                "publication record"
            )
        current = publications[-1]
        known = {
            f.url: f
            for f in live_files(self.store.ledger_objects(self.table, dt), current.upper)
            + merged_files(self.store.merge_ranges(self.table, dt))
        }
        if self.deduped is not None:
            state = served_state(self.objects, current)
            for f in state.files if state is not None else ():
                known[f.url] = DataFile(f.url, f.bytes, f.rows)
        files = []
        for entry in read_spectrum(self.objects, current.location):
            if entry.url not in known:
                raise PublicationError(
                    f"dt={dt}: {entry.url} of publication seq {current.seq} is not in the ledger"
                )
            files.append(_partition_file(known[entry.url]))
        return current, tuple(files)

    # -- the switch ----------------------------------------------------------------------------

    def _switch_all(self, pending: Sequence[PendingSwitch]) -> dict[str, PublicationOutcome]:
        """Step 4 for every partition of `pending`: the table's columns first, then ONE
        switch; then each partition a racing writer moved back put forward again
        (`_catch_up`). Returns dt -> outcome of the partitions that changed from what
        `pending` holds (`FAILED`: the switch failed, or a partition still lags)."""
        if not pending:
            return {}
        try:
            self._ensure_columns()
            switches = [p.switch for p in pending]
            self.target.switch(self.table, switches, summary=_summary(switches))
            for p in pending:
                self.on_step("cataloged", p.outcome.dt)
            return self._catch_up([p.outcome.dt for p in pending])
        except (LeaseholdError, OSError) as exc:
            return {p.outcome.dt: self.failed(p.outcome.dt, exc) for p in pending}

    def _ensure_columns(self) -> None:
        """Give the table the columns of the stream's latest schema version before any file
        holding them is switched in: that version, read after the publications' files were
        decided, holds every column they do, so an engine never meets a file column its
        table does not declare. The first time, `ensure_table` (creates the table, or grows
        an existing one: never removes a column); after that, when the version moved,
        `add_columns` appends the columns it added. Both only ever add, so a publisher that
        followed an older version and writes after a newer one cannot take a column away.
        Raises `CatalogError`, `ColumnTypeConflictError`, `LeaseStoreError`."""
        latest = followed_config(self.store, self.config)
        if self._cataloged_version is None:
            self.target.ensure_table(self.table_definition(latest))
        elif latest.schema_version > self._cataloged_version:
            added = self.target.add_columns(self.table, self.table_definition(latest).columns)
            if added:
                log.info(
                    "%s: the table gained %s (schema version %d)",
                    self.table, ", ".join(c.name for c in added), latest.schema_version,
                )  # fmt: skip
        self._cataloged_version = max(self._cataloged_version or 0, latest.schema_version)

    def _catch_up(self, dts: Sequence[str]) -> dict[str, PublicationOutcome]:
        """Put forward again each partition of `dts` the target serves below the ledger's
        current publication. A Hive catalog on Glue has no conditional update (a switch reads,
        then writes): two publishers racing can leave the older version written last. Each
        checks after its switch, so the last one to write also sees the newest record and
        restores it (a no-op when nothing lags, as with an Iceberg table). Returns dt ->
        `FAILED` for a partition still lagging after `MAX_CATCH_UPS` switches (the next run
        repairs it); raises the store, object store and catalog errors."""
        lagging = [dt for dt in dts if self._still_lags(dt)]
        for _ in range(MAX_CATCH_UPS):
            if not lagging:
                return {}
            switches = []
            for dt in lagging:
                current, files = self._current(dt)
                log.warning(
                    "%s dt=%s: the table lagged the ledger (seq %d) after our switch: put forward",
                    self.table, dt, current.seq,
                )  # fmt: skip
                switches.append(PartitionSwitch(dt, current.seq, current.location, files))
            self.target.switch(self.table, switches, summary=_summary(switches))
            lagging = [dt for dt in lagging if self._still_lags(dt)]
        if not lagging:
            return {}
        error = PublicationError(
            f"the table partition still lags the ledger after {MAX_CATCH_UPS} corrections "
            "(another writer keeps moving it back); the next run repairs it"
        )
        return {dt: self.failed(dt, error) for dt in lagging}

    def _still_lags(self, dt: str) -> bool:
        tp = self.store.table_partition(self.table, dt)
        return tp is not None and _lags(tp, self._served_seq(dt))


def _lags(tp: TablePartition, served_seq: int | None) -> bool:
    """The ledger has a current publication the served partition does not hold yet."""
    return tp.publication_seq > 0 and (served_seq is None or served_seq < tp.publication_seq)


def _partition_file(f: DataFile) -> PartitionFile:
    return PartitionFile(f.url, f.content_length, f.row_count)


def _summary(switches: Sequence[PartitionSwitch]) -> dict[str, str]:
    """The ledger's positions a switch makes current, for reconciling the table with the
    store: each partition's `dt:seq` (the seq names the ledger's publication record)."""
    return {SUMMARY_KEY: ",".join(f"{s.dt}:{s.seq}" for s in switches)}
