"""`RetractedKeys`: the keys replacements took out of a table partition (`on_change: replace`),
kept beside a publication's key index as `retracted.arrow` so that the `unique_record_ids`
check knows which ids its ledger files hold are rightly served by no row.

A key is here once a replacement retracted a row of it that the date served or was about to;
it stays (a set only grows) — a key served again by the new content is served, so the check
does not ask. 16 bytes a key, written only by dates a replacement touched. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from resources.dedupe.keys import HASH_NAME, KeyHashes, hash_ids
from resources.errors import LeaseholdError

RETRACTED_NAME = "retracted.arrow"
_HASH_KEY = b"leasehold.hash"


class RetractedKeysError(LeaseholdError):
    """Bytes that are not what `RetractedKeys.to_bytes` wrote."""


@dataclass(frozen=True)
class RetractedKeys:
    """Key hashes (uint64 pairs, sorted and unique) under the hash `hash_name`."""

    h1: np.ndarray
    h2: np.ndarray
    hash_name: str = HASH_NAME

    @classmethod
    def empty(cls, hash_name: str = HASH_NAME) -> RetractedKeys:
        return cls(np.zeros(0, np.uint64), np.zeros(0, np.uint64), hash_name)

    def __len__(self) -> int:
        return len(self.h1)

    def with_keys(self, h1: np.ndarray, h2: np.ndarray) -> RetractedKeys:
        """These and the keys `(h1, h2)`."""
        pairs = np.unique(
            np.stack([np.concatenate([self.h1, h1]), np.concatenate([self.h2, h2])], axis=1)
            .astype(np.uint64)
            .reshape(-1, 2),
            axis=0,
        )
        return RetractedKeys(pairs[:, 0].copy(), pairs[:, 1].copy(), self.hash_name)

    def holds(self, ids: pa.Array | pa.ChunkedArray) -> np.ndarray:
        """Per id of `ids`, whether its key is here (never a null id)."""
        keys: KeyHashes = hash_ids(ids, self.hash_name)
        mine = set(zip(self.h1.tolist(), self.h2.tolist(), strict=True))
        out = np.zeros(len(keys), bool)
        for i in np.nonzero(keys.present & np.isin(keys.h1, self.h1))[0]:
            out[i] = (int(keys.h1[i]), int(keys.h2[i])) in mine
        return out

    def to_bytes(self) -> bytes:
        schema = pa.schema(
            [("h1", pa.uint64()), ("h2", pa.uint64())], metadata={_HASH_KEY: self.hash_name}
        )
        table = pa.table([pa.array(self.h1), pa.array(self.h2)], schema=schema)
        sink = pa.BufferOutputStream()
        with pa.ipc.new_file(sink, schema) as writer:
            writer.write_table(table)
        data: bytes = sink.getvalue().to_pybytes()
        return data

    @classmethod
    def from_bytes(cls, data: bytes) -> RetractedKeys:
        """What `to_bytes` wrote. Raises `RetractedKeysError` otherwise."""
        try:
            table = pa.ipc.open_file(pa.BufferReader(data)).read_all()
            name = (table.schema.metadata or {}).get(_HASH_KEY, HASH_NAME.encode()).decode()
            h1 = table.column("h1").to_numpy().astype(np.uint64)
            h2 = table.column("h2").to_numpy().astype(np.uint64)
        except (pa.ArrowInvalid, KeyError, OSError) as exc:
            raise RetractedKeysError(f"not a set of retracted keys: {exc}") from exc
        return cls(h1, h2, name)
