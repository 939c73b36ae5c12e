"""Exactly-once ingestion of a batch of work units (docs/architecture.md), without Dagster.

A source partition is a work unit (`work_units`): the objects its lease item lists. Per chunk
of units (whole units, up to `chunk_size` objects):
1. acquire each lease by name (epoch e); a COMPLETED one is reported as already done;
2. read every object of the chunk with ONE Spark job whose tasks fetch the objects, parse them
   and write small objects — one per (part of a unit, date) — straight to the table's object
   store under attempt-unique names (`task_reader`), still invisible, since readers only ever
   read what the ledger names; only their metadata comes back;
3. commit each unit in one transaction, fenced by (owner, e): ledger registration with fresh
   ids + COMPLETED + commit record. A unit whose objects span more table partitions than one
   transaction holds commits in several, each fenced and saving which partitions it covered
   (`progress.partial`), the last one completing it: a takeover re-reads the same objects and
   commits only the partitions not yet committed. A unit some of whose objects could not be
   read commits the others (keeping the lease), records them as `done`, and is CLOSED for a
   retry of the rest.
A crash anywhere before 3 leaves orphans (never read) and a lease that expires; a crash after 3
leaves a COMPLETED lease, so the retry does nothing and says so. A zombie's commit is refused.

Storm's lesson applies within and across chunks: processing is parallel (one Spark job per
chunk; the next chunk read while this one commits),
commits are per partition and in a fixed order, on the caller's thread.
"""

from __future__ import annotations

import logging
import threading
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone

from resources.coordination.errors import PartitionNotFoundError, PartitionUnavailableError
from resources.coordination.items import PartitionStatus, iso_utc
from resources.coordination.keeper import LeaseKeeper
from resources.coordination.lease import Lease, LeaseTiming
from resources.coordination.metrics import flush_or_keep
from resources.ingestion.batch_results import ReadBatch, ReadLarge, SourceBatchResult
from resources.ingestion.large_objects import LargeObjects
from resources.ingestion.outcomes import (
    ALREADY_COMPLETE,
    FAILED,
    LOST_LEASE,
    UNKNOWN_PARTITION,
    UNREADABLE,
    PartitionOutcome,
    committed_outcome,
)
from resources.ingestion.replacement import ReplacementMarkers
from resources.ingestion.unit_progress import failures, to_read
from resources.ingestion.work_units import UnitObject, unit_objects
from resources.stores.base import CoordinationStore

log = logging.getLogger(__name__)


@dataclass
class _ReadChunk:
    """A chunk between its read and its commits: leases held (and renewed), objects written."""

    attempt: str
    keeper: LeaseKeeper
    keys: list[str] = field(default_factory=list)
    leases: dict[str, Lease] = field(default_factory=dict)
    outcomes: dict[str, PartitionOutcome] = field(default_factory=dict)
    reading: dict[str, list[UnitObject]] = field(default_factory=dict)
    """Unit key -> the objects of it this attempt reads (not done by an earlier one)."""
    large: str | None = None
    """The chunk's last unit, when it is one object read and committed in chunks."""
    results: dict[str, SourceBatchResult] = field(default_factory=dict)

    def close(self) -> None:
        """Stop renewing, hand back leases not committed."""
        self.keeper.__exit__(None, None, None)


@dataclass
class _ReadAhead:
    """The chunk the background thread is reading, closable from the caller's thread: a
    caller that stops hands its leases back at once rather than when the read ends (after a
    canceled run's interrupt it may end late or never, and the process, alive, would renew
    them all the while)."""

    stopped: threading.Event = field(default_factory=threading.Event)
    chunk: _ReadChunk | None = None

    def stop(self) -> None:
        """No more leases taken or objects read; the chunk's leases handed back."""
        self.stopped.set()
        if self.chunk is not None:
            self.chunk.close()


class IngestionRunner(LargeObjects):
    """Ingests a stream's source partitions (work units: one or more source objects) into
    its table: for each unit, take its lease, fetch and read its objects, publish the table
    and quarantine objects, and commit them with the lease in one fenced transaction
    (`Ledger.commit`), so each unit's rows land exactly once however often it is tried."""

    def __init__(
        self,
        *,
        stream: str,
        table: str,
        store: CoordinationStore,
        owner: str,
        timing: LeaseTiming,
        read_batch: ReadBatch,
        read_large: ReadLarge | None = None,
        chunk_size: int = 500,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        on_step: Callable[[str, str], None] | None = None,
        merge_after_s: float | None = None,
        commit_every_bytes: int | None = None,
        delayed_merge_after_s: float | None = None,
        progressing: Callable[[], bool] = lambda: True,
        replacements: ReplacementMarkers | None = None,
    ) -> None:
        self.stream = stream
        self.table = table
        self.store = store
        self.owner = owner
        self.timing = timing
        self.read_batch = read_batch
        self.read_large = read_large
        self.chunk_size = chunk_size
        # A one-object unit bigger than this is read and committed in chunks of this much.
        self.commit_every_bytes = commit_every_bytes
        self.clock = clock
        # Observer of the protocol's steps, ("published" | "committed", source key): the two
        # moments a crash matters ("published": the unit's objects are written, not yet
        # committed). Used for progress logging and by the crash tests.
        self.on_step = on_step or (lambda step, key: None)
        self.sid = store.source_identifier(stream)
        # Whether the reads the leases wait on make progress: leases are renewed only then.
        self.progressing = progressing
        # The table's merge job is scheduled by the commit that lands its first unmerged object
        # (`merge.interval` later; `merge.delayed_interval` when it is closed, the commit
        # decides); quarantine objects are never merged.
        self.merge_after_s = {} if merge_after_s is None else {table: merge_after_s}
        self.delayed_merge_after_s = (
            {} if delayed_merge_after_s is None else {table: delayed_merge_after_s}
        )
        # Writes the retraction markers a replacement unit commits (`on_change: replace`);
        # None: such a unit is closed for a retry by a runner that has them.
        self.replacements = replacements

    def ingest(self, source_keys: Sequence[str]) -> Iterator[PartitionOutcome]:
        """One outcome per key, in order; never raises for a single unit's failure.

        Chunks are pipelined: while one chunk commits and its outcomes go to the caller (in a
        Dagster run, one event-log write per unit), the next chunk is acquired, fetched and read
        in a background thread. Commits stay on the caller's thread, in key order. A chunk is
        whole units up to `chunk_size` objects (at least one unit): how many objects a unit
        holds is known once its lease is taken, so the reading thread cuts the chunks.

        A unit that fails (unreadable, lease lost, commit refused) is an outcome, not an
        error: its lease is closed or handed back and a later run retries it. Raises the lease
        store's `StoreUnavailableError`/`StoreRefusedError` when acquiring fails, after
        handing back the leases of the chunk being read; units committed before stay
        committed.
        """
        if not source_keys:
            return
        remaining = iter(source_keys)
        ahead = _ReadAhead()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-read") as pool:
            pending: Future[_ReadChunk] | None = pool.submit(self._read_chunk, remaining, ahead)
            try:
                while pending is not None:
                    try:
                        chunk = pending.result()
                    except Exception:
                        # The read failed and `_read_chunk` closed its chunk. Anything else
                        # (a canceled run's interrupt, raised in this wait) leaves it pending:
                        # it is handed back below once its read ends.
                        pending = None
                        raise
                    if not chunk.keys:
                        chunk.close()
                        pending = None
                        break
                    pending = pool.submit(self._read_chunk, remaining, ahead)
                    yield from self._commit_chunk(chunk)
            finally:
                if pending is not None:  # the caller stopped early: hand that chunk back
                    self._hand_back(pending, ahead)

    def _hand_back(self, pending: Future[_ReadChunk], ahead: _ReadAhead) -> None:
        """Close the chunk read ahead for a caller that stopped: its leases at once, then wait
        for the read to end. A read that failed — in a canceled Dagster run, Spark is stopped
        under it — closed its chunk itself (the keeper logs any lease it could not hand
        back)."""
        ahead.stop()
        try:
            chunk = pending.result()
        except Exception as exc:  # noqa: BLE001 - nothing left to do but say why
            log.info(
                "%s: the chunk read ahead failed after the caller stopped: %s", self.stream, exc
            )
            return
        chunk.close()

    # -- steps ---------------------------------------------------------------------------------

    def _acquire(self, key: str) -> Lease | PartitionOutcome:
        try:
            item = self.store.acquire(self.sid, key, self.owner, self.timing.ownership_timeout_s)
        except PartitionNotFoundError:
            return self._not_ingested(
                PartitionOutcome(
                    key,
                    UNKNOWN_PARTITION,
                    message="no lease item: partitions are created when discovery (or its "
                    "reconciliation pass, for objects behind the cursor) finds their source "
                    "object; one added by hand is ingested once its object is found",
                )
            )
        except PartitionUnavailableError as exc:
            cur = exc.current
            if cur.status is PartitionStatus.COMPLETED and cur.dead_letter_reason is None:
                log.info("%s: %r already committed (epoch %d)", self.stream, key, cur.epoch)
                return committed_outcome(
                    cur, ALREADY_COMPLETE, f"already committed (epoch {cur.epoch}); nothing to do"
                )
            if cur.status is PartitionStatus.COMPLETED:
                outcome = PartitionOutcome(
                    key,
                    FAILED,
                    cur.epoch,
                    message=f"dead-lettered: {cur.dead_letter_reason}; not retried",
                )
            elif cur.status is PartitionStatus.ASSIGNED:
                outcome = PartitionOutcome(
                    key,
                    LOST_LEASE,
                    cur.epoch,
                    message=f"lost the lease: held by {cur.owner} (epoch {cur.epoch})",
                )
            else:
                outcome = PartitionOutcome(
                    key,
                    UNREADABLE,
                    cur.epoch,
                    message=f"CLOSED after {cur.closed_count} failed reads; reopens at "
                    f"{iso_utc(cur.reopen_at_ms)}",
                )
            return self._not_ingested(outcome)
        return Lease(self.store, item, self.timing)

    def _read_chunk(self, keys: Iterator[str], ahead: _ReadAhead) -> _ReadChunk:
        """Acquire and read the next chunk's units; their leases stay renewed until it is
        closed. Empty once `keys` is. Once `ahead` is stopped it takes no more leases, reads
        nothing and hands back what it took."""
        attempt = uuid.uuid4().hex[:12]
        chunk = _ReadChunk(attempt, LeaseKeeper(self.timing.renew_interval_s, self.progressing))
        chunk.keeper.__enter__()
        ahead.chunk = chunk
        try:
            self._fill_chunk(chunk, keys, ahead.stopped)
            if ahead.stopped.is_set():
                chunk.close()  # a lease taken after the caller's close is handed back here
        except BaseException:
            chunk.close()
            raise
        return chunk

    def _fill_chunk(self, chunk: _ReadChunk, keys: Iterator[str], stopped: threading.Event) -> None:
        """Take the leases of the chunk's units, then read them (`_read_chunk`)."""
        objects = 0
        for key in keys:
            chunk.keys.append(key)
            got = self._acquire(key)
            if isinstance(got, PartitionOutcome):
                chunk.outcomes[key] = got
                continue
            chunk.leases[key] = chunk.keeper.add(got)
            if stopped.is_set():
                return
            if self._is_large(got.progress, key):
                chunk.large = key  # read chunk by chunk when this chunk commits
                break
            reading = to_read(got.progress, key)
            sizes = {o.key: o for o in unit_objects(key, got.progress)}
            chunk.reading[key] = [sizes.get(k, UnitObject(k, -1)) for k in reading]
            objects += len(reading)
            if objects >= self.chunk_size:
                break
        if chunk.reading and not stopped.is_set():
            chunk.results = self.read_batch(chunk.reading, chunk.attempt)

    def _commit_chunk(self, chunk: _ReadChunk) -> Iterator[PartitionOutcome]:
        """Commit the chunk's partitions, then persist the lease metrics they counted.

        Metrics are flushed once per chunk, before its outcomes reach the caller, so a run
        killed at any moment loses at most the counts of the chunk in flight: the stored
        `partitionsCompleted` is short of the COMPLETED items by at most that chunk's commits
        (a chunk's units). Not once per commit: a flush is a store write of its own, to one
        metrics item per source identifier that every worker updates (on DynamoDB all of them
        share one partition key; on SQLite they take the one write lock), so per commit it
        would double the writes of the hot path and make that item its bottleneck. Per chunk
        it is one write in `chunk_size` commits. A failed flush keeps the counts for the next
        one (`flush_or_keep`): counters never fail the work they count."""
        try:
            for key, lease in chunk.leases.items():
                if key == chunk.large:
                    chunk.outcomes[key] = self._ingest_large(lease, key)
                    continue
                reading = [o.key for o in chunk.reading[key]]
                result = chunk.results.get(key, SourceBatchResult())
                if key not in chunk.results:
                    result.unreadable = "the reader returned nothing for it"
                elif result.failed and not set(reading) - set(result.failed):
                    result.unreadable = failures(result.failed)
                chunk.outcomes[key] = self._commit(lease, key, result, reading, chunk.attempt)
        finally:
            chunk.close()
            flush_or_keep(self.store)
        for key in chunk.keys:
            yield chunk.outcomes[key]
