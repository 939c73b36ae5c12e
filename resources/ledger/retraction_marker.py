"""Retraction markers: how the ledger says that a replacement (`on_change: replace`) took a
source object's earlier rows out of a table partition (docs/concepts/keys-and-changes.md).

A replacement unit commits, in the same transaction as the rows of the object's new content,
one small object of no rows on every date the replacement touches — each date the earlier
content gave rows to, and each date the new content gives rows to. Its `sources` is a single
run of no rows whose name is `MARK` and the marker's JSON (no source object's key starts with a
NUL character: S3 and local names never hold one), so that the ledger keeps it on both backends
without a field of its own, and everything that reads small objects reads it as an empty one.

A marker says:
- `group`: the replacement unit's key — every date of the group is published in ONE
  publication (`resources.publication.replacement_groups`), so that readers see the old
  content or the new, never both, never neither;
- `dates`: the group's dates;
- `unit`/`key`: on a date the earlier content gave rows to, the unit that took them and the
  object's key: the rows `key` gave to that unit's small objects there are retracted
  (`contributed_spans`); `only_object`: that unit held `key`
  alone (its small objects committed before sources were kept count whole).

Pure.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from resources.errors import LeaseholdError
from resources.ledger.model import RegisteredObject
from resources.ledger.provenance import Sources, positions_of

MARK = "\x00leasehold.retracts "
"""The start of a marker's one source name."""


class MarkerError(LeaseholdError):
    """Sources that start like a marker but are not one `marker_sources` wrote."""


class RetractionError(LeaseholdError):
    """The ledger cannot say which rows an object's earlier content contributed."""


MARKERS_PREFIX = "_retractions/"
"""Where a replacement's markers are written, under the table's root: one object under
`dt=<dt>/` for each date it touches, so a listing of this prefix names every date that may
hold one."""


def marker_key(dt: str, name: str) -> str:
    """The object key of a marker `name` on `dt`: what `marked_date` reads back."""
    return f"{MARKERS_PREFIX}dt={dt}/{name}"


def marked_date(key: str) -> str | None:
    """The date of a marker's object key (under `MARKERS_PREFIX`), None for another key."""
    if not key.startswith(MARKERS_PREFIX):
        return None
    folder = key.removeprefix(MARKERS_PREFIX).split("/", 1)[0]
    return folder.removeprefix("dt=") if folder.startswith("dt=") else None


Spans = dict[int, list[tuple[int, int]]]
"""Small object id -> the row positions `[start, stop)` of it retracted."""


@dataclass(frozen=True)
class Retraction:
    """What a marker on one date says."""

    group: str
    """The replacement unit's key."""
    dates: tuple[str, ...]
    """Every date the replacement touches (this one among them), ascending."""
    unit: str | None = None
    """The unit whose rows of `key` leave this date; None where the earlier content gave none."""
    key: str = ""
    """The source object's key."""
    only_object: bool = False
    """`unit` held `key` alone."""


def marker_sources(retraction: Retraction) -> Sources:
    """The `sources` of the small object that records `retraction`. Raises nothing."""
    body: dict[str, object] = {
        "group": retraction.group,
        "dates": list(retraction.dates),
        "key": retraction.key,
    }
    if retraction.unit is not None:
        body |= {"unit": retraction.unit, "only_object": retraction.only_object}
    return ((MARK + json.dumps(body, ensure_ascii=False, sort_keys=True), 0),)


def retraction_of(sources: Sources) -> Retraction | None:
    """The retraction a small object's `sources` record; None for an ordinary object. Raises
    `MarkerError` for a marker that `marker_sources` did not write."""
    if len(sources) != 1 or not sources[0][0].startswith(MARK):
        return None
    text = sources[0][0][len(MARK) :]
    try:
        body = json.loads(text)
        unit = body.get("unit")
        return Retraction(
            group=str(body["group"]),
            dates=tuple(str(d) for d in body["dates"]),
            unit=None if unit is None else str(unit),
            key=str(body["key"]),
            only_object=bool(body.get("only_object", False)),
        )
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise MarkerError(f"not a retraction marker: {text[:80]!r}: {exc}") from exc


def retractions_above(
    objects: Sequence[RegisteredObject], lower: int, upper: int
) -> list[Retraction]:
    """The retractions of the markers among `objects` (a table partition's) with
    `lower < object_id <= upper`, by id. Raises `MarkerError`."""
    found = []
    for o in sorted(objects, key=lambda o: o.object_id):
        retraction = retraction_of(o.sources) if lower < o.object_id <= upper else None
        if retraction is not None:
            found.append(retraction)
    return found


def contributed_spans(
    objects: Sequence[RegisteredObject], unit: str, key: str, *, only_object: bool
) -> Spans:
    """The rows the source object `key` gave to the small objects of work unit `unit` among
    `objects` (a table partition's), by the ledger's sources. An object committed without
    sources counts whole when `only_object` (the unit held `key` alone). Raises
    `RetractionError` for one without sources otherwise."""
    spans: Spans = {}
    for o in objects:
        if o.source_partition_key != unit or not o.row_count:
            continue
        if o.sources:
            found = positions_of(o.sources, key)
        elif only_object:
            found = [(0, o.row_count)]
        else:
            raise RetractionError(
                f"{o.table} dt={o.dt}: small object {o.object_id} of unit {unit!r} was committed "
                f"without its sources (by an earlier version), and the unit held other objects "
                f"than {key!r}: which of its rows came from {key!r} is not known"
            )
        if found:
            spans.setdefault(o.object_id, []).extend(found)
    return spans


def retracted_spans(objects: Sequence[RegisteredObject], lower: int, upper: int) -> Spans:
    """The rows of `objects` (a table partition's) that the markers among them with
    `lower < id <= upper` retract. Raises `RetractionError`, `MarkerError`."""
    spans: Spans = {}
    for r in retractions_above(objects, lower, upper):
        if r.unit is not None:
            for object_id, found in contributed_spans(
                objects, r.unit, r.key, only_object=r.only_object
            ).items():
                spans.setdefault(object_id, []).extend(found)
    return spans


def span_positions(spans: Spans, first: Mapping[int, int]) -> np.ndarray:
    """The positions, ascending and each once, of the rows `spans` names, where `first[id]` is
    the position of small object `id`'s first row (its row id's base, or its offset among a
    merge's inputs)."""
    parts = [
        np.arange(first[object_id] + start, first[object_id] + stop, dtype=np.int64)
        for object_id, found in spans.items()
        for start, stop in found
    ]
    return np.unique(np.concatenate(parts)) if parts else np.zeros(0, np.int64)
