"""Storm's rules on one key's state: whatever the failures, the state equals a from-scratch
aggregation of what the batches finally hold.

Each batch is attempted until one attempt writes all its keys; an attempt that dies has written
some of its keys (one store transaction per key here: the worst split). Transactional attempts
of a batch hold the same rows; opaque attempts may hold other rows each (the last one's are
the batch's), and an opaque attempt writes the keys of every earlier attempt of its batch too
(`replay_partials`)."""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from resources.errors import ConfigError
from resources.rollup.aggregates import Aggregate, Function, identity, of_rows
from resources.rollup.state import (
    REMOVAL,
    KeyState,
    Mode,
    apply_batch,
    apply_served,
    replay_partials,
)

AGGREGATES = (
    Aggregate("events", Function.COUNT),
    Aggregate("amount", Function.SUM, "amount"),
    Aggregate("smallest", Function.MIN, "amount"),
    Aggregate("largest", Function.MAX, "amount"),
)
KEYS = ["u1", "u2", "u3", "u4"]

rows = st.lists(
    st.fixed_dictionaries({"key": st.sampled_from(KEYS), "amount": st.integers(-50, 50)}),
    max_size=8,
)


@st.composite
def attempts_of_a_batch(draw: st.DrawFn, mode: Mode) -> list[tuple[list[dict], int | None]]:
    """(rows, keys written before the writer died; None: it wrote them all), the last one
    complete."""
    final = draw(rows)
    failed = draw(st.integers(0, 3))
    out = []
    for _ in range(failed):
        contents = final if mode is Mode.TRANSACTIONAL else draw(rows)
        out.append((contents, draw(st.integers(0, len(KEYS)))))
    out.append((final, None))
    return out


def partials_of(contents: list[dict]) -> dict[str, tuple]:
    by_key: dict[str, list[dict]] = defaultdict(list)
    for row in contents:
        by_key[row["key"]].append(row)
    return {k: of_rows(AGGREGATES, rs) for k, rs in by_key.items()}


def run(mode: Mode, batches: list[list[tuple[list[dict], int | None]]], order: list[str]):
    state: dict[str, KeyState] = {}
    for txid, attempts in enumerate(batches, start=1):
        earlier: set[str] = set()
        for contents, dies_after in attempts:
            partials = partials_of(contents)
            if mode is Mode.OPAQUE:
                partials = replay_partials(AGGREGATES, partials, earlier)
                earlier |= set(partials)
            keys = [k for k in order if k in partials]
            for written, key in enumerate(keys):
                if dies_after is not None and written == dies_after:
                    break
                new = apply_batch(mode, AGGREGATES, state.get(key), txid, partials[key])
                if new is not None:
                    state[key] = new
    return state


def from_scratch(batches: list[list[tuple[list[dict], int | None]]]) -> dict[str, tuple]:
    final_rows = [row for attempts in batches for row in attempts[-1][0]]
    return partials_of(final_rows)


def shown(state: dict[str, KeyState]) -> dict[str, tuple]:
    """What a reader sees: a key whose rows all left it (opaque) holds the identity."""
    return {k: s.value for k, s in state.items() if s.value != identity(AGGREGATES)}


@pytest.mark.parametrize("mode", list(Mode))
@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_the_state_equals_a_from_scratch_aggregation_after_any_failures(
    mode: Mode, data: st.DataObject
) -> None:
    batches = data.draw(st.lists(attempts_of_a_batch(mode), min_size=1, max_size=5))
    order = data.draw(st.permutations(KEYS))
    assert shown(run(mode, batches, order)) == from_scratch(batches)


def test_transactional_skips_a_batch_the_key_holds() -> None:
    one = of_rows(AGGREGATES, [{"amount": 5}])
    first = apply_batch(Mode.TRANSACTIONAL, AGGREGATES, None, 7, one)
    assert first == KeyState(7, (1, 5, 5, 5))
    assert apply_batch(Mode.TRANSACTIONAL, AGGREGATES, first, 7, one) is None
    assert apply_batch(Mode.TRANSACTIONAL, AGGREGATES, first, 8, one) == KeyState(8, (2, 10, 5, 5))


def test_opaque_recomputes_a_replay_from_the_value_before_the_batch() -> None:
    before = KeyState(3, (2, 10, 4, 6), None)
    attempt = apply_batch(Mode.OPAQUE, AGGREGATES, before, 4, of_rows(AGGREGATES, [{"amount": 1}]))
    assert attempt == KeyState(4, (3, 11, 1, 6), (2, 10, 4, 6))
    # The replay holds other rows: the first attempt's row is gone, not counted twice.
    replay = apply_batch(Mode.OPAQUE, AGGREGATES, attempt, 4, of_rows(AGGREGATES, [{"amount": 9}]))
    assert replay == KeyState(4, (3, 19, 4, 9), (2, 10, 4, 6))


@pytest.mark.parametrize("mode", list(Mode))
def test_a_batch_older_than_the_keys_is_never_applied(mode: Mode) -> None:
    """A writer that lost its lease replaying an old batch after later ones committed."""
    later = KeyState(9, (1, 5, 5, 5), (0, 0, None, None) if mode is Mode.OPAQUE else None)
    assert apply_batch(mode, AGGREGATES, later, 8, (1, 1, 1, 1)) is None


def test_an_aggregate_says_which_column_it_needs() -> None:
    with pytest.raises(ConfigError, match="total: sum needs a column"):
        Aggregate("total", Function.SUM)
    with pytest.raises(ConfigError, match="rows: count takes no column"):
        Aggregate("rows", Function.COUNT, "amount")


def test_an_opaque_replay_under_a_new_txid_recomputes_the_earlier_attempts_keys() -> None:
    before = KeyState(3, (1, 5, 5, 5))
    attempt = apply_batch(Mode.OPAQUE, AGGREGATES, before, 4, (1, 7, 7, 7))
    assert attempt == KeyState(4, (2, 12, 5, 7), (1, 5, 5, 5))
    replay = apply_batch(Mode.OPAQUE, AGGREGATES, attempt, 6, (2, 3, 1, 2), earlier=[4])
    assert replay == KeyState(6, (3, 8, 1, 5), (1, 5, 5, 5))  # from prev_value, not value
    # Without naming the attempt, the replay would count its rows twice.
    assert apply_batch(Mode.OPAQUE, AGGREGATES, attempt, 6, (2, 3, 1, 2)) == KeyState(
        6, (4, 15, 1, 7), (2, 12, 5, 7)
    )
    with pytest.raises(ValueError):
        apply_batch(Mode.TRANSACTIONAL, AGGREGATES, before, 6, (1, 1, 1, 1), earlier=[4])


def test_a_served_value_is_set_not_combined_and_a_key_no_row_has_is_removed() -> None:
    held = KeyState(5, (2, 10, 3, 7))
    assert apply_served(held, 9, (1, 4, 4, 4)) == KeyState(9, (1, 4, 4, 4))
    assert apply_served(held, 9, None) is REMOVAL
    assert apply_served(None, 9, None) is None  # nothing held, nothing served
    assert apply_served(held, 5, (1, 4, 4, 4)) is None  # a replay of the same publication
    assert apply_served(held, 3, (1, 4, 4, 4)) is None  # an older publication's value
    assert apply_served(None, 9, (1, 4, 4, 4)) == KeyState(9, (1, 4, 4, 4))
