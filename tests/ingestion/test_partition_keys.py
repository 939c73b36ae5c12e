"""Source keys <-> Dagster partition keys: reversible, injective, and free of Dagster's traps."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from resources.ingestion.partition_keys import from_partition_key, to_partition_key

# Pieces, not characters, so runs of dots and escape-like sequences ("%2E") come up often.
awkward = st.lists(
    st.one_of(
        st.sampled_from([" ", ".", "..", "...", ",", "|", "[", "]", "%", "%2E", "/", "…"]),
        st.characters(),
    ),
    min_size=1,
    max_size=40,
).map("".join)


@given(awkward)
def test_round_trip_and_no_traps(key: str) -> None:
    encoded = to_partition_key(key)
    assert from_partition_key(encoded) == key
    assert encoded and "..." not in encoded and "|" not in encoded


@given(awkward, awkward)
def test_injective(a: str, b: str) -> None:
    if a != b:
        assert to_partition_key(a) != to_partition_key(b)


@pytest.mark.parametrize(
    ("key", "encoded"),
    [
        ("2026/01/01/a b,c.json", "2026/01/01/a b,c.json"),  # readable: left alone
        ("bucket|key", "bucket%7Ckey"),
        ("x...y", "x..%2Ey"),
        ("100%", "100%25"),
        ("日本語", "日本語"),
    ],
)
def test_examples(key: str, encoded: str) -> None:
    assert to_partition_key(key) == encoded


def test_empty_key_is_refused() -> None:
    with pytest.raises(ValueError):
        to_partition_key("")


def test_bad_keys_are_leasehold_errors() -> None:
    from resources.errors import LeaseholdError
    from resources.ingestion.partition_keys import PartitionKeyError

    with pytest.raises(PartitionKeyError):
        to_partition_key("")
    with pytest.raises(LeaseholdError, match="not a partition key leasehold wrote"):
        from_partition_key("a%FFb")  # an escape to_partition_key never writes
