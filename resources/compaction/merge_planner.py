"""`MergePlanner`: which small objects one merge of a table partition takes, and into which range.

The rules (docs/architecture.md, issue 13 item 4):

- A merge takes the committed ids above the chain's last `upper`, in id order: at most
  `max_objects` of them and while their bytes stay within `max_bytes` — but always at least
  one object, so every merge makes progress whatever the sizes.
- If the open range (the last range after the sentinel) holds a merged object under
  `max_bytes`, it is rewritten together with the new objects (same `lower`); otherwise a new
  range starts at the chain's last `upper`.
- Objects left behind by a limit make the plan a carry-over: the merge job is due again at once.

Only the new objects count against the limits, as in Prism (whose ranges of 134–253 MB against
a 128 MiB target show it): a merged object stays under about twice the target. Counting the
rewritten object too would keep objects nearer the target but makes a backlog expensive: merged
objects compress better than small ones, so the open object approaches the target from below,
each merge taking fewer new objects while rewriting all of it again.

Consequence: a range stops being rewritten only once its merged object reached `max_bytes`,
so every range but the last is at least the target; a partition of B merged bytes therefore
has at most `floor(B / max_bytes) + 1 <= ceil(B / max_bytes) + 1` merged files.

Pure: the caller reads the partition, its chain and its objects from the ledger.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from resources.errors import LeaseholdError
from resources.ledger.merge import SENTINEL_UPPER, MergeRange, chain_problems
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.retraction_marker import retraction_of
from resources.streams import StreamConfig


class MergeInputError(LeaseholdError):
    """The ledger cannot be merged as read: a committed id has no object, an id appears twice,
    or the chain is broken. Never expected — ids are dense by construction — so it is a bug to
    investigate, and nothing is merged rather than merging around it."""


@dataclass(frozen=True)
class MergePlan:
    """One merge decided from the ledger: which objects, which id range, and what the commit is
    fenced on."""

    table: str
    dt: str
    previous_upper: int
    """The chain's last `upper` as read (0 if never merged): the commit is fenced on it."""
    lower: int
    """`previous_upper` for a new range, the open range's `lower` when rewriting it."""
    upper: int
    """The last small-object id taken."""
    rewrite: MergeRange | None
    """The open range rewritten: its merged object is an input."""
    objects: tuple[RegisteredObject, ...]
    """The small objects taken, by id."""
    carry_over: bool
    """Limits left committed objects behind: the job is due again at once."""

    @property
    def inputs(self) -> list[str]:
        """The merge's input URLs: the rewritten merged object first, then the small objects
        by id. (Rows with equal sort values may come out in any order: Spark's sort is not
        stable, and nothing relies on that order.)"""
        head = [self.rewrite.url] if self.rewrite is not None and self.rewrite.url else []
        return head + [o.url for o in self.objects]

    @property
    def input_bytes(self) -> int:
        head = self.rewrite.content_length if self.rewrite is not None else 0
        return head + sum(o.content_length for o in self.objects)

    @property
    def schema_version(self) -> int:
        """The newest schema version among the inputs' rows: the merged object's
        (`MergedObject.schema_version`)."""
        head = [self.rewrite.schema_version] if self.rewrite is not None else []
        return max([*head, *(o.schema_version for o in self.objects)], default=1)

    @property
    def input_rows(self) -> int:
        """What the merged object must hold: the rewritten object's rows plus the new ones."""
        head = self.rewrite.row_count if self.rewrite is not None else 0
        return head + sum(o.row_count for o in self.objects)


class MergePlanner:
    """Decides a partition's next merge within the stream's limits (objects and bytes per merge)."""

    def __init__(self, max_objects: int, max_bytes: int) -> None:
        if max_objects < 1 or max_bytes < 1:
            # A caller's bug (the stream config validates both): no LeaseholdError, keep the
            # traceback.
            raise ValueError(f"limits must be positive: {max_objects} objects, {max_bytes} bytes")
        self.max_objects = max_objects
        self.max_bytes = max_bytes

    @classmethod
    def for_stream(cls, config: StreamConfig) -> MergePlanner:
        return cls(config.merge.max_objects, config.merge.max_bytes)

    def plan(
        self,
        partition: TablePartition,
        ranges: Sequence[MergeRange],
        objects: Sequence[RegisteredObject],
    ) -> MergePlan | None:
        """The next merge of `partition`, None if nothing is unmerged.

        `ranges` is its stored chain (sentinel first, by `upper`), the authority on what is
        merged; `objects` its ledger objects — all of them may be passed: only ids above the
        chain's last `upper` and up to `next_object_id - 1` are taken (an object committed
        after `partition` was read waits for the next merge). Raises `MergeInputError` if the
        chain is broken or those ids are not exactly the dense run the ledger promises."""
        where = f"{partition.table} dt={partition.dt}"
        problems = chain_problems(ranges, partition.next_object_id)
        if problems:
            raise MergeInputError(f"{where}: broken merge chain: {'; '.join(problems)}")
        previous_upper = ranges[-1].upper if ranges else SENTINEL_UPPER
        last_id = partition.next_object_id - 1
        unmerged = self._unmerged(where, objects, previous_upper, last_id)
        if not unmerged:
            return None

        open_range = ranges[-1] if ranges and not ranges[-1].is_sentinel else None
        rewrite = None
        if open_range is not None and open_range.content_length < self.max_bytes:
            rewrite = open_range
        budget = self.max_bytes
        taken = [unmerged[0]]
        spent = unmerged[0].content_length
        for obj in unmerged[1:]:
            if len(taken) >= self.max_objects or spent + obj.content_length > budget:
                break
            taken.append(obj)
            spent += obj.content_length

        if any(retraction_of(o.sources) is not None for o in taken):
            # A retraction marker's rows to retract may lie in the open range, as merged rows no
            # longer named by id: a new range leaves them to the publication's key index.
            rewrite = None
        # A rewrite keeps the open range's `lower` (never None: the open range is not the
        # sentinel); a new range starts where the chain ends.
        lower = previous_upper
        if rewrite is not None and rewrite.lower is not None:
            lower = rewrite.lower
        return MergePlan(
            table=partition.table,
            dt=partition.dt,
            previous_upper=previous_upper,
            lower=lower,
            upper=taken[-1].object_id,
            rewrite=rewrite,
            objects=tuple(taken),
            carry_over=len(taken) < len(unmerged),
        )

    @staticmethod
    def _unmerged(
        where: str, objects: Sequence[RegisteredObject], previous_upper: int, last_id: int
    ) -> list[RegisteredObject]:
        """The objects with `previous_upper < id <= last_id`, by id, checked to be exactly
        one per id."""
        by_id: dict[int, RegisteredObject] = {}
        for obj in objects:
            if not previous_upper < obj.object_id <= last_id:
                continue
            if obj.object_id in by_id:
                raise MergeInputError(f"{where}: small object id {obj.object_id} appears twice")
            by_id[obj.object_id] = obj
        missing = [i for i in range(previous_upper + 1, last_id + 1) if i not in by_id]
        if missing:
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise MergeInputError(
                f"{where}: committed small object id {missing[0]}{more} has no ledger object "
                f"(ids {previous_upper + 1}..{last_id} must be dense)"
            )
        return [by_id[i] for i in range(previous_upper + 1, last_id + 1)]
