"""`LatestTableRounds`: a `dedupe: {mode: latest, scope: table}` stream's publications, under
the table's keys lease (`TableKeysPublication` holds it), in rounds of one store transaction
(docs/concepts/keys-and-changes.md, "Across dates").

Under `latest` a later record on one date can take its key from another date, which may have
nothing new of its own. A round, for a batch of due dates:
1. plans each date of the batch and reads the rows committed since its index, and the key index
   of every other published date;
2. decides which date keeps each contested key (`latest_across_dates`): new rows of the key on
   other dates lose, and an index entry on another date is *taken*;
3. serves each date of the batch (`DedupedFiles.finish`, the lost rows and taken keys left out)
   and a *revision* of each other date taken from (its current version served again without
   the keys, `Publication.revises`);
4. records them all in ONE fenced transaction (`record_fenced_publications`): any reader of
   the ledger, and the switch after it, sees the key leave one date and join the other at once.

A date taken from is revised even when it has new rows of its own (a later round, or the next
run, resolves those against the revised index), unless it switched to merged files and its
chain moved past its current publication: that one joins the batch and is published anew. A
transaction holds at most `PUBLICATIONS_PER_TRANSACTION` publications: a batch whose dates and
revisions exceed it is halved until they fit. A single date taking keys from more dates than
that records the revisions first, in transactions of their own, then itself: a crash between
them leaves the keys unserved until the next run (which finds them in no index and gives them
to the date's rows again), never served twice.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol, TypeVar

import numpy as np

from resources.coordination.lease import Lease
from resources.dedupe.key_index import KeyIndex, object_of
from resources.dedupe.table_scope import DateKeys, Moves, latest_across_dates, no_rows
from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.publication import (
    LIVE,
    MERGED,
    DataFile,
    Publication,
    PublicationKind,
    StalePublicationError,
    live_files,
)
from resources.publication.deduped_files import READ_THREADS, DedupedFiles
from resources.publication.manifest import new_version_key
from resources.publication.outcome import PendingSwitch, PublicationOutcome, PublicationPlan
from resources.publication.pending_date import PendingDate, Span
from resources.stores.base import PUBLICATIONS_PER_TRANSACTION, CoordinationStore

log = logging.getLogger(__name__)

_T = TypeVar("_T")

MAX_REPLANS = 12
"""Rounds of one batch planned again (grown by the due dates it takes keys from, halved, or
refused as stale) before the run gives up."""

Results = dict[str, PendingSwitch | PublicationOutcome]
Other = tuple[TablePartition, Publication, KeyIndex]
"""A published date outside a round: its partition, current publication and key index."""


class RoundSteps(Protocol):
    """What a round needs of the `Publisher`."""

    store: CoordinationStore
    table: str
    clock_ms: Callable[[], int]

    def guarded(
        self, dt: str, step: Callable[[str], _T]
    ) -> _T | PublicationOutcome: ...  # pragma: no cover

    def failed(self, dt: str, exc: BaseException) -> PublicationOutcome: ...  # pragma: no cover

    def plan(
        self, dt: str
    ) -> PublicationPlan | PendingSwitch | PublicationOutcome: ...  # pragma: no cover

    def dedupe_base(self, plan: PublicationPlan) -> Publication | None: ...  # pragma: no cover

    def small_objects(
        self, plan: PublicationPlan
    ) -> list[RegisteredObject]: ...  # pragma: no cover

    def files_of(
        self, tp: TablePartition, kind: PublicationKind
    ) -> tuple[int, list[DataFile], dict[str, Span]]: ...  # pragma: no cover

    def propose(self, plan: PublicationPlan) -> Publication: ...  # pragma: no cover

    def recorded(
        self, plan: PublicationPlan, recorded: Publication, dropped: int
    ) -> PendingSwitch: ...  # pragma: no cover


@dataclass(frozen=True)
class Served:
    """A date of a round, resolved: its plan with the files it serves, and the rows it left
    out."""

    plan: PublicationPlan
    dropped: int


class LatestTableRounds:
    """Publishes a `latest` + `scope: table` stream's due dates in rounds (module docstring)."""

    def __init__(self, publisher: RoundSteps, deduped: DedupedFiles, hash_name: Callable[..., str]):
        """`hash_name(others)`: the hash a date's first index takes, given the other dates'
        indexes."""
        self.publisher = publisher
        self.deduped = deduped
        self.hash_name = hash_name

    def publish(
        self, lease: Lease, dts: Sequence[str], timeout_s: float
    ) -> tuple[Results, list[PendingSwitch]]:
        """Rounds over `dts` (each date planned in its round): per dt its recorded publication
        waiting for the switch, or its outcome (`FAILED` from a round that failed: nothing of
        it recorded, the rounds before it were); and the revisions of other dates recorded
        with them, waiting for the same switch. A switched date whose chain moved, taken from
        by a round, joins it. Raises only what is neither a `LeaseholdError` nor an
        `OSError`."""
        remaining, revised = sorted(dts), []
        results: Results = {}
        while remaining:
            try:
                batch, (done, extra) = self._fitted(lease, remaining, timeout_s)
            except (LeaseholdError, OSError) as exc:  # the rounds before stay recorded
                results.update({dt: self.publisher.failed(dt, exc) for dt in remaining})
                break
            results.update(done)
            revised += extra
            remaining = [dt for dt in remaining if dt not in batch]
        return results, revised

    def _fitted(
        self, lease: Lease, remaining: Sequence[str], timeout_s: float
    ) -> tuple[Sequence[str], tuple[Results, list[PendingSwitch]]]:
        """The first round of `remaining` that fits one transaction, and what it did; a round
        whose transaction was refused as stale (nothing of it recorded) is planned again."""
        batch: Sequence[str] = remaining[:PUBLICATIONS_PER_TRANSACTION]
        for _ in range(MAX_REPLANS):
            try:
                done = self._round(lease, batch, timeout_s)
            except StalePublicationError as exc:  # a merge moved a chain since the plan
                log.info("%s: %s; the round is planned again", self.publisher.table, exc)
                continue
            if isinstance(done, tuple):
                return batch, done
            batch = done
        raise LeaseholdError(
            f"no batch of the due dates fit one transaction after {MAX_REPLANS} tries (the "
            "dates they take keys from keep joining them)"
        )

    def _round(
        self, lease: Lease, batch: Sequence[str], timeout_s: float
    ) -> tuple[Results, list[PendingSwitch]] | list[str]:
        """One round of `batch`: its outcomes and revisions; or, nothing written, the batch to
        run instead — with the due dates its dates take keys from, or halved when its dates
        and revisions exceed one transaction."""
        p = self.publisher
        plans, results = plan_dates(p, batch)
        others = self._other_dates(plans)
        hash_name = self.hash_name([(tp.dt, index) for tp, _, index in others])
        pending = {dt: self._pending(plan, hash_name) for dt, plan in plans.items()}
        moves = latest_across_dates(self._dates(pending, others))
        taken = [tp for tp, _, _ in others if tp.dt in moves.taken]
        moved = [tp.dt for tp in taken if _chain_moved(tp)]
        if moved:  # first, so that halving keeps them
            return [*moved, *batch]
        if len(batch) > 1 and len(plans) + len(taken) > PUBLICATIONS_PER_TRANSACTION:
            return list(batch[: len(batch) // 2])
        revisions = [self._revision(tp, hash_name) for tp in taken]
        served = [self._serve(plans[dt], pending[dt], moves) for dt in plans]
        served_revisions = [self._serve(plan, rp, moves) for plan, rp in revisions]
        lease.check()
        recorded = self._record(lease, served_revisions, served, timeout_s)
        for s in served:
            results[s.plan.tp.dt] = recorded[s.plan.tp.dt]
        if taken:
            log.info(
                "%s: %d dates revised: keys taken by a later record on another date (%s)",
                p.table, len(taken), ", ".join(tp.dt for tp in taken),
            )  # fmt: skip
        return results, [recorded[s.plan.tp.dt] for s in served_revisions]

    def _record(
        self, lease: Lease, revisions: list[Served], served: list[Served], timeout_s: float
    ) -> dict[str, PendingSwitch]:
        """Every publication of the round in one fenced transaction; beyond one transaction
        (one date taking from many), the revisions first."""
        p = self.publisher
        everything = revisions + served
        groups = [everything]
        if len(everything) > PUBLICATIONS_PER_TRANSACTION:
            size = PUBLICATIONS_PER_TRANSACTION
            groups = [revisions[i : i + size] for i in range(0, len(revisions), size)] + [served]
        out = {}
        for group in groups:
            proposed = [p.propose(s.plan) for s in group]
            stored = p.store.record_fenced_publications(lease.token, proposed, timeout_s=timeout_s)
            for s, record in zip(group, stored, strict=True):
                out[s.plan.tp.dt] = p.recorded(s.plan, record, s.dropped)
        return out

    def _serve(self, plan: PublicationPlan, pending: PendingDate, moves: Moves) -> Served:
        dt = plan.tp.dt
        files, state = self.deduped.finish(
            pending, plan.version_key, moves.lost.get(dt), moves.taken.get(dt)
        )
        return Served(replace(plan, files=files), state.dropped_rows)

    def _pending(self, plan: PublicationPlan, hash_name: str) -> PendingDate:
        return pending_date(self.publisher, self.deduped, plan, hash_name)

    def _revision(self, tp: TablePartition, hash_name: str) -> tuple[PublicationPlan, PendingDate]:
        """`tp`'s current publication served again: a plan at its version (`revises` its
        seq) and its key state — live: its small objects `1..published_upper`, whatever was
        committed since (a later round or run resolves those against it); merged: the chain,
        which must still end there. Raises `LeaseholdError` when it does not."""
        p = self.publisher
        kind = MERGED if tp.switched else LIVE
        if tp.switched:
            upper, files, spans = p.files_of(tp, kind)
        else:
            objects = p.store.ledger_objects(p.table, tp.dt)
            upper, files = tp.published_upper, live_files(objects, tp.published_upper)
            spans = {o.url: (o.object_id - 1, o.object_id) for o in objects}
        if upper != tp.published_upper or (not tp.switched and len(files) != upper):
            raise LeaseholdError(
                f"dt={tp.dt}: its ledger moved past publication {tp.publication_seq} (a merge "
                "or new objects since): the next run publishes it"
            )
        key = new_version_key(tp.dt, kind, upper)
        plan = PublicationPlan(tp, kind, upper, files, spans, key, p.clock_ms(), tp.publication_seq)
        return plan, self._pending(plan, hash_name)

    def _other_dates(self, plans: dict[str, PublicationPlan]) -> list[Other]:
        """Every published date outside `plans`: its partition, current publication and key
        index."""
        p = self.publisher
        others = [
            (tp, p.store.publications(p.table, tp.dt)[-1])
            for tp in p.store.table_partitions(p.table)
            if tp.dt not in plans and tp.publication_seq
        ]
        with ThreadPoolExecutor(READ_THREADS) as pool:
            states = pool.map(lambda o: self.deduped.state(o[1]), others)
            return [(tp, pub, index) for (tp, pub), (_, index) in zip(others, states, strict=True)]

    def _dates(self, pending: dict[str, PendingDate], others: list[Other]) -> list[DateKeys]:
        p = self.publisher
        dates = [
            DateKeys(dt, pd.index.entries, pd.new, pd.committed_at_ms(), _CommitTimes(pd.small))
            for dt, pd in pending.items()
        ]
        for tp, _, index in others:
            times = _CommitTimes(partial(p.store.ledger_objects, p.table, tp.dt))
            dates.append(
                DateKeys(tp.dt, index.entries, no_rows(index.entries), np.zeros(0, np.int64), times)
            )
        return dates


def _chain_moved(tp: TablePartition) -> bool:
    """A switched date whose merge chain ends past its current publication: it cannot be
    revised (that publication's chain may name merged objects since collected), only
    published anew."""
    return tp.switched and tp.merged_upper > tp.published_upper


def plan_dates(p: RoundSteps, dts: Sequence[str]) -> tuple[dict[str, PublicationPlan], Results]:
    """Each of `dts` planned (`Publisher.plan`, guarded): the plans, and the outcomes of the
    dates with nothing to publish (up to date, a repair, failed)."""
    plans: dict[str, PublicationPlan] = {}
    results: Results = {}
    for dt in dts:
        plan = p.guarded(dt, p.plan)
        if isinstance(plan, PublicationPlan):
            plans[dt] = plan
        else:
            results[dt] = plan
    return plans, results


def pending_date(
    p: RoundSteps, deduped: DedupedFiles, plan: PublicationPlan, hash_name: str
) -> PendingDate:
    """`plan`'s key state and the rows committed since it (`DedupedFiles.prepare`)."""
    return deduped.prepare(
        plan.tp.dt, p.dedupe_base(plan), p.small_objects(plan), plan.files, plan.spans,
        plan.upper, hash_name,
    )  # fmt: skip


class _CommitTimes:
    """Row ids -> their small objects' commit times (0 where unknown), from the date's small
    objects (or a read of them, done once, when first asked)."""

    def __init__(
        self, small: Sequence[RegisteredObject] | Callable[[], Sequence[RegisteredObject]]
    ) -> None:
        self.small = small
        self.when: dict[int, int] | None = None

    def __call__(self, rows: np.ndarray) -> np.ndarray:
        if self.when is None:
            small = self.small() if callable(self.small) else self.small
            self.when = {o.object_id: o.committed_at_ms or 0 for o in small}
        return np.array([self.when.get(int(o), 0) for o in object_of(rows)], np.int64)
