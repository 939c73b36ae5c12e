"""`ReplacementGroups`: a `dedupe.scope: date` stream's publications, the dates of each
replacement together (`on_change: replace`; docs/concepts/keys-and-changes.md).

A replacement unit commits its new content's rows and a retraction marker on every date it
touches in one transaction (`resources.ingestion.replacement`). Its dates must reach readers
together: the earlier content leaves the dates it was on as the new content joins its own, so
publishing one without the others would serve both contents, or neither, for a while. So a run:
1. Plans each date asked for (`Publisher.plan`) and reads its small objects and the
   publication its key resolution starts from; the markers committed since name their
   groups, and each group its dates — dates not asked for are planned too.
2. Joins groups that share a date. A group is publishable when every date of it is due and
   its plan covers every object the replacement committed there; otherwise all of its dates
   are held back (`UP_TO_DATE`, saying which date is waited for — a closed date whose merge
   has not taken the late objects yet) and published by a later run with the rest.
3. Serves each date (`DedupedFiles.serve`: the markers' rows are retracted) and records a
   group's dates in ONE store transaction (`CoordinationStore.record_publications`); dates
   of no group are recorded one by one as before. The run's one switch then serves them in one
   Iceberg snapshot. A crash after the record leaves them all lagging the ledger: the next run
   repairs them in one switch.
A group of more than `PUBLICATIONS_PER_TRANSACTION` dates (groups sharing dates can grow so)
is recorded in several transactions, logged: Iceberg readers still see one snapshot.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.ledger.publication import Publication, StalePublicationError
from resources.ledger.retraction_marker import (
    MARKERS_PREFIX,
    Retraction,
    marked_date,
    retractions_above,
)
from resources.objects.base import ObjectStoreError
from resources.publication.deduped_files import DedupedFiles
from resources.publication.outcome import (
    FAILED,
    UP_TO_DATE,
    PendingSwitch,
    PublicationOutcome,
    PublicationPlan,
)
from resources.publication.table_keys import PublisherSteps
from resources.stores.base import PUBLICATIONS_PER_TRANSACTION

log = logging.getLogger(__name__)

Item = PendingSwitch | PublicationOutcome


@dataclass(frozen=True)
class DateRead:
    """A due date, planned: its plan, its small objects, where its resolution starts, and the
    retractions committed since."""

    plan: PublicationPlan
    small: list[RegisteredObject]
    base: Publication | None
    markers: list[Retraction]

    def covers(self, group: str) -> bool:
        """The plan holds every object the replacement `group` committed on this date."""
        ids = [o.object_id for o in self.small if o.source_partition_key == group]
        return bool(ids) and max(ids) <= self.plan.upper


class ReplacementGroups:
    """Publishes a `scope: date` stream's due dates, each replacement's together (module
    docstring)."""

    def __init__(self, publisher: PublisherSteps, deduped: DedupedFiles) -> None:
        self.publisher = publisher
        self.deduped = deduped

    def prepare(self, dts: Sequence[str]) -> tuple[list[Item], list[PendingSwitch]]:
        """Steps 1-3 for `dts`: their items (recorded and waiting for the switch, or the
        outcome), in order, then the failures of the other dates their replacements named
        (those held or not due need no word); and those other dates recorded."""
        read, groups = self._read_all(dts)
        order = list(read)
        results: dict[str, Item] = {}
        for members in groups:
            results |= self._group(members, read)
        for dt in order:
            if dt not in results:
                found = read[dt]
                results[dt] = self._one(found) if isinstance(found, DateRead) else found
        others = [results[dt] for dt in order[len(dts) :]]
        failed = [o for o in others if isinstance(o, PublicationOutcome) and o.outcome == FAILED]
        recorded = [o for o in others if isinstance(o, PendingSwitch)]
        return [results[dt] for dt in dts] + failed, recorded

    def held(self, dts: Sequence[str]) -> set[str]:
        """Of `dts` (due dates), those a replacement holds back now (step 2): a publication
        run would publish nothing of them. Only the dates that hold a marker's object are
        read (every date a replacement touches holds one): a backfill's thousands of due
        dates cost one listing, not several store reads each. Read-only; raises nothing (a
        date that cannot be read is not held: its run says why)."""
        marked = self._marked_dates()
        read, groups = self._read_all(dts if marked is None else [dt for dt in dts if dt in marked])
        held: set[str] = set()
        for members in groups:
            if self._waiting(members, read) is not None:
                held |= {dt for m in members for dt in m.dates}
        return held & set(dts)

    def _marked_dates(self) -> set[str] | None:
        """The dates holding a marker's object now; None when the listing fails (then every
        due date is read)."""
        try:
            keys = self.deduped.objects.list_prefix(MARKERS_PREFIX)
            return {dt for o in keys if (dt := marked_date(o.key)) is not None}
        except ObjectStoreError as exc:
            log.warning("listing %s failed (%s): reading every due date", MARKERS_PREFIX, exc)
            return None

    def _read_all(
        self, dts: Sequence[str]
    ) -> tuple[dict[str, DateRead | Item], list[list[Retraction]]]:
        """Step 1 of `dts`, then of the dates their replacements name (in that order), and
        the replacements joined by shared dates."""
        p = self.publisher
        read: dict[str, DateRead | Item] = {dt: p.guarded(dt, self._read) for dt in dts}
        order = list(read)
        groups: dict[str, Retraction] = {}
        for dt in order:  # grows as groups name dates
            found = read[dt]
            for marker in found.markers if isinstance(found, DateRead) else ():
                groups.setdefault(marker.group, marker)
                for named in marker.dates:
                    if named not in read:
                        read[named] = p.guarded(named, self._read)
                        order.append(named)
        return read, _joined(groups.values())

    def _read(self, dt: str) -> DateRead | Item:
        """Step 1 of `dt`."""
        p = self.publisher
        plan = p.plan(dt)
        if not isinstance(plan, PublicationPlan):
            return plan
        small, base = p.small_objects(plan), p.dedupe_base(plan)
        markers = retractions_above(small, 0 if base is None else base.upper, plan.upper)
        return DateRead(plan, small, base, markers)

    def _one(self, date: DateRead) -> Item:
        """A date of no group: served and recorded on its own."""
        return self.publisher.guarded(
            date.plan.tp.dt, lambda _: self.publisher.record(*self._serve(date)[:2])
        )

    def _serve(self, date: DateRead) -> tuple[PublicationPlan, int, int]:
        """The plan with the files it serves, the rows it leaves out, those retracted."""
        plan = date.plan
        files, state = self.deduped.serve(
            plan.tp.dt, date.base, date.small, plan.files, plan.spans, plan.upper,
            plan.version_key,
        )  # fmt: skip
        return replace(plan, files=files), state.dropped_rows, state.retracted_rows

    def _group(
        self, members: list[Retraction], read: dict[str, DateRead | Item]
    ) -> dict[str, Item]:
        """Steps 2-3 of the dates of `members` (groups joined by a shared date)."""
        dates = sorted({dt for m in members for dt in m.dates})
        waiting = self._waiting(members, read)
        if waiting is not None:
            return {dt: self._held(dt, read[dt], waiting) for dt in dates}
        p = self.publisher
        ready = [
            r for r in (read[dt] for dt in dates) if isinstance(r, DateRead)
        ]  # all: none waits
        try:
            served = [self._serve(r) for r in ready]
            proposed = [p.propose(plan) for plan, _, _ in served]
            recorded: list[Publication] = []
            for lo in range(0, len(proposed), PUBLICATIONS_PER_TRANSACTION):
                recorded += p.store.record_publications(
                    proposed[lo : lo + PUBLICATIONS_PER_TRANSACTION]
                )
            if len(proposed) > PUBLICATIONS_PER_TRANSACTION:
                log.warning(
                    "%s: replacements of %d dates recorded in %d transactions",
                    p.table, len(dates), -(-len(proposed) // PUBLICATIONS_PER_TRANSACTION),
                )  # fmt: skip
        except StalePublicationError as exc:
            message = f"{exc} (another publisher)"
            return {dt: PublicationOutcome(dt, UP_TO_DATE, message, None, False) for dt in dates}
        except (LeaseholdError, OSError) as exc:
            return {dt: p.failed(dt, exc) for dt in dates}
        return {
            plan.tp.dt: _with_retracted(p.recorded(plan, record, dropped), retracted)
            for (plan, dropped, retracted), record in zip(served, recorded, strict=True)
        }

    @staticmethod
    def _waiting(members: list[Retraction], read: dict[str, DateRead | Item]) -> str | None:
        """Why the group cannot be published now (the first date it waits for); None: it can."""
        for m in members:
            for dt in m.dates:
                found = read[dt]
                if not isinstance(found, DateRead):
                    return f"dt={dt} is not due (closed and waiting for its merge, or failing)"
                if not found.covers(m.group):
                    return f"dt={dt}'s publication does not reach its objects yet (merge pending)"
        return None

    def _held(self, dt: str, found: DateRead | Item, why: str) -> Item:
        if not isinstance(found, DateRead):
            return found
        message = f"held back with the other dates of a replacement: {why}"
        log.info("%s dt=%s: %s", self.publisher.table, dt, message)
        return PublicationOutcome(dt, UP_TO_DATE, message, None, False)


def _with_retracted(pending: PendingSwitch, rows: int) -> PendingSwitch:
    return replace(pending, outcome=replace(pending.outcome, retracted=rows))


def _joined(groups: Iterable[Retraction]) -> list[list[Retraction]]:
    """Groups that share a date, joined (a date is recorded once per run)."""
    joined: list[tuple[set[str], list[Retraction]]] = []
    for g in groups:
        dates, members = set(g.dates), [g]
        for other in [j for j in joined if j[0] & dates]:
            joined.remove(other)
            dates |= other[0]
            members += other[1]
        joined.append((dates, members))
    return [members for _, members in joined]
