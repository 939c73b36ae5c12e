"""Argsorts of integers as numpy sorts plain integers: with SIMD, where its argsort has none
(several times slower at 10⁶ rows and more). Each packs a row's position into the low bits of
a 64-bit word beside (part of) its value, sorts the words, and reads the positions back. Pure.
"""

from __future__ import annotations

import numpy as np

SMALL_BITS = 32
"""`stable_argsort_small`'s values and positions: each below 2³²."""


def stable_argsort(h1: np.ndarray) -> np.ndarray:
    """`np.argsort(h1, kind="stable")` of uint64 hashes in about 60 % of its time at 10⁷ rows:
    numpy sorts plain integers with SIMD but an argsort without, so it sorts words of h1's high
    bits over the position, then orders each run of equal high bits (equal keys, and about
    n²/2⁶⁵⁻ᵇ pairs of distinct ones for n < 2ᵇ rows) by (h1, position). Pure."""
    n = len(h1)
    bits = max(1, (n - 1).bit_length())
    mask = np.uint64((1 << bits) - 1)
    words = (h1 & ~mask) | np.arange(n, dtype=np.uint64)
    words.sort()
    by: np.ndarray = (words & mask).astype(np.int64)
    tied = (words[1:] >> np.uint64(bits)) == (words[:-1] >> np.uint64(bits))
    if tied.any():
        in_run = np.zeros(n, bool)
        in_run[1:] |= tied
        in_run[:-1] |= tied
        at = np.nonzero(in_run)[0]
        run = by[at]  # runs in order of their high bits, which (h1, position) keeps
        by[at] = run[np.lexsort((run, h1[run]))]
    return by


def stable_argsort_small(values: np.ndarray) -> np.ndarray:
    """`np.argsort(values, kind="stable")` of non-negative integers below 2³², at most 2³²
    of them: each value beside its position in one word. Raises `ValueError` outside that."""
    n = len(values)
    if n > 1 << SMALL_BITS or (n and (int(values.min()) < 0 or int(values.max()) >> SMALL_BITS)):
        raise ValueError(f"{n:,} values, not all non-negative integers below 2**{SMALL_BITS}")
    words = (values.astype(np.uint64) << np.uint64(SMALL_BITS)) | np.arange(n, dtype=np.uint64)
    words.sort()
    by: np.ndarray = (words & np.uint64((1 << SMALL_BITS) - 1)).astype(np.int64)
    return by
