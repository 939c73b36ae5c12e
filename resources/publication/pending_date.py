"""`PendingDate`: a table partition between `DedupedFiles.prepare` and `finish` — what its key
resolution starts from."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from resources.dedupe.key_index import KeyedRows, KeyIndex, object_of
from resources.dedupe.retracted_keys import RetractedKeys
from resources.dedupe.served import ServedState
from resources.ledger.model import RegisteredObject
from resources.ledger.publication import DataFile

Span = tuple[int, int]


@dataclass(frozen=True)
class PendingDate:
    """A date between `DedupedFiles.prepare` and `finish`: what its resolution starts from."""

    dt: str
    state: ServedState | None
    index: KeyIndex
    new: KeyedRows
    small: Sequence[RegisteredObject]
    files: Sequence[DataFile]
    spans: dict[str, Span]
    upper: int
    retracted: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    """Row ids the markers committed since the state retract (`retracted_rows`)."""
    retracted_before: RetractedKeys = field(default_factory=RetractedKeys.empty)
    """The keys replacements retracted up to the state."""

    def committed_at_ms(self) -> np.ndarray:
        """Per row of `new`, when its small object was committed (0: not known); asked only
        under `scope: table`, whose cross-date order it is."""
        return _committed_at(self.small, self.new)


def _committed_at(small: Sequence[RegisteredObject], rows: KeyedRows) -> np.ndarray:
    """Per row of `rows`, its small object's commit time (0 where unknown): looked up once per
    run of rows of one object (their rows are read object by object)."""
    when = {o.object_id: o.committed_at_ms or 0 for o in small}
    objects = object_of(rows.row)
    if not len(objects):
        return np.zeros(0, np.int64)
    starts = np.concatenate([[0], np.flatnonzero(objects[1:] != objects[:-1]) + 1])
    lengths = np.diff(np.append(starts, len(objects)))
    at = np.array([when.get(int(o), 0) for o in objects[starts]], np.int64)
    out: np.ndarray = np.repeat(at, lengths)
    return out
