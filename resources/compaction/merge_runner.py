"""`MergeRunner`: closing due table partitions and merging them, exactly once per range.

One merge of one table partition, the protocol the concurrency tests kill at every step:
1. Acquire the partition's merge job lease (`ItemType.MERGE_JOB`, key = dt; a new epoch). A job
   held by a live merge is left alone (`BUSY`); one whose holder died is taken over once its
   ownership timeout passed. While the merge runs, the lease's background renewer heartbeats.
2. Read the partition, its chain and its small objects from the ledger, and plan
   (`MergePlanner`): the ids above the chain's last `upper`, within the limits.
3. Merge on Spark (`write`: exact ledger URLs in, one object sorted by event time out) and
   publish the object under a prefix unique to this attempt, named `part-<lower>-<upper>`:
   nothing is visible yet, and two attempts never overwrite each other.
4. Commit the range in one transaction fenced by the lease's epoch (`Ledger.commit_merge`),
   which also reschedules the job at once if limits left objects behind (carry-over) and
   hands the lease back. A zombie whose lease was taken over is refused there; its object is
   an orphan nothing names.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from resources.compaction.merge_planner import MergePlan, MergePlanner
from resources.coordination.errors import LeaseStoreError, PartitionUnavailableError
from resources.coordination.items import ItemType, iso_utc
from resources.coordination.lease import Lease, LeaseLostError, LeaseTiming
from resources.dedupe.key_index import KeyIndex
from resources.dedupe.served import ServedRange, ServedState
from resources.errors import LeaseholdError
from resources.key_settings import FIRST
from resources.ledger.merge import (
    MergeChainError,
    MergeCommit,
    MergeCommitResult,
    MergedObject,
    merged_object_name,
)
from resources.ledger.model import RegisteredObject
from resources.ledger.publication import merged_files
from resources.ledger.retraction_marker import retracted_spans, retraction_of, span_positions
from resources.objects.base import ObjectStore
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

MERGED = "merged"
NOTHING_TO_MERGE = "nothing_to_merge"
BUSY = "busy"
LOST_LEASE = "lost_lease"
FAILED = "failed"

MAX_MERGES_PER_PARTITION = 20


class Written(Protocol):
    """What a merge wrote: the local file, its size and rows, and the schema version whose
    columns it holds (read-only: a frozen dataclass is one)."""

    @property
    def path(self) -> Path: ...
    @property
    def content_length(self) -> int: ...
    @property
    def row_count(self) -> int: ...
    @property
    def dropped_now(self) -> int: ...
    @property
    def schema_version(self) -> int: ...


WriteMerged = Callable[..., Written]
"""(input URLs or local paths, local target[, served range]) -> the one object written
(`MergeWriter.write`; the `ServedRange` is passed only for a range it describes)."""


class CurrentKeys(Protocol):
    """A date's current publication under a dedupe policy (`publication.current_keys`): what it
    serves, and its key index, read when asked."""

    @property
    def state(self) -> ServedState: ...  # pragma: no cover

    def index(self) -> KeyIndex: ...  # pragma: no cover


ServedFiles = Callable[[str], CurrentKeys | None]
"""dt -> its current publication under a dedupe policy (None: no publication, or one recorded
without a policy)."""


@dataclass
class MergeOutcome:
    """What merging one partition did: the outcome, the range merged, sizes, and why it failed if it
    did."""

    dt: str
    outcome: str
    message: str = ""
    epoch: int = 0
    lower: int | None = None
    upper: int | None = None
    rewrite: bool = False
    objects_merged: int = 0
    delayed_merged: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    rows: int = 0
    # Rows of the table partition in merged objects once this merge committed (its whole merge
    # chain, not only this merge's object): what the merged asset holds for the date. None if
    # the count could not be read after the commit (the merge stands; only the count is lost).
    partition_rows: int | None = None
    carry_over: bool = False
    url: str | None = None
    next_due_at_ms: int | None = None

    @property
    def ok(self) -> bool:
        return self.outcome in (MERGED, NOTHING_TO_MERGE, BUSY)

    def metadata(self) -> dict[str, Any]:
        """What the merge asset records per table partition."""
        return {
            "outcome": self.outcome,
            "range": f"({self.lower}, {self.upper}]" if self.upper is not None else "",
            "upper": self.upper if self.upper is not None else 0,
            "rewrote_open_range": self.rewrite,
            "objects_merged": self.objects_merged,
            "delayed_objects_merged": self.delayed_merged,
            "bytes_in": self.bytes_in,
            "bytes_out": self.bytes_out,
            "rows": self.rows,
            "partition_rows": self.partition_rows if self.partition_rows is not None else -1,
            "carry_over": self.carry_over,
            "merged_object": self.url or "",
            "next_merge_due": iso_utc(self.next_due_at_ms) if self.next_due_at_ms else "",
            "epoch": self.epoch,
        }

    def describe(self) -> str:
        if self.outcome != MERGED:
            return f"dt={self.dt}: {self.outcome}" + (f": {self.message}" if self.message else "")
        carry = "; carried over" if self.carry_over else ""
        return (
            f"dt={self.dt}: merged {self.objects_merged} objects ({self.rows} rows, "
            f"{self.bytes_in} -> {self.bytes_out} bytes) into ({self.lower}, {self.upper}]"
            f"{' (open range rewritten)' if self.rewrite else ''}{carry}"
        )


class MergeRunner:
    """Merges one table's small objects, per date partition, into one sorted object under
    the partition's merge job lease (`ItemType.MERGE_JOB`), and commits each merge to the
    ledger's chain (`Ledger.commit_merge`): readers switch to it when it is published."""

    def __init__(
        self,
        *,
        config: StreamConfig,
        table: str,
        store: CoordinationStore,
        objects: ObjectStore,
        owner: str,
        timing: LeaseTiming,
        write: WriteMerged,
        work_dir: Path,
        planner: MergePlanner | None = None,
        on_step: Callable[[str, str], None] | None = None,
        parallel: int = 1,
        served: ServedFiles | None = None,
    ) -> None:
        """`served`: under `dedupe.mode: first`, a date's current publication; the small
        objects of a range it covers are merged from the files it serves (without the re-sent
        records), and those committed since are looked up in its key index, so the merge
        groups the ids of those alone. None: merges read the ledger's objects and keep one row
        per key themselves."""
        self.config = config
        self.table = table
        self.store = store
        self.objects = objects
        self.owner = owner
        self.timing = timing
        self.write = write
        self.work_dir = work_dir
        self.planner = planner or MergePlanner.for_stream(config)
        # ("written" | "published" | "committed", dt): where a crash matters; the crash tests
        # stop the process there.
        self.on_step = on_step or (lambda step, dt: None)
        self.job_sid = store.source_identifier(table, ItemType.MERGE_JOB)
        self.parallel = parallel
        self.served = served if config.dedupe.active and config.dedupe.mode == FIRST else None

    # -- merging -------------------------------------------------------------------------------

    def merge(self, dts: Sequence[str]) -> Iterator[MergeOutcome]:
        """Outcomes of merging each table partition, in the order of `dts`; never raises for one
        partition's failure. A carried-over partition (limits left objects behind; its job is
        due again at once) is merged again in this run, up to `MAX_MERGES_PER_PARTITION` times:
        one run works through a big backlog, and a longer one is left to the next run.

        Up to `parallel` partitions are merged at once, each on its own thread with its own
        lease: a merge is one Spark task (one sorted file, no shuffle), so one at a time left
        all cores but one idle while a closed backlog waited (BENCHMARKS.md, "The whole main
        job").

        Raises the store errors of creating the partitions' job items (before any merge),
        and what `merge_one` lets through."""
        if not dts:
            return
        self.store.create_partitions(self.job_sid, list(dts))
        workers = max(1, min(self.parallel, len(dts)))
        if workers == 1:  # lazily: a caller that stops iterating stops the carry-over too
            for dt in dts:
                yield from self._merges_of(dt)
            return
        with ThreadPoolExecutor(workers, thread_name_prefix="leasehold-merge") as pool:
            merging = [pool.submit(lambda dt: list(self._merges_of(dt)), dt) for dt in dts]
            for outcomes in merging:
                yield from outcomes.result()

    def _merges_of(self, dt: str) -> Iterator[MergeOutcome]:
        for _ in range(MAX_MERGES_PER_PARTITION):
            outcome = self.merge_one(dt)
            yield outcome
            if not (outcome.outcome == MERGED and outcome.carry_over):
                break

    def merge_one(self, dt: str) -> MergeOutcome:
        """Merge partition `dt` once, if its job lease is free: `MERGED` (committed),
        `NOTHING_TO_MERGE` (no plan: the job is handed back with its next due time), `BUSY`
        (another merge holds the job), `LOST_LEASE` (fenced: nothing committed) or `FAILED` (a
        store, object store, chain or row-count error: nothing committed; the job stays due).
        Its scratch files are removed either way. Raises only what is not a
        `LeaseholdError` (a bug, an error the merge writer does not map): then too nothing is
        committed."""
        try:
            item = self.store.acquire(self.job_sid, dt, self.owner, self.timing.ownership_timeout_s)
        except PartitionUnavailableError as exc:
            cur = exc.current
            return MergeOutcome(
                dt,
                BUSY,
                f"another merge ({cur.owner}, epoch {cur.epoch}) holds the job until "
                f"{iso_utc(cur.ownership_timeout_ms)}",
                epoch=cur.epoch,
            )
        except LeaseStoreError as exc:
            return self._failed(MergeOutcome(dt, FAILED), f"could not acquire the job: {exc}")
        scratch = self.work_dir / f"merge-{uuid.uuid4().hex}"
        try:
            with Lease(self.store, item, self.timing) as lease:
                return self._merge_held(lease, dt, scratch)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def _merged_rows(self, dt: str) -> int | None:
        """Rows of `dt` in merged objects, read back after a commit: a failed read loses the
        count, never the committed merge."""
        try:
            return sum(f.row_count for f in merged_files(self.store.merge_ranges(self.table, dt)))
        except LeaseholdError as exc:
            log.warning("%s dt=%s: merged rows not counted: %s", self.table, dt, exc)
            return None

    def _merge_held(self, lease: Lease, dt: str, scratch: Path) -> MergeOutcome:
        outcome = MergeOutcome(dt, MERGED, epoch=lease.epoch)
        try:
            partition = self.store.table_partition(self.table, dt)
            if partition is None:
                return self._failed(outcome, "no such table partition in the ledger")
            ranges = self.store.merge_ranges(self.table, dt)
            plan = self.planner.plan(partition, ranges, self.store.ledger_objects(self.table, dt))
            previous_upper = ranges[-1].upper if ranges else 0
            if plan is None:
                result = self._commit(lease, dt, previous_upper, None, False)
                outcome.outcome = NOTHING_TO_MERGE
                outcome.next_due_at_ms = result.merge_due_at_ms
                return outcome
            merged = self._write_and_publish(lease, plan, scratch)
            result = self._commit(lease, dt, plan.previous_upper, merged, plan.carry_over)
        except LeaseLostError as exc:
            outcome.outcome, outcome.message = LOST_LEASE, f"lost the merge job's lease: {exc}"
            log.warning("%s dt=%s: %s", self.table, dt, outcome.message)
            return outcome
        except (MergeChainError, LeaseholdError) as exc:
            return self._failed(outcome, str(exc))
        self.on_step("committed", dt)
        outcome.lower, outcome.upper = plan.lower, plan.upper
        outcome.rewrite = plan.rewrite is not None
        outcome.objects_merged = len(plan.objects)
        outcome.delayed_merged = sum(o.delayed for o in plan.objects)
        outcome.bytes_in = plan.input_bytes
        outcome.bytes_out = merged.content_length
        outcome.rows = merged.row_count
        outcome.partition_rows = self._merged_rows(dt)
        outcome.carry_over = plan.carry_over
        outcome.url = merged.url
        outcome.next_due_at_ms = result.merge_due_at_ms
        log.info("%s %s", self.table, outcome.describe())
        return outcome

    def _write_and_publish(self, lease: Lease, plan: MergePlan, scratch: Path) -> MergedObject:
        scratch.mkdir(parents=True, exist_ok=True)
        retracted = retracted_positions(plan)
        served = self._served_inputs(plan) if retracted is None else None
        urls = plan.inputs if served is None else served[0]
        inputs = [self._local(url, scratch) for url in urls]
        lease.check()
        name = merged_object_name(plan.lower, plan.upper)
        target = scratch / "out" / name
        if retracted is not None:
            written = self.write(inputs, target, retracted=retracted)
        elif served is not None:
            written = self.write(inputs, target, served[1])
        else:
            written = self.write(inputs, target)
        self.on_step("written", plan.dt)
        if written.row_count + written.dropped_now != plan.input_rows:
            left_out = f" and left out {written.dropped_now}" if written.dropped_now else ""
            raise LeaseholdError(
                f"dt={plan.dt}: the merged object holds {written.row_count} rows{left_out}, its "
                f"inputs {plan.input_rows}; nothing committed"
            )
        lease.check()
        attempt = f"{lease.epoch}-{uuid.uuid4().hex[:12]}"
        url = self.objects.move_file(written.path, f"merged/dt={plan.dt}/{attempt}/{name}")
        self.on_step("published", plan.dt)
        return MergedObject(
            plan.lower,
            plan.upper,
            url,
            written.content_length,
            written.row_count,
            # The columns it holds: the merge's version, at least its inputs' newest.
            max(plan.schema_version, written.schema_version),
        )

    def _served_inputs(self, plan: MergePlan) -> tuple[list[str], ServedRange] | None:
        """Under `first`, for a range of small objects (no merged object rewritten) whose
        leading objects the date's current publication covers: the files it serves for those,
        in id order (each the object, or its copy without the records that lost to an earlier
        one of their key: a fate that is final under `first`), then the range's later objects;
        and the `ServedRange` that says which is which (with the publication's key index when
        there are later objects). None otherwise: the merge keeps one row per key of the
        ledger's objects itself. Raises the store's and object store's errors,
        `KeyIndexError`."""
        if self.served is None or plan.rewrite is not None:
            return None
        current = self.served(plan.dt)
        if current is None:
            return None
        covered = [o for o in plan.objects if o.object_id <= current.state.upper]
        served = served_inputs(covered, current.state) if covered else None
        if served is None:
            return None
        urls, left_out = served
        later = plan.objects[len(covered) :]
        if not urls and not later:  # nothing served of the range: the merge reads the ledger's
            return None
        rows = sum(o.row_count for o in covered) - left_out
        index = current.index() if later else None
        return urls + [o.url for o in later], ServedRange(rows, left_out, index)

    def _local(self, url: str, scratch: Path) -> str:
        """A path Spark can read: local objects as they are, others copied to `scratch` first
        (Spark here writes and reads locally; docs/architecture.md)."""
        if url.startswith("file://"):
            return url[len("file://") :]
        return str(self.objects.local_copy(self.objects.key_of(url), scratch / "in"))

    def _commit(
        self,
        lease: Lease,
        dt: str,
        previous_upper: int,
        merged: MergedObject | None,
        carry_over: bool,
    ) -> MergeCommitResult:
        commit = MergeCommit(
            table=self.table,
            dt=dt,
            previous_upper=previous_upper,
            merged=merged,
            carry_over=carry_over,
            interval_s=self.config.merge.interval_s,
            delayed_interval_s=self.config.merge.delayed_interval_s,
        )
        results: list[MergeCommitResult] = []

        def write(token: Any) -> Any:
            results.append(self.store.commit_merge(token, commit))
            # The lease is finished by this write: what it holds afterwards is never read.
            return lease.item

        lease.commit(write)
        return results[0]

    def _failed(self, outcome: MergeOutcome, message: str) -> MergeOutcome:
        outcome.outcome, outcome.message = FAILED, message
        log.error("%s dt=%s: merge failed: %s", self.table, outcome.dt, message)
        return outcome


def served_inputs(
    objects: Sequence[RegisteredObject], state: ServedState
) -> tuple[list[str], int] | None:
    """The files `state` serves for the small objects `objects`, in their order (none for one
    of which nothing is served), and the rows of theirs it leaves out; None unless it covers
    every one of them. Pure."""
    by_source = state.by_source()
    served = [by_source[o.url] for o in objects if o.url in by_source]
    if len(served) != len(objects):
        return None
    left_out = sum(o.row_count for o in objects) - sum(f.rows for f in served)
    return [f.url for f in served if f.served], left_out


def retracted_positions(plan: MergePlan) -> np.ndarray | None:
    """Under a replacement, the positions (in the inputs' rows, in id order) of the rows the
    retraction markers of `plan` retract among its own small objects; None when it holds no
    marker. A range holding a marker never rewrites a merged object (`MergePlanner`), so
    its inputs are its small objects, whose rows are named by id; rows retracted in earlier
    ranges are the publication's to leave out. Raises `RetractionError`, `MarkerError`."""
    objects = list(plan.objects)
    if plan.rewrite is not None or not any(retraction_of(o.sources) for o in objects):
        return None
    spans = retracted_spans(objects, 0, plan.upper)
    starts = np.cumsum([0] + [o.row_count for o in objects[:-1]])
    return span_positions(
        spans, {o.object_id: int(at) for o, at in zip(objects, starts, strict=True)}
    )
