"""Merge ranges, merge commits and when a table partition's merge job is due (docs/architecture.md).

Prism's model, with its ranges half-open: a range `(lower, upper]` covers the small objects with
`lower < id <= upper` and is merged into one object `part-%019d-%019d.parquet` (lower, upper).
A table partition's ranges form one chain from the sentinel `(None, 0)`: each range's `lower`
is the previous range's `upper`, `upper > lower`, no gap, no overlap, and no range reaches past
the ids committed so far. The last range is "open": while its merged object is under the
stream's byte target, the next merge rewrites it together with the new objects (same `lower`,
bigger `upper`) instead of starting a new range.

A table partition has at most one pending merge job: `merge_due_at_ms` on its ledger row
(absent = no pending job). An ingestion commit sets it if absent (`now + merge.interval`: later
commits ride along, as Prism's unique constraint made them); closing and carry-over make it due
at once; a merge commit recomputes it from what is left unmerged *inside its transaction*, so an
object committed while the merge ran is never forgotten. The running job is a lease item
(`ItemType.MERGE_JOB`, key = dt) held with the background renewer: heartbeats that are
actually refreshed, takeover after the ownership timeout, and a zombie's commit refused by epoch.

Everything here is pure: both backends call `check_merge` and `next_merge_due` inside their
transaction, so the rules are written once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from resources.errors import LeaseholdError

SENTINEL_UPPER = 0


@dataclass(frozen=True)
class MergeRange:
    """One link of a table partition's chain. The sentinel has `lower=None`, `upper=0` and no
    object."""

    table: str
    dt: str
    lower: int | None
    upper: int
    url: str | None
    content_length: int
    row_count: int
    epoch: int
    """The merge job lease's epoch that wrote it (0 for the sentinel)."""
    updated_at_ms: int
    schema_version: int = 1
    """Its merged object's `MergedObject.schema_version` (1 for the sentinel, and for a range
    recorded before the ledger kept versions)."""

    @property
    def is_sentinel(self) -> bool:
        return self.lower is None


@dataclass(frozen=True)
class MergedObject:
    """What one merge wrote: one object covering `(lower, upper]`."""

    lower: int
    upper: int
    url: str
    content_length: int
    row_count: int
    schema_version: int = 1
    """The newest schema version among the rows it holds: the highest of its inputs' (the
    small objects' and a rewritten range's, `MergePlan.schema_version`). The file may hold
    later columns, all null, when the merge wrote with a later version."""


@dataclass(frozen=True)
class MergeCommit:
    """What a merge asks the ledger to record, fenced by the merge job lease.

    `previous_upper` is the chain's last `upper` as the merge read it (0 if never merged): the
    commit is refused if the chain moved. `merged` is None when there was nothing to merge (the
    job is only settled). `merged.lower` is either `previous_upper` (a new range) or the open
    range's `lower` (the open range rewritten). `carry_over` says limits left objects behind:
    the job is then due again at once; objects that landed while the merge ran are due after
    `interval_s`, or `delayed_interval_s` (default: the same) when the partition is closed:
    those are delayed objects, unpublished until merged."""

    table: str
    dt: str
    previous_upper: int
    merged: MergedObject | None
    carry_over: bool
    interval_s: float
    delayed_interval_s: float | None = None


@dataclass(frozen=True)
class MergeCommitResult:
    """What a merge commit wrote: its range, the job's next due time, the version to publish."""

    range: MergeRange | None
    merge_due_at_ms: int | None
    """When the partition's next merge job is due (None: nothing left to merge)."""
    desired_manifest_version: int


class MergeChainError(LeaseholdError):
    """A merge commit would break the chain (it moved under the merge, or the range is bad):
    nothing was written."""


def check_merge(
    ranges: Sequence[MergeRange], merge: MergeCommit, next_object_id: int
) -> MergeRange | None:
    """Raise `MergeChainError` unless `merge` extends `ranges` (the stored chain) correctly;
    return the open range it rewrites, if any."""
    last_upper = ranges[-1].upper if ranges else SENTINEL_UPPER
    if last_upper != merge.previous_upper:
        raise MergeChainError(
            f"{merge.table} dt={merge.dt}: the chain ends at {last_upper}, the merge read "
            f"{merge.previous_upper}"
        )
    m = merge.merged
    if m is None:
        return None
    if m.upper <= m.lower:
        raise MergeChainError(f"range ({m.lower}, {m.upper}]: upper must be above lower")
    if m.upper <= merge.previous_upper:
        raise MergeChainError(f"range ({m.lower}, {m.upper}] adds nothing above {last_upper}")
    if m.upper > next_object_id - 1:
        raise MergeChainError(
            f"range ({m.lower}, {m.upper}] reaches past the last committed id {next_object_id - 1}"
        )
    if m.lower == merge.previous_upper:
        return None
    open_range = ranges[-1] if ranges else None
    if open_range is None or open_range.is_sentinel or open_range.lower != m.lower:
        raise MergeChainError(
            f"range ({m.lower}, {m.upper}] neither starts a range at {merge.previous_upper} "
            "nor rewrites the open range"
        )
    return open_range


@dataclass(frozen=True)
class CommitDue:
    """When a commit's objects make their partition's merge job due, by the partition's
    state, which only the commit's transaction knows: `open_ms` (now + `merge.interval`) for
    an open partition, `delayed_ms` (now + `merge.delayed_interval`) for a closed one."""

    open_ms: int
    delayed_ms: int


def commit_merge_due(existing_ms: int | None, closed: bool, due: CommitDue | None) -> int | None:
    """A partition's `merge_due_at_ms` after a commit lands objects in it: the earlier of the
    pending job's due time and the one these objects ask for — an open partition's objects
    ride along on a pending job (it is due no later than they would make it); a delayed
    object (the partition is closed) makes the job due within `merge.delayed_interval`,
    because a closed partition publishes merged objects only, so a delayed row is unpublished
    until a merge covers it. `due` None (a table that is never merged): as stored."""
    if due is None:
        return existing_ms
    wanted = due.delayed_ms if closed else due.open_ms
    return wanted if existing_ms is None else min(existing_ms, wanted)


def next_merge_due(
    *,
    now_ms: int,
    merged_upper: int,
    last_committed_id: int,
    carry_over: bool,
    interval_s: float,
) -> int | None:
    """When the partition's job is due after a merge commit: never if every committed id is
    merged; at once after a carry-over; else after the interval (objects that landed while the
    merge ran)."""
    if last_committed_id <= merged_upper:
        return None
    if carry_over:
        return now_ms
    return now_ms + int(round(interval_s * 1000))


def chain_problems(ranges: Sequence[MergeRange], next_object_id: int) -> list[str]:
    """Every way `ranges` (one partition's stored chain, by upper) breaks the rules: the
    sentinel first and only first, contiguous, `upper > lower`, nothing past the committed ids.
    Empty for a partition never merged."""
    if not ranges:
        return []
    problems = []
    first = ranges[0]
    if not first.is_sentinel or first.upper != SENTINEL_UPPER:
        problems.append(f"the chain starts at ({first.lower}, {first.upper}], not (None, 0]")
    for prev, cur in zip(ranges, ranges[1:], strict=False):
        if cur.is_sentinel:
            problems.append("a second sentinel")
        elif cur.lower != prev.upper:
            problems.append(
                f"({cur.lower}, {cur.upper}] does not start where ({prev.lower}, {prev.upper}] ends"
            )
        if cur.lower is not None and cur.upper <= cur.lower:
            problems.append(f"({cur.lower}, {cur.upper}]: upper not above lower")
        if cur.url is None:
            problems.append(f"({cur.lower}, {cur.upper}] has no merged object")
    if ranges[-1].upper > next_object_id - 1:
        problems.append(
            f"the chain reaches {ranges[-1].upper}, past the last committed id {next_object_id - 1}"
        )
    return problems


def merged_object_name(lower: int, upper: int) -> str:
    return f"part-{lower:019d}-{upper:019d}.parquet"
