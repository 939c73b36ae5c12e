"""A record id's identity in a key index: a 128-bit hash, computed for a whole column at once.

Two keyed SipHash-2-4 digests (pandas' `hash_array`, vectorised in C) of the id's UTF-8 text
make 128 bits: `h1` orders the index, `h2` confirms a match. Two distinct ids of one 10⁸-key
index share both with a probability of about 10⁸² / 2¹²⁹ ≈ 1.5e-23, so the hash stands for the
id, as a content hash stands for content; comparing the ids themselves would keep every id
(40 bytes for a UUID) in the index instead of 16 bytes. The keys are fixed: an index written
by one version of leasehold is read by the next (`HASH_NAME` is recorded in each index file).
A null id is no key: its row is never a duplicate of anything.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pandas.util import hash_array  # type: ignore[import-untyped]  # pandas ships no stubs

HASH_NAME = "siphash24x2:leasehold-keys-1/leasehold-keys-2"
_KEY_1 = "leasehold-keys-1"
_KEY_2 = "leasehold-keys-2"


@dataclass(frozen=True)
class KeyHashes:
    """The 128-bit hashes of a column's ids, row by row, and which rows hold an id at all."""

    h1: np.ndarray
    """uint64, one per row (0 where the id is null)."""
    h2: np.ndarray
    present: np.ndarray
    """bool: the row's id is not null."""

    def __len__(self) -> int:
        return len(self.h1)


def hash_ids(ids: pa.Array | pa.ChunkedArray) -> KeyHashes:
    """The hashes of `ids` (any type: an id is hashed as its text, so 7 and "7" are one key
    within a column of one type). Pure; raises nothing for any input."""
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.string())
    present = ids.is_valid().to_numpy(zero_copy_only=False)
    text = ids if pa.types.is_string(ids.type) else pc.cast(ids, pa.string())
    values = text.fill_null("").to_numpy(zero_copy_only=False)
    if not len(values):
        empty = np.zeros(0, np.uint64)
        return KeyHashes(empty, empty.copy(), np.zeros(0, bool))
    h1 = hash_array(values, encoding="utf8", hash_key=_KEY_1, categorize=False)
    h2 = hash_array(values, encoding="utf8", hash_key=_KEY_2, categorize=False)
    h1[~present] = 0
    h2[~present] = 0
    return KeyHashes(h1.astype(np.uint64), h2.astype(np.uint64), present)
