"""Which rows of a table partition one source object's earlier content contributed: what a
replacement of that object (`on_change: replace`) retracts (docs/concepts/keys-and-changes.md).

The ledger keeps each small object's sources (`resources.ledger.provenance`): the runs of rows
each source object of its unit gave, in row order. The rows `key` gave are found there, by row
id (`resources.dedupe.key_index.row_ids`), which a date's key index names long after the small
objects were merged and collected. A retracted row loses as a row beaten under `latest` does:
its key leaves the index unless another row of it wins, and the files serving it are copied
without it (`DedupedFiles.finish`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from resources.dedupe.key_index import ROW_BITS
from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.ledger.provenance import positions_of


class RetractionError(LeaseholdError):
    """The ledger cannot say which rows an object's earlier content contributed."""


def contributed_rows(
    objects: Sequence[RegisteredObject], unit: str, key: str, *, only_object: bool
) -> np.ndarray:
    """The row ids, ascending, of the rows the source object `key` gave to the small objects
    of work unit `unit` among `objects` (a table partition's). An object committed without
    sources counts whole when `only_object` (the unit held `key` alone). Raises
    `RetractionError` for one without sources otherwise."""
    parts = []
    for o in sorted(objects, key=lambda o: o.object_id):
        if o.source_partition_key != unit or not o.row_count:
            continue
        if o.sources:
            spans = positions_of(o.sources, key)
        elif only_object:
            spans = [(0, o.row_count)]
        else:
            raise RetractionError(
                f"{o.table} dt={o.dt}: small object {o.object_id} of unit {unit!r} was committed "
                f"without its sources (by an earlier version), and the unit held other objects "
                f"than {key!r}: which of its rows came from {key!r} is not known"
            )
        base = np.int64(o.object_id) << ROW_BITS
        parts += [base + np.arange(start, stop, dtype=np.int64) for start, stop in spans]
    if not parts:
        return np.zeros(0, np.int64)
    rows: np.ndarray = np.concatenate(parts)
    return rows
