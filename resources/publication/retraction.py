"""Which rows of a table partition one source object's earlier content contributed, as the key
index names them: what a replacement of that object (`on_change: replace`) retracts
(docs/concepts/keys-and-changes.md).

The ledger finds them (`resources.ledger.retraction_marker`: each small object's sources, the
runs of rows each source object of its unit gave, in row order); here they become row ids
(`resources.dedupe.key_index.row_ids`), which a date's key index names long after the small
objects were merged and collected. A retracted row loses as a row beaten under `latest` does:
its key leaves the index unless another row of it wins, and the files serving it are copied
without it (`DedupedFiles.finish`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from resources.dedupe.key_index import ROW_BITS
from resources.dedupe.retracted_keys import RetractedKeys
from resources.ledger.model import RegisteredObject
from resources.ledger.retraction_marker import (
    RetractionError,
    Spans,
    contributed_spans,
    retracted_spans,
    span_positions,
)
from resources.publication.pending_date import PendingDate

__all__ = ["RetractionError", "contributed_rows", "retracted_keys", "retracted_rows"]


def contributed_rows(
    objects: Sequence[RegisteredObject], unit: str, key: str, *, only_object: bool
) -> np.ndarray:
    """The row ids, ascending, of the rows the source object `key` gave to the small objects
    of work unit `unit` among `objects` (`contributed_spans`). Raises `RetractionError`."""
    return _row_ids(contributed_spans(objects, unit, key, only_object=only_object))


def retracted_rows(objects: Sequence[RegisteredObject], lower: int, upper: int) -> np.ndarray:
    """The row ids, ascending, that the retraction markers among `objects` (a table
    partition's) with `lower < id <= upper` retract. Raises `RetractionError`, `MarkerError`."""
    return _row_ids(retracted_spans(objects, lower, upper))


def retracted_keys(p: PendingDate, retracted: np.ndarray | None) -> tuple[RetractedKeys, int]:
    """The keys retracted up to `p`'s state and those of the rows `retracted` among `p`'s new
    rows and its index's entries (what the date served, or was about to); and how many rows
    replacements took out up to now (those rows, and the state's)."""
    before = p.retracted_before
    earlier = p.state.retracted_rows if p.state is not None else 0
    if retracted is None or not len(retracted):
        return before, earlier
    new, served = np.isin(p.new.row, retracted), np.isin(p.index.entries.row, retracted)
    keys = before.with_keys(
        np.concatenate([p.new.h1[new], p.index.entries.h1[served]]),
        np.concatenate([p.new.h2[new], p.index.entries.h2[served]]),
    )
    return keys, earlier + int(new.sum() + served.sum())


def _row_ids(spans: Spans) -> np.ndarray:
    return span_positions(spans, {object_id: object_id << ROW_BITS for object_id in spans})
