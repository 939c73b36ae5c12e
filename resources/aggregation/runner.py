"""`RollupRunner`: bring a rollup's state of some table partitions up to their committed ids.

For each table partition (date), under the rollup job's lease (`ItemType.ROLLUP_JOB`, key dt,
a new epoch per run, renewed in the background and in every state transaction):

1. Read the cursor, the lease's progress: `upto`, the last txid applied whole, and `pending`,
   a batch whose writing started and did not finish (its bounds recorded before its first
   write, so a transactional replay has the same txid and, the ids being immutable, the same
   rows).
2. Plan: the pending batch first, then batches of the committed ids above it
   (`plan_batches`), at most `max_batches` per run. An opaque replay takes in the next
   batch's ids too (what was committed since the attempt died: other contents, a new txid;
   the dead attempt's txid is recorded among `earlier`, and its keys are recomputed from
   their `prev_value`).
3. Compute every planned batch's partial results at once (one Spark job; pyarrow when the
   input is small: `SizedPartials`).
4. Commit them in strict txid order (`StrictOrder`): record the batch as pending, write its
   keys (`write_rollup_batch`: transactions of 99 keys, each key idempotent by txid), then
   record `upto` = its txid. A failed commit abandons the batches after it; the next run
   replays the pending one and recomputes the rest.

A crash anywhere leaves either a cursor that names the pending batch (the replay completes it:
Storm's per-key txid makes the keys already written skip or recompute from `prev_value`) or a
cursor past the batch. `on_step(step, dt)` names where a crash matters — "computed",
"pending", "transaction" (after each), "committed" — and the chaos tests stop the process there.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from resources.aggregation.first_records import FirstRecords
from resources.aggregation.partials import EngineFor, Partials
from resources.aggregation.rollup_table import RollupTable
from resources.aggregation.served_rows import ServedRows
from resources.coordination.errors import (
    LeaseStoreError,
    PartitionNotOwnedError,
    PartitionUnavailableError,
)
from resources.coordination.items import ItemType
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.dedupe.key_index import KeyIndex
from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.objects.base import ObjectStore
from resources.rollup.batches import Batch, StrictOrder, plan_batches
from resources.rollup.cursor import RollupCursor, rollup_id, served_position
from resources.rollup.spec import RollupSpec
from resources.rollup.state import Mode
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)

ROLLED_UP = "rolled up"
UP_TO_DATE = "up to date"
BUSY = "busy"
FAILED = "failed"
LOST_LEASE = "lost lease"


@dataclass
class RollupOutcome:
    """What rolling one date up did: the outcome, the batches applied and keys written, and why it
    failed if it did."""

    rollup: str
    dt: str
    outcome: str
    batches: int = 0
    keys_written: int = 0
    upto: int = 0
    replayed: bool = False
    table_published: bool = False
    """The rollup table's partition was switched to this state."""
    message: str = ""

    def describe(self) -> str:
        if self.outcome == ROLLED_UP:
            replay = " (the first a replay of an unfinished batch)" if self.replayed else ""
            table = "; its table published" if self.table_published else ""
            return (
                f"{self.rollup} dt={self.dt}: {self.batches} batches{replay}, "
                f"{self.keys_written} keys written, state at object id {self.upto}{table}"
            )
        detail = f": {self.message}" if self.message else ""
        return f"{self.rollup} dt={self.dt}: {self.outcome}{detail}"


class RollupRunner:
    """Rolls one table up by one `RollupSpec`, per date: under the date's rollup job lease
    (`ItemType.ROLLUP_JOB`), applies the objects committed since its cursor in batches to the
    rollup's state (`CoordinationStore.write_rollup_batch`, exactly once per batch), then
    publishes the state for readers."""

    def __init__(
        self,
        store: CoordinationStore,
        objects: ObjectStore,
        table: str,
        spec: RollupSpec,
        engine_for: EngineFor,
        *,
        owner: str,
        timing: LeaseTiming,
        work_dir: Path,
        max_objects_per_batch: int = 200,
        max_batches: int = 50,
        on_step: Callable[[str, str], None] | None = None,
        publish_to: RollupTable | None = None,
        first_records: FirstRecords | None = None,
        served_rows: ServedRows | None = None,
    ) -> None:
        """`publish_to`: where the state is published for readers after each date's batches (None:
        not published, as in the chaos tests, whose verdict is the state itself).
        `first_records`: the stream keeps each key's first record (`dedupe: first`): batches
        count those only, up to what its publications cover. `served_rows`: published rows can
        leave (`dedupe: latest`, `on_change: replace`): the state is recomputed from what each
        publication serves, instead of batches (`_recompute`)."""
        self.store = store
        self.objects = objects
        self.table = table
        self.spec = spec
        self.engine_for = engine_for
        self.owner = owner
        self.timing = timing
        self.work_dir = work_dir
        self.max_objects_per_batch = max_objects_per_batch
        self.max_batches = max_batches
        self.on_step = on_step or (lambda step, dt: None)
        self.publish_to = publish_to
        self.first_records = first_records
        self.served_rows = served_rows
        self.rollup = rollup_id(table, spec)
        self.job_sid = store.source_identifier(self.rollup, ItemType.ROLLUP_JOB)

    def run(self, dts: Sequence[str]) -> list[RollupOutcome]:
        """One outcome per date, in order (`run_one` each); never raises for one date's
        failure. Raises the store errors of creating the dates' job items (before any date),
        and what `run_one` lets through."""
        if not dts:
            return []
        self.store.create_partitions(self.job_sid, list(dts))
        return [self.run_one(dt) for dt in dts]

    def run_one(self, dt: str) -> RollupOutcome:
        """Roll date `dt` up, if its job lease is free: `ROLLED_UP`, `UP_TO_DATE`, `BUSY`
        (another run holds the job), `LOST_LEASE` (fenced: the batches not yet committed
        wrote nothing) or `FAILED` (a store, object store or engine error the project maps;
        committed batches stay, the rest is replayed by the next run). Raises only what is
        not a `LeaseholdError` (a bug, an unmapped engine error)."""
        outcome = RollupOutcome(self.rollup, dt, ROLLED_UP)
        try:
            item = self.store.acquire(self.job_sid, dt, self.owner, self.timing.ownership_timeout_s)
        except PartitionUnavailableError as exc:
            cur = exc.current
            outcome.outcome, outcome.message = BUSY, f"{cur.owner} (epoch {cur.epoch}) holds it"
            return outcome
        except LeaseStoreError as exc:
            return self._failed(outcome, f"could not acquire the rollup job: {exc}")
        scratch = self.work_dir / f"rollup-{uuid.uuid4().hex}"
        try:
            with Lease(self.store, item, self.timing) as lease:
                return self._held(lease, dt, outcome, scratch)
        except LeaseLostError as exc:
            outcome.outcome, outcome.message = LOST_LEASE, str(exc)
            log.warning("%s", outcome.describe())
            return outcome
        except LeaseholdError as exc:
            return self._failed(outcome, str(exc))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _held(self, lease: Lease, dt: str, outcome: RollupOutcome, scratch: Path) -> RollupOutcome:
        cursor = RollupCursor.of(lease.progress)
        outcome.upto = cursor.upto
        if self.served_rows is not None:
            return self._recompute(self.served_rows, lease, cursor, outcome, scratch)
        objects, index = self._unrolled(dt, cursor.upto)
        ids = [o.object_id for o in objects]
        batches: list[Batch] = []
        start, earlier = cursor.upto, cursor.earlier
        if cursor.pending is not None:
            after, start = cursor.pending
            outcome.replayed = True
            following = plan_batches(dt, ids, start, self.max_objects_per_batch)
            if self.spec.mode is Mode.OPAQUE and following:
                # An opaque replay takes in what was committed since the attempt that died: a
                # bigger batch under a new txid, the dead attempt's txid among `earlier`.
                earlier, start = (*earlier, start), following[0].upto
            batches.append(Batch(dt, after, start))
        batches += plan_batches(dt, ids, start, self.max_objects_per_batch)
        batches = batches[: self.max_batches]
        if not batches:
            outcome.outcome = UP_TO_DATE
            self._publish(lease, outcome, cursor.position)
            return outcome
        files = {
            b.txid: [
                self._counted(o.url, o.object_id, index, scratch)
                for o in objects
                if b.after < o.object_id <= b.upto
            ]
            for b in batches
        }
        lease.check()
        order: StrictOrder[Partials] = StrictOrder(batches)
        generation = order.generation
        input_bytes = sum(o.content_length for o in objects if o.object_id <= batches[-1].upto)
        computed = self.engine_for(input_bytes).compute(self.spec, files)
        self.on_step("computed", dt)
        ready = []
        for batch in batches:
            ready += order.computed(batch, computed[batch.txid], generation)
        for batch, partials in ready:
            try:
                outcome.keys_written += self._commit(lease, cursor, batch, partials, earlier)
            except PartitionNotOwnedError as exc:
                raise LeaseLostError(str(exc)) from exc
            except LeaseholdError as exc:
                abandoned = order.failed(batch)
                return self._failed(
                    outcome,
                    f"batch {batch.txid} did not commit ({exc}); it and {len(abandoned) - 1} "
                    "later batches are computed again by the next run",
                )
            cursor, earlier = RollupCursor(batch.upto), ()
            outcome.batches += 1
            outcome.upto = batch.upto
        self._publish(lease, outcome, outcome.upto)
        log.info("%s", outcome.describe())
        return outcome

    def _recompute(
        self,
        served: ServedRows,
        lease: Lease,
        cursor: RollupCursor,
        outcome: RollupOutcome,
        scratch: Path,
    ) -> RollupOutcome:
        """The state set to the aggregate of what the date's current publication serves, as
        of its position (`ServedRows`), unless it is that already. A writer that died
        between two transactions left some keys at the new position: its replay (of this
        publication or a later one) sets every key again (`write_rollup_values`)."""
        dt = outcome.dt
        publication = served.current(dt)
        if publication is None or (cursor.pending is None and cursor.seq == publication.seq):
            outcome.outcome = UP_TO_DATE
            self._publish(lease, outcome, cursor.position)
            return outcome
        outcome.replayed = cursor.pending is not None
        entries = served.files(publication)
        position = served_position(publication.upper, publication.seq)
        paths = [self._local(e.url, scratch) for e in entries]
        engine = self.engine_for(sum(e.content_length for e in entries))
        values = engine.compute(self.spec, {position: paths})[position]
        self.on_step("computed", dt)
        lease.check()
        pending = (cursor.upto, publication.upper)
        lease.save_progress(RollupCursor(cursor.upto, pending, seq=cursor.seq).state())
        self.on_step("pending", dt)
        try:
            outcome.keys_written = self.store.write_rollup_values(
                lease.token,
                self.rollup,
                dt,
                position,
                values,
                timeout_s=self.timing.ownership_timeout_s,
                after_transaction=lambda n: self.on_step("transaction", dt),
            )
        except PartitionNotOwnedError as exc:
            raise LeaseLostError(str(exc)) from exc
        lease.save_progress(RollupCursor(publication.upper, seq=publication.seq).state())
        self.on_step("committed", dt)
        outcome.batches, outcome.upto = 1, publication.upper
        self._publish(lease, outcome, position)
        log.info("%s (publication %d recomputed)", outcome.describe(), publication.seq)
        return outcome

    def _publish(self, lease: Lease, outcome: RollupOutcome, position: int) -> None:
        """The rollup table's partition switched to the state just committed (at `position`,
        the cursor's), if it lags. A failure leaves the state committed and the table behind:
        the outcome fails, and the rollup sensor asks for the date again (`due_dates` compares
        the catalog's position)."""
        if self.publish_to is None or position == 0:
            return
        lease.check()
        if self.publish_to.publish(outcome.dt, position):
            outcome.table_published = True

    def _commit(
        self,
        lease: Lease,
        cursor: RollupCursor,
        batch: Batch,
        partials: Partials,
        earlier: tuple[int, ...],
    ) -> int:
        lease.check()
        pending = RollupCursor(cursor.upto, (batch.after, batch.upto), earlier)
        if cursor != pending:
            lease.save_progress(pending.state())
        self.on_step("pending", batch.dt)
        written = self.store.write_rollup_batch(
            lease.token,
            self.rollup,
            batch.dt,
            self.spec.mode,
            self.spec.aggregates,
            batch.txid,
            partials,
            timeout_s=self.timing.ownership_timeout_s,
            after_transaction=lambda n: self.on_step("transaction", batch.dt),
            earlier=earlier,
        )
        lease.save_progress(RollupCursor(batch.upto).state())
        self.on_step("committed", batch.dt)
        return written

    def _unrolled(self, dt: str, after: int) -> tuple[list[RegisteredObject], KeyIndex | None]:
        """The small objects above `after` the rollup may take now, and the key index that
        says which of their rows count (None: all): under `first_records`, only ids the
        current publication covers."""
        objects = self.store.ledger_objects(self.table, dt, after=after)
        if self.first_records is None:
            return list(objects), None
        index = self.first_records.index(dt)
        return [o for o in objects if o.object_id <= index.upper], index

    def _counted(self, url: str, object_id: int, index: KeyIndex | None, scratch: Path) -> str:
        """The local path of small object `object_id`, holding the rows the rollup counts:
        all of them, or each key's first record (`first_records`, by `index`)."""
        path = self._local(url, scratch)
        if self.first_records is None or index is None:
            return path
        return self.first_records.kept(path, object_id, index, scratch)

    def _local(self, url: str, scratch: Path) -> str:
        """A path the engines read: local objects in place, others copied to `scratch`."""
        if url.startswith("file://"):
            return url[len("file://") :]
        if "://" not in url:
            return url
        return str(self.objects.local_copy(self.objects.key_of(url), scratch / "in"))

    def _failed(self, outcome: RollupOutcome, message: str) -> RollupOutcome:
        outcome.outcome, outcome.message = FAILED, message
        log.error("%s", outcome.describe())
        return outcome


def due_dates(
    store: CoordinationStore,
    table: str,
    specs: Sequence[RollupSpec],
    published: Mapping[str, Mapping[str, int]] | None = None,
    *,
    served: bool = False,
) -> list[str]:
    """The table partitions some rollup of `specs` has not brought up to their last committed
    id (`served`, rollups recomputed per publication: to their current publication), or whose
    batch is being written, or whose state the rollup's table does not serve yet
    (`published`: rollup name -> dt -> the position its catalog partition serves), by dt: one
    read of the partitions and one query of each rollup's job leases."""
    if not specs:
        return []
    by_rollup = [(spec.name, cursors(store, table, spec)) for spec in specs]
    due = []
    for tp in store.table_partitions(table):
        for name, by_dt in by_rollup:
            cursor = by_dt.get(tp.dt, RollupCursor())
            if served:
                behind = cursor.seq < tp.publication_seq
            else:
                behind = cursor.upto < tp.next_object_id - 1
            behind = behind or cursor.pending is not None
            position = cursor.position
            unserved = published is not None and published[name].get(tp.dt, 0) < position
            if behind or unserved:
                due.append(tp.dt)
                break
    return sorted(due)


def cursors(store: CoordinationStore, table: str, spec: RollupSpec) -> dict[str, RollupCursor]:
    """Every date's cursor of one rollup: one query of its job leases."""
    sid = store.source_identifier(rollup_id(table, spec), ItemType.ROLLUP_JOB)
    return {item.partition_key: RollupCursor.of(item.progress) for item in store.iter_items(sid)}
