"""A record id's identity in a key index: a 128-bit hash, computed for a whole column at once.

An id is hashed as its UTF-8 text (so 7 and "7" are one key within a column of one type) to two
64-bit words: `h1` orders an index, `h2` confirms a match. Two distinct ids of one 10⁸-key
index share both with a probability of about 10¹⁶ / 2¹²⁹ ≈ 1.5e-23, so the hash stands for the
id, as a content hash stands for content; comparing the ids themselves would keep every id
(40 bytes for a UUID) in the index instead of 16 bytes. A null id is no key: its row is never a
duplicate of anything.

Each index file records the hash it was built with (`KeyIndex.hash_name`), and rows resolved
against an index are hashed with that one, so an index written by one version of leasehold is
read by the next:
- `MIX128` (the default for a new index): each 8-byte little-endian word of the text, zero
  padded, is absorbed into two 64-bit lanes (multiply by an odd constant, xor, MurmurHash3's
  `fmix64` finaliser, a bijection), seeded by the text's length and finalised with it. It is
  computed in numpy over the Arrow array's own buffers, in blocks that stay in the CPU's cache:
  about 0.1 µs an id, five times faster than `SIPHASH`, which needs a Python string per id.
- `SIPHASH`: two keyed SipHash-2-4 digests (pandas' `hash_array`), the hash of indexes written
  before `MIX128`.
Neither is a defence against ids crafted to collide (both keys are public); a collision would
serve one of the two records, as a re-send.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from numpy.lib.stride_tricks import as_strided
from pandas.util import hash_array  # type: ignore[import-untyped]  # pandas ships no stubs

from resources.errors import LeaseholdError

MIX128 = "mix128:leasehold-keys-3"
SIPHASH = "siphash24x2:leasehold-keys-1/leasehold-keys-2"
HASH_NAME = MIX128
"""The hash a new key index is built with."""
_KEY_1 = "leasehold-keys-1"
_KEY_2 = "leasehold-keys-2"

_U = np.uint64
_FMIX_1, _FMIX_2 = _U(0xFF51AFD7ED558CCD), _U(0xC4CEB9FE1A85EC53)
_MUL_A, _MUL_B, _MUL_LEN = _U(0x9E3779B97F4A7C15), _U(0xA0761D6478BD642F), _U(0xD6E8FEB86659FD93)
_SEED_A, _SEED_B = _U(0x6C65617365686F6C), _U(0x64206B6579732033)
_SHIFT = _U(33)
_BYTE_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], np.uint64)
"""`_BYTE_MASKS[k]` keeps the low k bytes of a word (k = 0..8)."""
_BLOCK = 1 << 15
"""Ids hashed at a time: a block's arrays (a few hundred KB) stay in cache between steps."""


class UnknownHashError(LeaseholdError):
    """A key index built with a hash this version of leasehold does not know."""


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


def hash_ids(ids: pa.Array | pa.ChunkedArray, name: str = HASH_NAME) -> KeyHashes:
    """The hashes of `ids` (any type: an id is hashed as its text) under the hash `name`. Pure;
    raises `UnknownHashError` for a name not in `HASHES`, nothing for any input."""
    digest = HASHES.get(name)
    if digest is None:
        raise UnknownHashError(f"a key index hashed with {name!r}, which this version lacks")
    if isinstance(ids, pa.ChunkedArray):
        ids = ids.combine_chunks() if ids.num_chunks else pa.array([], pa.string())
    if not (pa.types.is_string(ids.type) or pa.types.is_large_string(ids.type)):
        ids = pc.cast(ids, pa.string())
    present = ids.is_valid().to_numpy(zero_copy_only=False)
    if not len(ids):
        empty = np.zeros(0, np.uint64)
        return KeyHashes(empty, empty.copy(), np.zeros(0, bool))
    h1, h2 = digest(ids)
    h1[~present] = 0
    h2[~present] = 0
    return KeyHashes(h1, h2, present)


def _siphash(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    values = text.fill_null("").to_numpy(zero_copy_only=False)
    h1 = hash_array(values, encoding="utf8", hash_key=_KEY_1, categorize=False)
    h2 = hash_array(values, encoding="utf8", hash_key=_KEY_2, categorize=False)
    return h1.astype(np.uint64), h2.astype(np.uint64)


def _mix128(text: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    n = len(text)
    _, offsets_buffer, data_buffer = text.buffers()
    wide = pa.types.is_large_string(text.type)
    width = 8 if wide else 4
    offsets = np.frombuffer(
        offsets_buffer, np.int64 if wide else np.int32, count=n + 1, offset=text.offset * width
    )
    data = np.zeros(0, np.uint8) if data_buffer is None else np.frombuffer(data_buffer, np.uint8)
    h1, h2 = np.empty(n, np.uint64), np.empty(n, np.uint64)
    with np.errstate(over="ignore"):
        for lo in range(0, n, _BLOCK):
            hi = min(n, lo + _BLOCK)
            bounds = offsets[lo : hi + 1].astype(np.int64)
            _mix_block(data, bounds[:-1], bounds[1:] - bounds[:-1], h1[lo:hi], h2[lo:hi])
    return h1, h2


def _mix_block(
    data: np.ndarray, start: np.ndarray, length: np.ndarray, a: np.ndarray, b: np.ndarray
) -> None:
    """`MIX128` of the texts `data[start:start+length]`, into the lanes `a` and `b`."""
    words = (length + 7) >> 3
    text_length = length.astype(np.uint64)
    np.multiply(text_length, _MUL_LEN, out=a)
    a ^= _SEED_A
    np.multiply(text_length, _MUL_A, out=b)
    b ^= _SEED_B
    scratch, x = np.empty(len(a), np.uint64), np.empty(len(a), np.uint64)
    fewest = int(words.min())
    for j in range(int(words.max())):
        w = _words_at(data, start + 8 * j)
        if not bool(np.all(length >= 8 * (j + 1))):
            w &= _BYTE_MASKS[np.clip(length - 8 * j, 0, 8)]
        active = None if j < fewest else words > j  # a text absorbs only its own words
        for lane, mul in ((a, _MUL_A), (b, _MUL_B)):
            np.multiply(w, mul, out=x)
            x ^= lane
            _fmix(x, scratch)
            np.copyto(lane, x, where=True if active is None else active)
    a ^= text_length
    _fmix(a, scratch)
    b ^= a
    _fmix(b, scratch)


def _fmix(h: np.ndarray, scratch: np.ndarray) -> None:
    """MurmurHash3's 64-bit finaliser, in place."""
    for mul in (_FMIX_1, _FMIX_2):
        np.right_shift(h, _SHIFT, out=scratch)
        h ^= scratch
        h *= mul
    np.right_shift(h, _SHIFT, out=scratch)
    h ^= scratch


def _words_at(data: np.ndarray, at: np.ndarray) -> np.ndarray:
    """The little-endian 8-byte words of `data` starting at the byte positions `at`, bytes past
    its end read as zeros."""
    n = len(data)
    out = np.zeros(len(at), np.uint64)
    inside = at <= n - 8
    if n >= 8:
        every: np.ndarray = as_strided(data, shape=(n - 7, 8), strides=(1, 1)).view("<u8")[:, 0]
        if bool(inside.all()):
            words: np.ndarray = every[at]
            return words
        out[inside] = every[at[inside]]
    tail_start = max(0, n - 8)
    tail = np.zeros(16, np.uint8)
    tail[: n - tail_start] = data[tail_start:]
    tail_words = as_strided(tail, shape=(9, 8), strides=(1, 1)).view("<u8")[:, 0]
    rest = ~inside
    out[rest] = tail_words[np.clip(at[rest] - tail_start, 0, 8)]
    return out


HASHES: dict[str, Callable[[pa.Array], tuple[np.ndarray, np.ndarray]]] = {
    MIX128: _mix128,
    SIPHASH: _siphash,
}
"""Every hash a key index may have been built with, by the name it records."""
