"""Exactly-once ingestion of a batch of work units (ARCHITECTURE §5), without Dagster.

A source partition is a work unit (`work_units`): the objects its lease item lists. Per chunk
of units (whole units, up to `chunk_size` objects):
1. acquire each lease by name (epoch e); a COMPLETED one is reported as already done;
2. read every object of the chunk with ONE Spark read and write small objects — one per
   (unit, date) — to a local staging directory under attempt-unique names; publish them to the
   table's object store, still invisible, since readers only ever read what the ledger names;
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
chunk; the next chunk read while this one's small objects are written and while it commits),
commits are per partition and in a fixed order, on the caller's thread.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import uuid
import zlib
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
from resources.ingestion.csv_records import CsvFormat
from resources.ingestion.source_files import ChunkReader
from resources.ingestion.work_units import DONE, done_objects, unit_objects
from resources.ledger.model import AlreadyCommittedError, SmallObject, fits_one_commit

log = logging.getLogger(__name__)

COMMITTED = "committed"
ALREADY_COMPLETE = "already_complete"
UNKNOWN_PARTITION = "unknown_partition"
"""No lease item for the key: not created by discovery (added by hand), or expired."""
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
    schema_version: int = 0
    """The stream's schema version this attempt's table objects were written with (0: none
    written)."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this attempt added to the stream's schema."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields left out of the table (`schema_evolution: ignore`), records holding each."""

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
            "schema_version": self.schema_version,
            "new_columns": ", ".join(self.new_columns),
            "unknown_fields": ", ".join(f"{k}: {n}" for k, n in sorted(self.unknown_fields.items()))
            or "none",
        }


def committed_outcome(item: LeaseItem, outcome: str, message: str) -> PartitionOutcome:
    """A COMPLETED item's outcome as its commit saved it (the counts are the commit's
    progress state), for a partition whose commit Dagster has to be told about again. Objects,
    bytes and dates are 0 / empty for a unit committed before its progress kept them."""
    progress = item.progress or {}
    where = [p.rsplit("|", 1) for p in progress.get(TABLE_PARTITIONS, [])]
    quarantine = {t for t, _ in where if t.endswith(QUARANTINE_SUFFIX)}
    return PartitionOutcome(
        item.partition_key,
        outcome,
        item.epoch,
        rows_read=int(progress.get("rows_read", 0)),
        rows_written=int(progress.get("rows_written", 0)),
        rows_quarantined=int(progress.get("rows_quarantined", 0)),
        small_objects=int(progress.get("small_objects", 0)),
        bytes=int(progress.get("bytes", 0)),
        table_partitions=sorted({dt for t, dt in where if t not in quarantine}),
        message=message,
    )


@dataclass(frozen=True)
class StagedFile:
    """A local file written by the reader, to be published under `dt`."""

    dt: str
    local_path: Path
    row_count: int
    content_length: int
    schema_version: int = 1


@dataclass
class SourceBatchResult:
    """What the reader produced for one work unit (the objects it read of it)."""

    rows_read: int = 0
    rows_quarantined: int = 0
    table_files: list[StagedFile] = field(default_factory=list)
    quarantine_files: list[StagedFile] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)
    """Objects that could not be read at all, and why; the others were read."""
    unreadable: str | None = None
    """Set when nothing of the unit could be read: why."""
    schema_version: int = 1
    """The stream's schema version its table objects were written with."""
    new_columns: list[str] = field(default_factory=list)
    """Columns this read added to the schema (`schema_evolution: add`), by name."""
    unknown_fields: dict[str, int] = field(default_factory=dict)
    """Fields outside the schema left out of the table (`schema_evolution: ignore`): records
    holding each, by name."""


ReadBatch = Callable[..., Future[dict[str, SourceBatchResult]]]
"""(source key -> local file, staging dir, attempt id, source key -> unit key[, source key ->
quarantine line offset]) -> per unit results, once staged. It returns when the batch is read;
the staged files may still be being written."""
Fetch = Callable[[str, Path], Path]
"""(source key, scratch dir) -> a local path holding the source object's bytes."""
Publish = Callable[[Path, str], str]
"""(local file, object key under the table root) -> its URL; moves the file."""


QUARANTINE_SUFFIX = ".quarantine"


def quarantine_table(stream: str) -> str:
    return f"{stream}{QUARANTINE_SUFFIX}"


def object_name(attempt_id: str, source_key: str, n: int, suffix: str) -> str:
    """Unique per attempt, source and object: two attempts can never overwrite each other's
    objects, and one source may yield several objects for a date (one per Spark task)."""
    digest = hashlib.sha256(source_key.encode()).hexdigest()[:16]
    return f"{attempt_id}-{digest}-{n}{suffix}"


PARTIAL = "partial"
"""Progress field of a unit committing in several transactions: the objects being committed
and how many staged files of each table partition (`table|dt`) are in already."""
FAILED_READS = "failed"
"""Progress field of a CLOSED unit: which of its objects could not be read, and why."""
CHUNK = "chunk"
"""Progress field of a large object read in chunks: where the next chunk starts (`offset`,
`line`), committed with the chunk before it."""
TABLE_PARTITIONS = "table_partitions"
"""Progress field: the `table|dt` partitions (of the table and of its quarantine) a unit's
commits wrote to."""
QUARANTINE_PART = "*"
"""The quarantine's partition slot: its date is the commit's day, which a retry may not share."""


def to_read(progress: Any, key: str) -> list[str]:
    """The objects of a unit this attempt reads: those an interrupted multi-transaction commit
    was committing, the same set again (its committed partitions came from exactly those),
    else every object not done by an earlier attempt."""
    partial = progress.get(PARTIAL) if isinstance(progress, dict) else None
    if partial:
        return list(partial["objects"])
    done = done_objects(progress)
    return [o.key for o in unit_objects(key, progress) if o.key not in done]


def failures(failed: dict[str, str]) -> str:
    """Which objects of a unit were not ingested (unreadable, or refused by `schema_evolution:
    fail`), and why: what status shows."""
    shown = "; ".join(f"{key}: {why}" for key, why in list(failed.items())[:5])
    more = f" (and {len(failed) - 5} more)" if len(failed) > 5 else ""
    return f"{len(failed)} object(s) not ingested: {shown}{more}"


def add_counts(progress: dict[str, Any], objects: Sequence[SmallObject], table: str) -> None:
    """Add one transaction's rows to the unit's totals: the totals always equal what the
    ledger holds for the unit, whatever failed between transactions.

    Also where they are (`TABLE_PARTITIONS`), so a check can read the unit's rows back from
    those partitions alone, and the table's objects and bytes, so a commit recorded without
    its run (`committed_outcome`) says what the run would have. A unit that began committing
    before the list was kept never gets one (it would miss its first transactions): checks
    read such a unit's rows from the whole table."""
    if TABLE_PARTITIONS in progress or "rows_read" not in progress:
        where = {f"{o.table}|{o.dt}" for o in objects}
        progress[TABLE_PARTITIONS] = sorted(set(progress.get(TABLE_PARTITIONS, [])) | where)
    mine = [o for o in objects if o.table == table]
    written = sum(o.row_count for o in mine)
    quarantined = sum(o.row_count for o in objects if o.table != table)
    progress["rows_written"] = int(progress.get("rows_written", 0)) + written
    progress["rows_quarantined"] = int(progress.get("rows_quarantined", 0)) + quarantined
    progress["rows_read"] = progress["rows_written"] + progress["rows_quarantined"]
    progress["small_objects"] = int(progress.get("small_objects", 0)) + len(mine)
    progress["bytes"] = int(progress.get("bytes", 0)) + sum(o.content_length for o in mine)


def commit_batches(
    objects: Sequence[tuple[SmallObject, str]],
) -> list[list[tuple[SmallObject, str]]]:
    """Objects in transaction-sized batches (`fits_one_commit`), whole table partitions together
    where they fit, in order; at least one batch (a unit with nothing to write still commits)."""
    batches: list[list[tuple[SmallObject, str]]] = [[]]
    for obj in objects:
        if not fits_one_commit([o for o, _ in batches[-1]] + [obj[0]]):
            batches.append([])
        batches[-1].append(obj)
    return batches


@dataclass
class _ReadChunk:
    """A chunk between its read and its commits: leases held (and renewed), objects staged."""

    attempt: str
    scratch: Path
    keeper: LeaseKeeper
    keys: list[str] = field(default_factory=list)
    leases: dict[str, Lease] = field(default_factory=dict)
    outcomes: dict[str, PartitionOutcome] = field(default_factory=dict)
    local: dict[str, Path] = field(default_factory=dict)
    """Source object key -> local copy, for every object this chunk reads."""
    groups: dict[str, str] = field(default_factory=dict)
    """Source object key -> its unit's key."""
    reading: dict[str, list[str]] = field(default_factory=dict)
    """Unit key -> the objects of it this attempt reads (not done by an earlier one)."""
    failed: dict[str, dict[str, str]] = field(default_factory=dict)
    """Unit key -> objects that could not be fetched, and why."""
    large: str | None = None
    """The chunk's last unit, when it is one object read and committed in chunks."""
    staged: Future[dict[str, SourceBatchResult]] | None = None

    def close(self) -> None:
        """Stop renewing, hand back leases not committed, drop the staging files (once nothing
        is writing them any more)."""
        self.keeper.__exit__(None, None, None)
        if self.staged is not None:
            wait([self.staged])
        shutil.rmtree(self.scratch, ignore_errors=True)


class IngestionRunner:
    """Ingests a stream's source partitions (work units: one or more source objects) into
    its table: for each unit, take its lease, fetch and read its objects, publish the table
    and quarantine objects, and commit them with the lease in one fenced transaction
    (`Ledger.commit`), so each unit's rows land exactly once however often it is tried."""

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
        commit_every_bytes: int | None = None,
        csv: CsvFormat | None = None,
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
        # A one-object unit bigger than this is read and committed in chunks of this much.
        self.commit_every_bytes = commit_every_bytes
        # A CSV object's chunks end at record boundaries and start with its header again.
        self.csv = csv
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
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="leasehold-read") as pool:
            pending: Future[_ReadChunk] | None = pool.submit(self._read_chunk, remaining)
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
                    pending = pool.submit(self._read_chunk, remaining)
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

    def _read_chunk(self, keys: Iterator[str]) -> _ReadChunk:
        """Acquire, fetch and read the next chunk's units; their leases stay renewed until it
        is closed. Empty once `keys` is."""
        attempt = uuid.uuid4().hex[:12]
        scratch = self.work_dir / f"attempt-{attempt}"
        chunk = _ReadChunk(attempt, scratch, LeaseKeeper(self.timing.renew_interval_s))
        chunk.keeper.__enter__()
        try:
            objects = 0
            for key in keys:
                chunk.keys.append(key)
                got = self._acquire(key)
                if isinstance(got, PartitionOutcome):
                    chunk.outcomes[key] = got
                    continue
                chunk.leases[key] = chunk.keeper.add(got)
                if self._is_large(got.progress, key):
                    chunk.large = key  # read chunk by chunk when this chunk commits
                    break
                reading = to_read(got.progress, key)
                chunk.reading[key] = reading
                objects += len(reading)
                for obj in reading:
                    try:
                        chunk.local[obj] = self.fetch(obj, chunk.scratch / "sources")
                        chunk.groups[obj] = key
                    except Exception as exc:  # noqa: BLE001 - any failure to read the object
                        self._not_read(key, obj, exc)
                        chunk.failed.setdefault(key, {})[obj] = f"cannot fetch: {exc}"
                if objects >= self.chunk_size:
                    break
            if chunk.local:
                chunk.staged = self.read_batch(
                    chunk.local, chunk.scratch / "staging", attempt, chunk.groups
                )
        except BaseException:
            chunk.close()
            raise
        return chunk

    def _not_read(self, key: str, obj: str, exc: BaseException) -> None:
        log.warning(
            "%s: object %r of unit %r cannot be fetched: %s",
            self.stream,
            obj,
            key,
            exc,
            exc_info=None if isinstance(exc, LeaseholdError) else exc,
        )

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
            results = chunk.staged.result() if chunk.staged is not None else {}
            for key, lease in chunk.leases.items():
                if key == chunk.large:
                    chunk.outcomes[key] = self._ingest_large(lease, key, chunk.scratch)
                    continue
                result = results.get(key, SourceBatchResult())
                result.failed = {**chunk.failed.get(key, {}), **result.failed}
                if key not in results and not result.failed:
                    result.unreadable = "the reader returned nothing for it"
                elif not set(chunk.reading[key]) - set(result.failed):
                    result.unreadable = failures(result.failed)
                chunk.outcomes[key] = self._commit(
                    lease, key, result, chunk.reading[key], chunk.attempt
                )
        finally:
            chunk.close()
            flush_or_keep(self.store)
        for key in chunk.keys:
            yield chunk.outcomes[key]

    def _close_unreadable(
        self,
        lease: Lease,
        key: str,
        reason: str,
        exc: BaseException | None = None,
        committed: PartitionOutcome | None = None,
    ) -> PartitionOutcome:
        """CLOSE the unit (reopened with backoff, dead-lettered after the last try). With
        `committed`: what this attempt committed of the unit's other objects first."""
        # Kept with the unit's progress, so `leasehold status` can say which object failed.
        progress = dict(lease.progress) if isinstance(lease.progress, dict) else {}
        progress[FAILED_READS] = reason
        try:
            item = lease.close(reason=reason, progress=progress)
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
        outcome = committed or PartitionOutcome(key, UNREADABLE, lease.epoch)
        outcome.outcome, outcome.epoch = UNREADABLE, lease.epoch
        if committed is not None:
            message = (
                f"its readable objects committed ({committed.rows_written} rows in all); {message}"
            )
        outcome.message = message
        return self._not_ingested(outcome, exc)

    def _commit(
        self,
        lease: Lease,
        key: str,
        result: SourceBatchResult,
        reading: list[str],
        attempt: str,
        final: bool = True,
        reached: dict[str, Any] | None = None,
    ) -> PartitionOutcome:
        """Commit what was read of a unit (all of it, or — `final=False` — one chunk of a
        large object, whose progress `reached` is saved in the same transaction)."""
        if result.unreadable is not None:
            return self._close_unreadable(lease, key, result.unreadable)
        outcome = PartitionOutcome(key, COMMITTED, lease.epoch)
        outcome.schema_version = result.schema_version if result.table_files else 0
        outcome.new_columns = list(result.new_columns)
        outcome.unknown_fields = dict(result.unknown_fields)
        if lease.lost:
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the lease: {lease.lost_reason}"
            return self._not_ingested(outcome)
        progress = dict(lease.progress) if isinstance(lease.progress, dict) else {}
        progress.pop(FAILED_READS, None)
        partial = progress.get(PARTIAL)
        if partial and result.failed:
            # Part of these objects' partitions is committed: the rest must come from all of
            # them, or a later retry of the missing one would repeat its committed rows.
            return self._close_unreadable(lease, key, failures(result.failed))
        already: dict[str, int] = dict(partial["committed"]) if partial else {}
        today = self.clock().strftime("%Y-%m-%d")
        staged = [(f, self.table, f.dt, self.publish_table) for f in result.table_files] + [
            (
                StagedFile(today, f.local_path, f.row_count, f.content_length),
                quarantine_table(self.stream),
                QUARANTINE_PART,
                self.publish_quarantine,
            )
            for f in result.quarantine_files
        ]
        # What an interrupted attempt committed of the same objects is skipped: they were
        # re-read, and a re-read gives the same staged files per partition, in the same order.
        seen: dict[str, int] = {}
        todo = []
        for f, table, part, publish in staged:
            slot = f"{table}|{part}"
            seen[slot] = seen.get(slot, 0) + 1
            if seen[slot] > already.get(slot, 0):
                todo.append((f, table, publish, slot))
        objects = [
            (self._publish(f, key, attempt, n, table, publish), slot)
            for n, (f, table, publish, slot) in enumerate(todo)
        ]
        self.on_step("published", key)
        batches = commit_batches(objects)
        committed: LeaseItem | None = None
        try:
            for i, batch in enumerate(batches):
                last = i == len(batches) - 1
                add_counts(progress, [o for o, _ in batch], self.table)
                progress["attempt"] = attempt
                for _, slot in batch:
                    already[slot] = already.get(slot, 0) + 1
                if last:
                    progress.pop(PARTIAL, None)
                    progress.update(reached or {})
                    if result.failed:
                        done = done_objects(progress) | (set(reading) - set(result.failed))
                        progress[DONE] = sorted(done)
                else:
                    progress[PARTIAL] = {"objects": reading, "committed": sorted(already.items())}
                complete = last and final and not result.failed
                state = json.dumps(progress)
                committed = lease.commit(
                    lambda token, batch=batch, state=state, complete=complete: (
                        self.store.commit(
                            token,
                            [o for o, _ in batch],
                            progress_state=state,
                            complete=complete,
                            timeout_s=self.timing.ownership_timeout_s,
                            merge_after_s=self.merge_after_s,
                            delayed_merge_after_s=self.delayed_merge_after_s,
                        ).item
                    ),
                    final=complete,
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
        assert committed is not None  # `commit_batches` gives at least one batch
        outcome.epoch = committed.epoch
        outcome.rows_read = int(progress.get("rows_read", 0))
        outcome.rows_written = int(progress.get("rows_written", 0))
        outcome.rows_quarantined = int(progress.get("rows_quarantined", 0))
        table_objects = [o for o, _ in objects if o.table == self.table]
        outcome.small_objects = len(table_objects)
        outcome.bytes = sum(o.content_length for o in table_objects)
        outcome.table_partitions = sorted({o.dt for o in table_objects})
        if result.failed:
            # The others are in; this unit is retried for the objects that failed.
            return self._close_unreadable(lease, key, failures(result.failed), committed=outcome)
        return outcome

    def _is_large(self, progress: Any, key: str) -> bool:
        objects = unit_objects(key, progress)
        return (
            self.commit_every_bytes is not None
            and len(objects) == 1
            and objects[0].size > self.commit_every_bytes
        )

    def _ingest_large(self, lease: Lease, key: str, scratch: Path) -> PartitionOutcome:
        """One object, chunk by chunk (KIP-618's connector-defined transaction boundary): each
        chunk — `commit_every_bytes` of text, to the end of a line (CSV: of a record) — is read
        like any object and committed with the offset it reached in one fenced transaction that
        keeps the lease (renewed in the background meanwhile); the last chunk completes the
        unit. A takeover
        resumes at the committed offset: plain text by seeking to it, gzip by decompressing up
        to it again (gzip cannot seek)."""
        (obj,) = unit_objects(key, lease.progress)
        try:
            local = self.fetch(obj.key, scratch / "sources")
        except Exception as exc:  # noqa: BLE001 - any failure to read the object
            plain = isinstance(exc, LeaseholdError)
            return self._close_unreadable(
                lease, key, f"cannot fetch: {exc}", None if plain else exc
            )
        reached = (lease.progress or {}).get(CHUNK) or {"offset": 0, "line": 1}
        try:
            chunks = ChunkReader(local, int(reached["offset"]), int(reached["line"]), self.csv)
        except (OSError, EOFError, zlib.error) as exc:
            why = f"{obj.key}: cannot read at offset {reached['offset']}: {exc}"
            return self._close_unreadable(lease, key, why)
        try:
            return self._commit_chunks(lease, key, obj.key, chunks, scratch)
        finally:
            chunks.close()

    def _commit_chunks(
        self,
        lease: Lease,
        key: str,
        obj: str,
        chunks: ChunkReader,
        scratch: Path,
    ) -> PartitionOutcome:
        total = PartitionOutcome(key, COMMITTED, lease.epoch)
        n = 0
        while True:
            n += 1
            try:
                cut = chunks.next(
                    self.commit_every_bytes or 0, scratch / f"chunk-{n}" / "chunk.txt"
                )
            except (OSError, EOFError, zlib.error) as exc:
                why = f"{obj}: cannot read at offset {chunks.offset}: {exc}"
                return self._close_unreadable(lease, key, why)
            shift = cut.first_line - 1 - cut.header_lines  # the chunk file's line 1 in the object
            attempt = uuid.uuid4().hex[:12]
            results = self.read_batch(
                {obj: cut.path},
                scratch / f"chunk-{n}" / "staging",
                attempt,
                {obj: key},
                {obj: shift},
            ).result()
            result = results.get(key) or SourceBatchResult(unreadable="the reader returned nothing")
            outcome = self._commit(
                lease,
                key,
                result,
                [obj],
                attempt,
                final=cut.last,
                reached={CHUNK: {"offset": cut.offset, "line": cut.line}},
            )
            shutil.rmtree(cut.path.parent, ignore_errors=True)
            total.small_objects += outcome.small_objects
            total.bytes += outcome.bytes
            total.table_partitions = sorted({*total.table_partitions, *outcome.table_partitions})
            if outcome.outcome != COMMITTED or cut.last:
                outcome.small_objects, outcome.bytes = total.small_objects, total.bytes
                outcome.table_partitions = total.table_partitions
                if outcome.ok:
                    outcome.message = f"{n} chunk(s) committed this run"
                return outcome
            log.info(
                "%s: %r chunk %d committed up to offset %d (line %d)",
                self.stream,
                key,
                n,
                cut.offset,
                cut.line,
            )

    def _publish(
        self, staged: StagedFile, key: str, attempt: str, n: int, table: str, publish: Publish
    ) -> SmallObject:
        name = f"dt={staged.dt}/{object_name(attempt, key, n, staged.local_path.suffix)}"
        url = publish(staged.local_path, name)
        return SmallObject(
            table,
            staged.dt,
            url,
            staged.content_length,
            staged.row_count,
            schema_version=staged.schema_version,
        )
