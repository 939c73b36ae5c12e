"""How long a table partition's committed rows have waited for publication, and by when they
should have been published (the `publication_lag` check, docs/concepts/publication.md).

A committed small object is served to readers once the partition's current publication covers
its id (`1..published_upper`). By when that must happen depends on the partition's state when
it was committed, which its row and the object tell:

- **Open partition, or a live id of a closed one** (`id <= last_live_object_id`): publication
  is due as soon as it is committed (`publication_due`: a live version, or the switch), so the
  `<stream>_publish` sensor (every 30 s) publishes it at its next tick: deadline = commit +
  `PUBLISH_MARGIN_MS`.
- **Delayed object** (committed after closing, `id > last_live_object_id`): a closed partition
  publishes merged objects only, so it waits for a merge. While the chain does not cover every
  live id yet (`merged_upper < last_live_object_id`) the merge job has been due since closing
  (closing makes it due at once, a delayed commit keeps the earlier due time, a carry-over is
  due again at once): deadline = commit + `MERGE_MARGIN_MS`. Afterwards the commit makes the
  job due `merge.delayed_interval` later: deadline = commit + that + `MERGE_MARGIN_MS`.

Every unpublished id is judged on its own commit time (ids follow commit order, but each
commit's time is its writer's clock, so the first id need not be the oldest). An object whose
commit time is unknown (`committed_at_ms` None: a DynamoDB item without the attribute, or one
a Query did not return yet) is never judged late, only counted, so the check can say it could
not tell. Pure: the check reads the rows and objects and calls this.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace

from resources.ledger.model import RegisteredObject, TablePartition

PUBLISH_MARGIN_MS = 5 * 60 * 1000
"""How long after its commit a publishable id may still be missing from the published version.
The publication sensor ticks every 30 s and its run publishes in seconds; five minutes leave
room for a Dagster run queued behind others, a daemon restart and a retried catalog write, so
the check fails on a publication that stopped, not on one that was a tick late."""

MERGE_MARGIN_MS = 15 * 60 * 1000
"""The same for an id that must be merged first (a delayed object), beyond the time its merge
job is due at: the merge sensor's 30 s tick, one merge run per stream at a time (one ahead may
be merging up to `merge.max_bytes`, with Spark's start-up), then `PUBLISH_MARGIN_MS` for the
publication that follows."""


@dataclass(frozen=True)
class PartitionLag:
    """One table partition's unpublished committed ids, judged at `now_ms`."""

    table: str
    dt: str
    published_upper: int
    """The current publication covers ids `1..published_upper` (0: never published)."""
    committed_upper: int
    """The last committed id (as the partition row was read)."""
    overdue: int
    """Unpublished ids whose deadline passed."""
    unknown: int
    """Unpublished ids whose commit time is not known: never judged late."""
    most_overdue_id: int | None = None
    """The overdue id furthest past its deadline (None: nothing overdue)."""
    waited_ms: int = 0
    """How long `most_overdue_id` has been committed and unpublished."""
    allowed_ms: int = 0
    """How long it was allowed to be (its interval plus margin)."""
    delayed: bool = False
    """Whether `most_overdue_id` is a delayed object (waits for a merge)."""

    @property
    def unpublished(self) -> int:
        return max(0, self.committed_upper - self.published_upper)

    @property
    def late(self) -> bool:
        return self.overdue > 0

    def describe(self) -> str:
        """One line: which ids are unpublished and, when some are late, the worst of them."""
        line = (
            f"{self.table} dt={self.dt}: ids {self.published_upper + 1}..{self.committed_upper} "
            f"unpublished (published up to {self.published_upper})"
        )
        if self.late:
            kind = "delayed object" if self.delayed else "object"
            line += (
                f", {self.overdue} past their deadline: {kind} {self.most_overdue_id} was "
                f"committed {self.waited_ms / 1000:.0f} s ago, allowed "
                f"{self.allowed_ms / 1000:.0f} s"
                + (" (it waits for a merge)" if self.delayed else "")
            )
        if self.unknown:
            line += f", {self.unknown} with an unknown commit time"
        return line


def unpublished_ids(tp: TablePartition) -> range:
    """The committed ids the current publication does not cover (as of the row). From the
    partition row alone, so only partitions with some need their objects read."""
    covered = tp.published_upper if tp.publication_seq > 0 else 0
    return range(covered + 1, tp.next_object_id)


def is_behind(tp: TablePartition) -> bool:
    return len(unpublished_ids(tp)) > 0


def allowed_ms(tp: TablePartition, object_id: int, delayed_interval_ms: int) -> int:
    """How long after its commit `object_id` may be missing from the partition's published
    version (the module's rules)."""
    last_live = tp.last_live_object_id
    if last_live is None or object_id <= last_live:
        return PUBLISH_MARGIN_MS
    if tp.merged_upper < last_live:
        return MERGE_MARGIN_MS  # the merge has been due since closing
    return delayed_interval_ms + MERGE_MARGIN_MS


def partition_lag(
    tp: TablePartition,
    objects: Iterable[RegisteredObject],
    now_ms: int,
    delayed_interval_ms: int,
) -> PartitionLag:
    """Judge `tp`'s unpublished ids at `now_ms` (the store's clock, the one commit times are
    on), from the partition row as read and its objects (read after it: ids past the row's
    `next_object_id` were committed since and are ignored; an id missing from them counts as
    unknown). `delayed_interval_ms`: the stream's `merge.delayed_interval`."""
    ids = unpublished_ids(tp)
    times = {o.object_id: o.committed_at_ms for o in objects if o.object_id in ids}
    overdue = unknown = 0
    worst: tuple[int, int, int] | None = None  # (ms past the deadline, id, allowed ms)
    for object_id in ids:
        committed = times.get(object_id)
        if committed is None:
            unknown += 1
            continue
        allowed = allowed_ms(tp, object_id, delayed_interval_ms)
        past = now_ms - committed - allowed
        if past > 0:
            overdue += 1
            if worst is None or past > worst[0]:
                worst = (past, object_id, allowed)
    lag = PartitionLag(tp.table, tp.dt, ids.start - 1, tp.next_object_id - 1, overdue, unknown)
    if worst is None:
        return lag
    past, object_id, allowed = worst
    last_live = tp.last_live_object_id
    return replace(
        lag,
        most_overdue_id=object_id,
        waited_ms=past + allowed,
        allowed_ms=allowed,
        delayed=last_live is not None and object_id > last_live,
    )
