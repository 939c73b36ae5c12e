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
        )

    def state(self) -> dict[str, Any]:
        return {
            "upto": self.upto,
            "pending": None if self.pending is None else list(self.pending),
            "earlier": list(self.earlier),
        }
