"""Where rollup state lives: one record per (rollup, table partition, aggregate key).

Each record holds the key's `KeyState` (txid, value, and in opaque mode prev_value). A batch
is written in store transactions of at most `KEYS_PER_TRANSACTION` keys, each with the rollup
job's lease renewal in it (its guard the fence: a zombie writer whose lease was taken writes
nothing) and each key conditional on the txid read before it (so two writers can never both
apply a batch to one key from the same stored state). A batch larger than one transaction is
safe to cut: each key's update is idempotent by its txid (`apply_batch`), so a writer killed
between two transactions leaves a state its replay completes. What a batch write decides is
in `CoordinationStore.write_rollup_batch`, once; a backend reads records and writes one
transaction.

Which batch a rollup of a partition is at (the last txid applied whole, and the batch being
written) is not here: it is the rollup job lease's progress state, written by the fenced
renewals before and after a batch.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import overload

from resources.coordination.items import LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.errors import LeaseholdError
from resources.rollup.aggregates import Value
from resources.rollup.state import KeyState, Removal

KEYS_PER_TRANSACTION = 99
"""DynamoDB's `TransactWriteItems` takes 100 items: 99 keys and the lease renewal."""


@dataclass(frozen=True)
class KeyWrite:
    """Write `state` for `key` (`REMOVAL`: delete its record) if the key's stored txid is still
    `expected_txid` (None: the key has no record)."""

    key: str
    expected_txid: int | None
    state: KeyState | Removal


@overload
def encode_value(value: Value) -> str: ...
@overload
def encode_value(value: None) -> None: ...
@overload
def encode_value(value: Value | None) -> str | None: ...
def encode_value(value: Value | None) -> str | None:
    """A value as both backends store it: JSON keeps ints ints and floats floats (DynamoDB's
    numbers would come back as `Decimal`)."""
    return None if value is None else json.dumps(list(value), separators=(",", ":"))


@overload
def decode_value(text: str) -> Value: ...
@overload
def decode_value(text: None) -> None: ...
@overload
def decode_value(text: str | None) -> Value | None: ...
def decode_value(text: str | None) -> Value | None:
    return None if text is None else tuple(json.loads(text))


class RollupKeyMovedError(LeaseholdError):
    """A key's stored txid was not the one read: the transaction wrote nothing; read again."""


class RollupLedger(ABC):
    """Where rollup state lives: one record per (rollup, dt, aggregate key) holding the last
    batch applied to it (its txid), implemented by each store beside the ledger and written
    only by `CoordinationStore.write_rollup_batch` under the rollup job's lease. Its errors
    are the store's: `StoreUnavailableError` (not reached within the bounded retry) and
    `StoreRefusedError` (refused for good), both `LeaseStoreError`s."""

    @abstractmethod
    def rollup_states(
        self, rollup: str, dt: str, keys: Sequence[str] | None = None
    ) -> dict[str, KeyState]:
        """The stored states of `keys` (all of the partition's when None), strongly
        consistent; a key without a record is absent from the result. Read-only. Raises the
        store's errors (`LeaseStoreError`)."""

    @abstractmethod
    def _write_rollup_keys(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        writes: Sequence[KeyWrite],
        lease_change: Transition,
    ) -> tuple[bool, LeaseItem | None]:
        """In ONE transaction, if `lease_change`'s guard holds and every key's stored txid is
        the write's `expected_txid`: write the states (delete the records of `REMOVAL`s) and
        apply `lease_change`. `(True, None)`
        when it went through; `(False, the lease item as stored)` when the guard refused
        (nothing written).
        Raises `RollupKeyMovedError` when only a key's condition failed (nothing written)."""

    @abstractmethod
    def forget_rollup(self, rollup: str, dt: str) -> int:
        """Delete the partition's records (a rollup rebuilt from scratch). Returns how many.
        Idempotent. Not fenced: the caller holds the rollup job's lease. Raises the store's
        errors (`LeaseStoreError`)."""
