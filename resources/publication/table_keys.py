"""`TableKeysPublication`: a `dedupe.scope: table` stream's publications, under the table's keys
lease (docs/concepts/keys-and-changes.md).

Under `scope: table` a key is served by one date of the table, the one that published it first
(`resources.dedupe.table_scope`). Deciding that needs every date's key index as it stands, so
a table's publications are serialised: a run holds the lease on the table's keys job item
(`ItemType.KEYS_JOB`, key = the table), renewed in the background, and each publication record
is fenced by it (`CoordinationStore.record_fenced_publication`): a run whose lease was taken
over (a paused process, a partition) records nothing. Steps, per run:
1. Acquire the lease, waiting while another run holds it (at most `wait_s`).
2. Plan each due date (`Publisher.plan`), read its key state and the rows committed since
   (`DedupedFiles.prepare`); read the key index of every other published date.
3. Which new rows lose to another date (`lost_to_other_dates`), then per date its own
   resolution, copies and state (`DedupedFiles.finish`), and the fenced record.
4. Hand the lease back. The switch follows, outside the lease: any mix of the dates' recorded
   publications serves each key once, since each was resolved against all recorded before it.
A run that dies holding the lease delays the table's next publication by the ownership timeout.
A date whose record fails after this run gave it a key another date also had new leaves that key
unserved until its next run, which finds it in no index and serves it: absent for a while,
never twice.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Protocol, TypeVar

import numpy as np

from resources.coordination.errors import PartitionUnavailableError
from resources.coordination.items import ItemType, LeaseItem, LeaseToken
from resources.coordination.lease import Lease, LeaseTiming, new_owner_id
from resources.dedupe.key_index import KeyIndex, KeyIndexError
from resources.dedupe.keys import HASH_NAME
from resources.dedupe.table_scope import DateKeys, lost_to_other_dates, no_rows
from resources.errors import LeaseholdError
from resources.ledger.publication import publication_due
from resources.publication.deduped_files import READ_THREADS, DedupedFiles
from resources.publication.latest_round import (
    LatestTableRounds,
    RoundSteps,
    pending_date,
    plan_dates,
)
from resources.publication.outcome import PendingSwitch, PublicationOutcome, PublicationPlan
from resources.publication.pending_date import PendingDate

log = logging.getLogger(__name__)

_T = TypeVar("_T")

POLL_S = 0.5
"""How often a run waiting for the keys lease tries again."""
_NOT_RUN = LeaseholdError("no round published it")


class PublisherSteps(RoundSteps, Protocol):
    """What this needs of the `Publisher`: its steps, run per date under the lease."""

    def record(
        self,
        plan: PublicationPlan,
        dropped: int,
        fence: LeaseToken | None = None,
        fence_timeout_s: float = 60.0,
    ) -> PendingSwitch | PublicationOutcome: ...  # pragma: no cover


class KeysLeaseBusyError(LeaseholdError):
    """Another run held the table's keys lease for as long as this one would wait."""


class TableKeysPublication:
    """Prepares and records a `scope: table` stream's due publications under its keys lease."""

    def __init__(
        self, publisher: PublisherSteps, deduped: DedupedFiles, timing: LeaseTiming
    ) -> None:
        """`timing`: the lease's ownership timeout and renewal period; a run waits for the
        lease at most twice the timeout (a dead holder's lease expires in one)."""
        self.publisher = publisher
        self.deduped = deduped
        self.timing = timing
        self.wait_s = 2 * timing.ownership_timeout_s
        store, table = publisher.store, publisher.table
        self.sid = store.source_identifier(table, ItemType.KEYS_JOB)
        self.rounds = LatestTableRounds(publisher, deduped, _table_hash) if deduped.latest else None
        """Under `latest`, the rounds that record dates and revisions together."""

    def prepare(
        self, dts: Sequence[str]
    ) -> tuple[list[PendingSwitch | PublicationOutcome], list[PendingSwitch]]:
        """Steps 1-4 for `dts`: per dt, in order, its recorded publication waiting for the
        switch, or its outcome (`UP_TO_DATE`, a repair, `FAILED` — every dt `FAILED` when
        the lease could not be had); and, under `latest`, the other dates recorded with them
        (revisions of dates a key was taken from, due dates they took from), for the same
        switch. Raises only what is neither a `LeaseholdError` nor an `OSError`."""
        p = self.publisher
        if not dts:
            return [], []
        try:
            item = self._acquire()
        except (LeaseholdError, OSError) as exc:
            return [p.failed(dt, exc) for dt in dts], []
        with Lease(p.store, item, self.timing) as lease:
            if self.rounds is not None:
                return self._latest(lease, dts)
            return self._under(lease, dts), []

    def _latest(
        self, lease: Lease, dts: Sequence[str]
    ) -> tuple[list[PendingSwitch | PublicationOutcome], list[PendingSwitch]]:
        """`latest`: every due date of the table with `dts`, in rounds (`LatestTableRounds`)."""
        assert self.rounds is not None
        p = self.publisher
        try:
            due = [tp.dt for tp in p.store.table_partitions(p.table) if publication_due(tp)]
        except (LeaseholdError, OSError) as exc:
            return [p.failed(dt, exc) for dt in dts], []
        wanted = sorted({*dts, *due})
        results, revised = self.rounds.publish(lease, wanted, self.timing.ownership_timeout_s)
        extra = [r for dt, r in results.items() if dt not in dts and isinstance(r, PendingSwitch)]
        return [results.get(dt) or p.failed(dt, _NOT_RUN) for dt in dts], revised + extra

    def _acquire(self) -> LeaseItem:
        store, table = self.publisher.store, self.publisher.table
        store.create_partitions(self.sid, [table])
        owner, deadline = new_owner_id(), time.monotonic() + self.wait_s
        while True:
            try:
                return store.acquire(self.sid, table, owner, self.timing.ownership_timeout_s)
            except PartitionUnavailableError as exc:
                if time.monotonic() >= deadline:
                    raise KeysLeaseBusyError(
                        f"the table's keys lease stayed held by {exc.current.owner} for "
                        f"{self.wait_s:.0f} s: another run is publishing it (the next run "
                        "publishes what is due)"
                    ) from exc
            time.sleep(POLL_S)

    def _under(self, lease: Lease, dts: Sequence[str]) -> list[PendingSwitch | PublicationOutcome]:
        p = self.publisher
        planned, results = plan_dates(p, dts)
        try:
            others = self._other_dates(planned)
        except (LeaseholdError, OSError) as exc:
            return [results.get(dt) or p.failed(dt, exc) for dt in dts]
        plans: dict[str, tuple[PublicationPlan, PendingDate]] = {}
        for dt, plan in planned.items():
            try:
                plans[dt] = (plan, self._pending(plan, _table_hash(others)))
            except (LeaseholdError, OSError) as exc:
                results[dt] = p.failed(dt, exc)
        try:
            lost = lost_to_other_dates(self._dates(plans, others))
        except (LeaseholdError, OSError) as exc:
            return [results.get(dt) or p.failed(dt, exc) for dt in dts]
        for dt, (plan, pending) in plans.items():
            try:
                lease.check()
                files, state = self.deduped.finish(pending, plan.version_key, lost.get(dt))
                results[dt] = p.record(
                    replace(plan, files=files), state.dropped_rows, lease.token,
                    self.timing.ownership_timeout_s,
                )  # fmt: skip
            except (LeaseholdError, OSError) as exc:
                results[dt] = p.failed(dt, exc)
        return [results[dt] for dt in dts]

    def _pending(self, plan: PublicationPlan, hash_name: str) -> PendingDate:
        return pending_date(self.publisher, self.deduped, plan, hash_name)

    def _other_dates(self, planned: dict[str, PublicationPlan]) -> list[tuple[str, KeyIndex]]:
        """Every published date this run does not publish, with the key index of its current
        publication. Raises the store and object store errors, `KeyIndexError`,
        `ServedStateError`."""
        p = self.publisher
        others = [  # the store read here; only the object store's in the pool
            (tp.dt, p.store.publications(p.table, tp.dt)[-1:])
            for tp in p.store.table_partitions(p.table)
            if tp.dt not in planned and tp.publication_seq
        ]
        with ThreadPoolExecutor(READ_THREADS) as pool:
            states = pool.map(lambda o: self.deduped.state(o[1][0] if o[1] else None), others)
            return [(dt, index) for (dt, _), (_, index) in zip(others, states, strict=True)]

    def _dates(
        self,
        plans: dict[str, tuple[PublicationPlan, PendingDate]],
        others: list[tuple[str, KeyIndex]],
    ) -> list[DateKeys]:
        """The dates of this run with their new rows, then the `others` with their indexes.
        Raises `KeyIndexError` when two dates' keys are of different hashes."""
        dates = [
            DateKeys(dt, pending.index.entries, pending.new, pending.committed_at_ms())
            for dt, (_, pending) in plans.items()
        ]
        dates += [
            DateKeys(dt, index.entries, no_rows(index.entries), np.zeros(0, np.int64))
            for dt, index in others
        ]
        names = {pending.index.hash_name for _, pending in plans.values()}
        names |= {index.hash_name for _, index in others if len(index)}
        if len(names) > 1:
            raise KeyIndexError(f"the table's dates are keyed by several hashes: {sorted(names)}")
        return dates


def _table_hash(others: list[tuple[str, KeyIndex]]) -> str:
    """The hash a date's first index takes: the one the table's other dates are keyed by (so
    that all its dates compare), or the default for a table's first date."""
    names = {index.hash_name for _, index in others if len(index)}
    return min(names) if names else HASH_NAME
