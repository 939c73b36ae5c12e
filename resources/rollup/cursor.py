"""Where a rollup of one table partition is, and its name in the store.

The cursor is the progress state of the rollup job's lease (`ItemType.ROLLUP_JOB`, key dt):
written only by the fenced renewals of the lease's holder, before and after each batch. Readers
besides the runner: the rollup check (what the state covers), garbage collection (a small object
the rollup has not consumed is kept) and `leasehold rollup read`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from resources.rollup.spec import RollupSpec

SEQ_BITS = 20
"""A served rollup's position packs the publication's `upper` above its `seq` in this many bits
(`served_position`): a date published a million times would need more."""


def served_position(upper: int, seq: int) -> int:
    """The position of a rollup recomputed from the publication `seq` of ids `1..upper`: it
    grows with every publication of the date (a revision keeps `upper`, its `seq` grows) and is
    never below an id a rollup counting batches reached (`upper` itself), so the txids and table
    positions of such a state stay ordered after it. Raises `ValueError` past `SEQ_BITS`."""
    if not 0 < seq < 1 << SEQ_BITS:
        raise ValueError(f"publication seq {seq} outside 1..{(1 << SEQ_BITS) - 1}")
    return upper << SEQ_BITS | seq


def rollup_id(table: str, spec: RollupSpec) -> str:
    """The rollup's name in the store: its state records and its job lease."""
    return f"{table}|{spec.name}"


@dataclass(frozen=True)
class RollupCursor:
    """A rollup job's progress for one date, kept in its lease item: what is applied, what is being
    written."""

    upto: int = 0
    """The txid of the last batch applied whole: every id up to it is in the state."""
    pending: tuple[int, int] | None = None
    """(after, upto) of the batch being written: recorded before its first key, so its replay
    keeps its txid and rows (transactional) or knows which keys it replaces (opaque)."""
    earlier: tuple[int, ...] = ()
    """Opaque: the txids of earlier attempts of the pending batch, which died; its keys may
    hold any of them."""
    seq: int = 0
    """A served rollup's (recomputed per publication): the `seq` of the publication whose rows
    the state aggregates, `upto` being its `upper`; 0 for a rollup counting batches."""

    @property
    def position(self) -> int:
        """Where the state is, as its txids and its table's partition say: `upto`, or a served
        rollup's `served_position`."""
        return served_position(self.upto, self.seq) if self.seq else self.upto

    @staticmethod
    def of(progress: Any) -> RollupCursor:
        """From the lease item's parsed progress (None: the rollup never ran)."""
        if not progress:
            return RollupCursor()
        pending = progress.get("pending")
        return RollupCursor(
            int(progress["upto"]),
            None if pending is None else (int(pending[0]), int(pending[1])),
            tuple(int(t) for t in progress.get("earlier", ())),
            int(progress.get("seq", 0)),
        )

    def state(self) -> dict[str, Any]:
        state = {
            "upto": self.upto,
            "pending": None if self.pending is None else list(self.pending),
            "earlier": list(self.earlier),
        }
        return {**state, "seq": self.seq} if self.seq else state
