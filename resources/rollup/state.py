"""One aggregate key's stored state, and Storm's rule for applying a batch to it.

Batches are committed to the state in strict transaction-id order per table partition, but one
batch's keys may take several store transactions (DynamoDB: 100 items each), and a writer may
die between two of them. The batch is then replayed, and some of its keys already hold it. The
txid stored beside each key's value is what makes the replay safe:

- transactional: the replay is the same batch (same txid, same rows), so a key that already
  holds the batch's txid already holds its contribution; the update is skipped;
- opaque: a replay may hold other rows than the attempt that died (leasehold's runner takes in
  what was committed since, under a new txid, naming the dead attempt's txid among `earlier`),
  so a key also keeps `prev_value`, its value before the batch: an update over the batch's
  txid or an earlier attempt's recomputes from `prev_value` instead of adding to a value that
  holds the dead attempt's rows.

An opaque replay must write every key an earlier attempt of the batch may have written, not
only the keys of its own rows: a key only the dead attempt had would otherwise keep rows that
are no longer in the batch. `replay_partials` gives such a key the identity, which restores
its `prev_value`; the store finds those keys by their txid (`write_rollup_batch`).

A stream whose published rows can leave (`dedupe: latest`, `on_change: replace`) keeps a
rollup as the aggregate of what a date's publication serves, recomputed per publication
(`apply_served`): a key's value is set, not combined, under the publication's txid, and a key
the publication no longer serves is removed (`REMOVAL`). The transactional rule in its
simplest case: a replay sets the same values again.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from resources.rollup.aggregates import Aggregate, Value, combine, identity

K = TypeVar("K")


class Mode(str, Enum):
    """How a rollup replays a batch: transactional (same txid, same rows) or opaque (keeps each
    key's previous value)."""

    TRANSACTIONAL = "transactional"
    OPAQUE = "opaque"


@dataclass(frozen=True)
class KeyState:
    """What the store holds for one aggregate key. `prev_value` only in opaque mode: the value
    before batch `txid` (None: the key had none)."""

    txid: int
    value: Value
    prev_value: Value | None = None


def apply_batch(
    mode: Mode,
    aggregates: Sequence[Aggregate],
    stored: KeyState | None,
    txid: int,
    partial: Value,
    earlier: Collection[int] = (),
) -> KeyState | None:
    """The key's new state after batch `txid` contributed `partial`, or None when there is
    nothing to write: the key already holds the batch (transactional) or a later one (either
    mode: the batch was committed before it and this is a late writer's replay; the lease
    fences such writers, and this keeps the rule safe without them).

    `earlier` (opaque only): the txids earlier attempts of this batch had. An opaque replay
    may be a bigger batch than the attempt that died (it takes in what was committed since,
    under a new txid); a key holding an earlier attempt's txid is recomputed from its
    `prev_value`, like one holding `txid`."""
    if mode is Mode.TRANSACTIONAL and earlier:
        raise ValueError("a transactional batch is replayed as it was: no earlier txids")
    if stored is not None and stored.txid > txid:
        return None
    if mode is Mode.TRANSACTIONAL:
        if stored is not None and stored.txid == txid:
            return None
        before = identity(aggregates) if stored is None else stored.value
        return KeyState(txid, combine(aggregates, before, partial))
    if stored is None:
        prev = None
    elif stored.txid == txid or stored.txid in earlier:  # a replay: the attempt's rows go
        prev = stored.prev_value
    else:
        prev = stored.value
    before = identity(aggregates) if prev is None else prev
    return KeyState(txid, combine(aggregates, before, partial), prev)


@dataclass(frozen=True)
class Removal:
    """A key's record leaves the state: no row the state aggregates has its key any more."""


REMOVAL = Removal()


def apply_served(
    stored: KeyState | None, txid: int, value: Value | None
) -> KeyState | Removal | None:
    """The key's new state when the publication of txid `txid` serves rows of it whose
    aggregate is `value` (None: it serves none), or None when there is nothing to write: the
    key holds `txid` already (a replay: the same publication, the same value) or a later one
    (a late writer; the lease fences such writers, and this keeps the rule safe without
    them)."""
    if stored is not None and stored.txid >= txid:
        return None
    if value is None:
        return None if stored is None else REMOVAL
    return KeyState(txid, value)


def replay_partials(
    aggregates: Sequence[Aggregate],
    partials: Mapping[K, Value],
    earlier_keys: Iterable[K],
) -> dict[K, Value]:
    """The partial results an opaque attempt writes: its own, and the identity for each key an
    earlier attempt of the same batch may have written that this one has no rows for."""
    out = dict(partials)
    for key in earlier_keys:
        out.setdefault(key, identity(aggregates))
    return out
