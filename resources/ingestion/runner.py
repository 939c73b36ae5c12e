"""Exactly-once ingestion of a batch of source partitions (ARCHITECTURE §5), without Dagster.

Per chunk of source partitions:
1. acquire each lease by name (epoch e); a COMPLETED one is reported as already done;
2. read every source of the chunk with ONE Spark read and write small objects to a local
   staging directory under attempt-unique names; publish them to the table's object store —
   still invisible, since readers only ever read what the ledger names;
3. commit each partition in its own transaction, fenced by (owner, e): ledger registration
   with fresh ids + COMPLETED + commit record.
A crash anywhere before 3 leaves orphans (never read) and a lease that expires; a crash after 3
leaves a COMPLETED lease, so the retry does nothing and says so. A zombie's commit is refused.

Storm's lesson applies within and across chunks: processing is parallel (one Spark job per
chunk; the next chunk read while this one's small objects are written and while it commits),
commits are per partition and in a fixed order, on the caller's thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from resources.coordination.errors import (
    LeaseStoreError,
    PartitionNotFoundError,
    PartitionUnavailableError,
)
from resources.coordination.items import LeaseItem, PartitionStatus, iso_utc
from resources.coordination.keeper import LeaseKeeper
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.coordination.lease_store import LeaseStore
from resources.coordination.metrics import flush_or_keep
from resources.errors import LeaseholdError
from resources.ledger.model import AlreadyCommittedError, SmallObject

log = logging.getLogger(__name__)

COMMITTED = "committed"
ALREADY_COMPLETE = "already_complete"
LOST_LEASE = "lost_lease"
UNREADABLE = "unreadable"
FAILED = "failed"


@dataclass
class PartitionOutcome:
    source_key: str
    outcome: str
    epoch: int | None = None
    rows_read: int = 0
    rows_written: int = 0
    rows_quarantined: int = 0
    small_objects: int = 0
    bytes: int = 0
    table_partitions: list[str] = field(default_factory=list)
    message: str = ""

    @property
    def ok(self) -> bool:
        return self.outcome in (COMMITTED, ALREADY_COMPLETE)

    def metadata(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "already_complete": self.outcome == ALREADY_COMPLETE,
            "rows_read": self.rows_read,
            "rows_written": self.rows_written,
            "rows_quarantined": self.rows_quarantined,
            "small_objects": self.small_objects,
            "bytes": self.bytes,
            "table_partitions": ", ".join(self.table_partitions),
            "lease_epoch": self.epoch if self.epoch is not None else -1,
            "message": self.message,
        }


def committed_outcome(item: LeaseItem, outcome: str, message: str) -> PartitionOutcome:
    """A COMPLETED item's outcome as its commit saved it (the counts are the commit's
    progress state), for a partition whose commit Dagster has to be told about again."""
    progress = item.progress or {}
    return PartitionOutcome(
        item.partition_key,
        outcome,
        item.epoch,
        rows_read=int(progress.get("rows_read", 0)),
        rows_written=int(progress.get("rows_written", 0)),
        rows_quarantined=int(progress.get("rows_quarantined", 0)),
        message=message,
    )


@dataclass(frozen=True)
class StagedFile:
    """A local file written by the reader, to be published under `dt`."""

    dt: str
    local_path: Path
    row_count: int
    content_length: int


@dataclass
class SourceBatchResult:
    """What the reader produced for one source partition."""

    rows_read: int = 0
    rows_quarantined: int = 0
    table_files: list[StagedFile] = field(default_factory=list)
    quarantine_files: list[StagedFile] = field(default_factory=list)
    unreadable: str | None = None


ReadBatch = Callable[[dict[str, Path], Path, str], Future[dict[str, SourceBatchResult]]]
"""(source key -> local file, staging dir, attempt id) -> per source key results, once staged.
It returns when the batch is read; the staged files may still be being written."""
Fetch = Callable[[str, Path], Path]
"""(source key, scratch dir) -> a local path holding the source object's bytes."""
Publish = Callable[[Path, str], str]
"""(local file, object key under the table root) -> its URL; moves the file."""


def quarantine_table(stream: str) -> str:
    return f"{stream}.quarantine"


def object_name(attempt_id: str, source_key: str, n: int, suffix: str) -> str:
    """Unique per attempt, source and object: two attempts can never overwrite each other's
    objects, and one source may yield several objects for a date (one per Spark task)."""
    digest = hashlib.sha256(source_key.encode()).hexdigest()[:16]
    return f"{attempt_id}-{digest}-{n}{suffix}"


@dataclass
class _ReadChunk:
    """A chunk between its read and its commits: leases held (and renewed), objects staged."""

    keys: Sequence[str]
    attempt: str
    scratch: Path
    keeper: LeaseKeeper
    leases: dict[str, Lease] = field(default_factory=dict)
    outcomes: dict[str, PartitionOutcome] = field(default_factory=dict)
    local: dict[str, Path] = field(default_factory=dict)
    staged: Future[dict[str, SourceBatchResult]] | None = None

    def close(self) -> None:
        """Stop renewing, hand back leases not committed, drop the staging files (once nothing
        is writing them any more)."""
        self.keeper.__exit__(None, None, None)
        if self.staged is not None:
            wait([self.staged])
        shutil.rmtree(self.scratch, ignore_errors=True)


def chunk_sizes(partitions: int, chunk_size: int) -> list[int]:
    """Chunks of `chunk_size`, except that the last holds at most a quarter of that: its
    writes, commits and Dagster events come after the last Spark read, with nothing to overlap
    them, so a small last chunk shortens the run by most of a chunk's handling for the cost of
    one more (small) Spark job. A run of at most one chunk is read at once."""
    if partitions <= chunk_size:
        return [partitions]
    last = -(-chunk_size // 4)  # rounded up
    full, rest = divmod(partitions - last, chunk_size)
    return [chunk_size] * full + ([rest] if rest else []) + [last]


class IngestionRunner:
    def __init__(
        self,
        *,
        stream: str,
        table: str,
        store: LeaseStore,
        owner: str,
        timing: LeaseTiming,
        fetch: Fetch,
        read_batch: ReadBatch,
        publish_table: Publish,
        publish_quarantine: Publish,
        work_dir: Path,
        chunk_size: int = 500,
        clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc),
        on_step: Callable[[str, str], None] | None = None,
        merge_after_s: float | None = None,
        delayed_merge_after_s: float | None = None,
    ) -> None:
        self.stream = stream
        self.table = table
        self.store = store
        self.owner = owner
        self.timing = timing
        self.fetch = fetch
        self.read_batch = read_batch
        self.publish_table = publish_table
        self.publish_quarantine = publish_quarantine
        self.work_dir = work_dir
        self.chunk_size = chunk_size
        self.clock = clock
        # Observer of the protocol's steps, ("published" | "committed", source key): the two
        # moments a crash matters. Used for progress logging and by the crash tests.
        self.on_step = on_step or (lambda step, key: None)
        self.sid = store.source_identifier(stream)
        # The table's merge job is scheduled by the commit that lands its first unmerged object
        # (`merge.interval` later; `merge.delayed_interval` when it is closed, the commit
        # decides); quarantine objects are never merged.
        self.merge_after_s = {} if merge_after_s is None else {table: merge_after_s}
        self.delayed_merge_after_s = (
            {} if delayed_merge_after_s is None else {table: delayed_merge_after_s}
        )

    def ingest(self, source_keys: Sequence[str]) -> Iterator[PartitionOutcome]:
        """One outcome per key, in order; never raises for a single partition's failure.

        Chunks are pipelined: while one chunk commits and its outcomes go to the caller (in a
        Dagster run, one event-log write per partition), the next chunk is acquired, fetched
        and read in a background thread. Commits stay on the caller's thread, in key order.
        """
        if not source_keys:
            return
        chunks, start = [], 0
        for size in chunk_sizes(len(source_keys), self.chunk_size):
            chunks.append(source_keys[start : start + size])
            start += size
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-read") as pool:
            pending: Future[_ReadChunk] | None = pool.submit(self._read_chunk, chunks[0])
            try:
                for following in [*chunks[1:], None]:
                    try:
                        chunk = pending.result()
                    except Exception:
                        # The read failed and `_read_chunk` closed its chunk. Anything else
                        # (a canceled run's interrupt, raised in this wait) leaves it pending:
                        # it is handed back below once its read ends.
                        pending = None
                        raise
                    pending = pool.submit(self._read_chunk, following) if following else None
                    yield from self._commit_chunk(chunk)
            finally:
                if pending is not None:  # the caller stopped early: hand that chunk back
                    self._hand_back(pending)

    def _hand_back(self, pending: Future[_ReadChunk]) -> None:
        """Close the chunk read ahead for a caller that stopped. A read that failed — in a
        canceled Dagster run, Spark is stopped under it — closed its chunk itself: its leases
        are back already (the keeper logs any it could not hand back)."""
        try:
            chunk = pending.result()
        except Exception as exc:  # noqa: BLE001 - nothing left to do but say why
            log.info(
                "%s: the chunk read ahead failed after the caller stopped: %s", self.stream, exc
            )
            return
        chunk.close()

    # -- steps ---------------------------------------------------------------------------------

    def _not_ingested(
        self, outcome: PartitionOutcome, exc: BaseException | None = None
    ) -> PartitionOutcome:
        """Log a partition this run does not ingest, where that is decided; the caller gets the
        same message in its outcome. `exc` adds a traceback: for errors leasehold does not
        expect."""
        log.warning(
            "%s: %r not ingested (%s): %s",
            self.stream,
            outcome.source_key,
            outcome.outcome,
            outcome.message,
            exc_info=exc,
        )
        return outcome

    def _acquire(self, key: str) -> Lease | PartitionOutcome:
        try:
            item = self.store.acquire(self.sid, key, self.owner, self.timing.ownership_timeout_s)
        except PartitionNotFoundError:
            return self._not_ingested(
                PartitionOutcome(
                    key,
                    FAILED,
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

    def _read_chunk(self, keys: Sequence[str]) -> _ReadChunk:
        """Acquire, fetch and read one chunk; its leases stay renewed until it is closed."""
        attempt = uuid.uuid4().hex[:12]
        scratch = self.work_dir / f"attempt-{attempt}"
        chunk = _ReadChunk(keys, attempt, scratch, LeaseKeeper(self.timing.renew_interval_s))
        chunk.keeper.__enter__()
        try:
            for key in keys:
                got = self._acquire(key)
                if isinstance(got, Lease):
                    chunk.leases[key] = chunk.keeper.add(got)
                else:
                    chunk.outcomes[key] = got
            for key, lease in chunk.leases.items():
                try:
                    chunk.local[key] = self.fetch(key, chunk.scratch / "sources")
                except Exception as exc:  # noqa: BLE001 - any failure to read the object
                    chunk.outcomes[key] = self._close_unreadable(
                        lease,
                        key,
                        f"cannot fetch: {exc}",
                        None if isinstance(exc, LeaseholdError) else exc,
                    )
            if chunk.local:
                chunk.staged = self.read_batch(chunk.local, chunk.scratch / "staging", attempt)
        except BaseException:
            chunk.close()
            raise
        return chunk

    def _commit_chunk(self, chunk: _ReadChunk) -> Iterator[PartitionOutcome]:
        """Commit the chunk's partitions, then persist the lease metrics they counted.

        Metrics are flushed once per chunk, before its outcomes reach the caller, so a run
        killed at any moment loses at most the counts of the chunk in flight: the stored
        `partitionsCompleted` is short of the COMPLETED items by at most that chunk's commits
        (`chunk_size`). Not once per commit: a flush is a store write of its own, to one
        metrics item per source identifier that every worker updates (on DynamoDB all of them
        share one partition key; on SQLite they take the one write lock), so per commit it
        would double the writes of the hot path and make that item its bottleneck. Per chunk
        it is one write in `chunk_size` commits. A failed flush keeps the counts for the next
        one (`flush_or_keep`): counters never fail the work they count."""
        try:
            results = chunk.staged.result() if chunk.staged is not None else {}
            for key in chunk.local:
                chunk.outcomes[key] = self._commit(
                    chunk.leases[key], key, results.get(key), chunk.attempt
                )
        finally:
            chunk.close()
            flush_or_keep(self.store)
        for key in chunk.keys:
            yield chunk.outcomes[key]

    def _close_unreadable(
        self, lease: Lease, key: str, reason: str, exc: BaseException | None = None
    ) -> PartitionOutcome:
        """CLOSE the partition (reopened with backoff, dead-lettered after the last try)."""
        try:
            item = lease.close(reason=reason)
        except LeaseStoreError as lost:
            outcome = PartitionOutcome(key, LOST_LEASE, lease.epoch, message=str(lost))
            return self._not_ingested(outcome, exc)
        if item.dead_letter_reason is not None:
            message = f"dead-lettered after {item.closed_count} failed reads: {reason}"
        else:
            message = (
                f"unreadable (closed {item.closed_count} times, will retry at "
                f"{iso_utc(item.reopen_at_ms)}): {reason}"
            )
        return self._not_ingested(
            PartitionOutcome(key, UNREADABLE, lease.epoch, message=message), exc
        )

    def _commit(
        self, lease: Lease, key: str, result: SourceBatchResult | None, attempt: str
    ) -> PartitionOutcome:
        if result is None:
            return self._close_unreadable(lease, key, "the reader returned nothing for it")
        if result.unreadable is not None:
            return self._close_unreadable(lease, key, result.unreadable)
        outcome = PartitionOutcome(key, COMMITTED, lease.epoch)
        if lease.lost:
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the lease: {lease.lost_reason}"
            return self._not_ingested(outcome)
        today = self.clock().strftime("%Y-%m-%d")
        to_publish = [(f, self.table, self.publish_table) for f in result.table_files] + [
            (
                StagedFile(today, f.local_path, f.row_count, f.content_length),
                quarantine_table(self.stream),
                self.publish_quarantine,
            )
            for f in result.quarantine_files
        ]
        objects = [
            self._publish(f, key, attempt, n, table, publish)
            for n, (f, table, publish) in enumerate(to_publish)
        ]
        rows_written = sum(f.row_count for f in result.table_files)
        self.on_step("published", key)
        progress = {
            "rows_read": result.rows_read,
            "rows_written": rows_written,
            "rows_quarantined": result.rows_quarantined,
            "attempt": attempt,
        }
        try:
            committed = lease.commit(
                lambda token: (
                    self.store.commit(
                        token,
                        objects,
                        progress_state=json.dumps(progress),
                        merge_after_s=self.merge_after_s,
                        delayed_merge_after_s=self.delayed_merge_after_s,
                    ).item
                )
            )
        except LeaseLostError as exc:
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the lease: {exc}"
            return self._not_ingested(outcome)
        except AlreadyCommittedError as exc:
            log.info("%s: %r already committed: %s", self.stream, key, exc)
            outcome.outcome, outcome.message = ALREADY_COMPLETE, str(exc)
            return outcome
        except LeaseStoreError as exc:  # store down: unknown whether it landed; a retry knows
            outcome.outcome = FAILED
            outcome.message = f"commit failed: {exc}; retried at the next discovery tick"
            return self._not_ingested(outcome)
        self.on_step("committed", key)
        outcome.epoch = committed.epoch
        outcome.rows_read = result.rows_read
        outcome.rows_written = rows_written
        outcome.rows_quarantined = result.rows_quarantined
        table_objects = [o for o in objects if o.table == self.table]
        outcome.small_objects = len(table_objects)
        outcome.bytes = sum(o.content_length for o in table_objects)
        outcome.table_partitions = sorted({o.dt for o in table_objects})
        return outcome

    def _publish(
        self, staged: StagedFile, key: str, attempt: str, n: int, table: str, publish: Publish
    ) -> SmallObject:
        name = f"dt={staged.dt}/{object_name(attempt, key, n, staged.local_path.suffix)}"
        url = publish(staged.local_path, name)
        return SmallObject(table, staged.dt, url, staged.content_length, staged.row_count)
