"""The pure publication rules both backends and the publisher rely on: when a partition is due
and as what, when it may switch, which records garbage collection must keep, and which files a
manifest lists (docs/architecture.md)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from resources.errors import LeaseholdError
from resources.ledger.merge import MergeRange
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.publication import (
    LIVE,
    MAX_UNRECORDED_AGE_MS,
    MERGED,
    DataFile,
    Publication,
    StalePublicationError,
    check_publication,
    current_data_files,
    current_version,
    live_files,
    live_upper,
    merged_files,
    publication_due,
    retained,
    switch_ready,
)

TABLE, DT = "events", "2026-01-01"


def partition(
    next_id: int,
    *,
    last_live: int | None = None,
    merged_upper: int = 0,
    published: tuple[bool, int] | None = None,
) -> TablePartition:
    """A partition with `next_id - 1` committed ids; `published` its current version."""
    switched, upper = published or (False, 0)
    return TablePartition(
        TABLE,
        DT,
        next_id,
        last_live_object_id=last_live,
        current_manifest_version=-1 if published is None else (upper if switched else 0),
        desired_manifest_version=merged_upper or -1,
        switched=switched,
        merged_upper=merged_upper,
        published_upper=upper,
        publication_seq=0 if published is None else 1,
    )


def publication(upper: int, *, switched: bool = False, seq: int = 0, at: int = 0) -> Publication:
    return Publication(TABLE, DT, seq, switched, upper, f"m/{upper}/", upper, upper, upper, at)


@pytest.mark.parametrize(
    ("tp", "due"),
    [
        (partition(1), None),  # nothing committed
        (partition(3), LIVE),  # committed, never published
        (partition(3, published=(False, 2)), None),  # live and up to date
        (partition(4, published=(False, 2)), LIVE),  # ids past the live manifest
        (partition(3, last_live=2), LIVE),  # closed, never merged: never switches
        (partition(3, last_live=2, published=(False, 2)), None),
        (partition(4, last_live=3, merged_upper=2, published=(False, 3)), None),  # not covered
        (partition(4, last_live=3, merged_upper=2, published=(False, 2)), LIVE),
        (partition(4, last_live=3, merged_upper=3, published=(False, 3)), MERGED),  # the switch
        (partition(4, last_live=3, merged_upper=3), MERGED),  # switches on first publication
        (partition(4, merged_upper=3, published=(False, 3)), None),  # open: no switch
        (partition(6, last_live=3, merged_upper=5, published=(True, 3)), MERGED),  # republish
        (partition(6, last_live=3, merged_upper=5, published=(True, 5)), None),
        (partition(8, last_live=3, merged_upper=5, published=(True, 5)), None),  # delayed wait
        (partition(6, last_live=3), LIVE),  # closed, delayed 4..5: live up to 3 only
        (partition(6, last_live=3, merged_upper=2, published=(False, 3)), None),  # delayed wait
    ],
)
def test_publication_due(tp: TablePartition, due: str | None) -> None:
    assert publication_due(tp) == due


def test_switch_ready_needs_closed_merged_and_covered() -> None:
    assert not switch_ready(partition(4, merged_upper=3))  # open
    assert not switch_ready(partition(1, last_live=0))  # closed empty: never merged
    assert not switch_ready(partition(4, last_live=3, merged_upper=2))
    assert switch_ready(partition(4, last_live=3, merged_upper=3))
    assert switch_ready(partition(6, last_live=3, merged_upper=5))  # delayed ones merged too


def test_a_live_publication_never_covers_a_delayed_id() -> None:
    """Else the switch, which only has to cover the live ids, could follow a live manifest
    naming delayed objects its chain does not reach yet: their records would vanish."""
    assert live_upper(partition(6)) == 5  # open: every committed id
    closed = partition(6, last_live=3, merged_upper=2, published=(False, 2))
    assert live_upper(closed) == 3
    check_publication(closed, publication(3))
    with pytest.raises(LeaseholdError, match=r"outside 1\.\.3"):
        check_publication(closed, publication(5))


def test_version_orders_switched_above_any_live() -> None:
    assert current_version(partition(3)) is None
    assert current_version(partition(3, published=(False, 2))) == (False, 2)
    assert publication(9).version < publication(1, switched=True).version
    assert publication(9).manifest_version == 0
    assert publication(4, switched=True).manifest_version == 4


def test_check_publication_refuses_stale_and_out_of_bounds() -> None:
    check_publication(partition(3), publication(2))
    live = partition(4, merged_upper=2, published=(False, 2))
    with pytest.raises(StalePublicationError) as stale:
        check_publication(live, publication(2))
    assert stale.value.current == (False, 2)
    check_publication(live, publication(3))
    check_publication(live, publication(2, switched=True))
    with pytest.raises(StalePublicationError, match="older chain"):
        # a merge moved the chain's end past it: it may list a superseded merged object
        check_publication(live, publication(1, switched=True))
    for tp, bad in (
        (live, publication(4)),
        (live, publication(3, switched=True)),
        (partition(3), publication(0)),
        (partition(3), publication(1, switched=True)),  # never merged
    ):
        with pytest.raises(LeaseholdError, match="outside") as error:
            check_publication(tp, bad)
        assert not isinstance(error.value, StalePublicationError)
    with pytest.raises(LeaseholdError, match="no such table partition"):
        check_publication(None, publication(1))
    switched = partition(6, last_live=3, merged_upper=5, published=(True, 3))
    with pytest.raises(StalePublicationError):
        check_publication(switched, publication(5))
    check_publication(switched, publication(5, switched=True))


def test_retained_keeps_the_current_and_those_superseded_within_the_delay() -> None:
    delay = 1000
    history = [
        publication(1, seq=1, at=0),
        publication(2, seq=2, at=5000),  # superseded at 8500
        publication(3, seq=3, at=8500),  # superseded at 9500
        publication(4, seq=4, at=9500),
    ]
    assert retained([], 10_000, delay) == []
    assert retained(history[:1], 10_000, delay) == history[:1]
    assert retained(list(reversed(history)), 10_000, delay) == history[2:]
    assert retained(history, 9400, delay) == history[1:]  # seq 2 superseded 900 ms ago
    assert retained(history, 9500, delay) == history[2:]  # ... and now exactly the delay ago
    assert retained(history, 20_000, delay) == history[3:]


def test_live_files_are_the_small_objects_up_to_upper_by_id() -> None:
    objects = [registered(i) for i in (3, 1, 4, 2)]
    assert live_files(objects, 3) == [file(f"s{i}", i) for i in (1, 2, 3)]
    assert live_files(objects, 0) == []


def test_merged_files_skip_the_sentinel_by_upper() -> None:
    ranges = [merge_range(3, 5), merge_range(None, 0), merge_range(0, 3)]
    assert merged_files(ranges) == [file("m3", 3), file("m5", 5)]
    assert merged_files([merge_range(None, 0)]) == []


def test_current_data_files_are_every_committed_row_once() -> None:
    objects = [registered(i) for i in range(1, 8)]
    ranges = [merge_range(None, 0), merge_range(0, 3), merge_range(3, 5)]
    expected = [file("m3", 3), file("m5", 5), file("s6", 6), file("s7", 7)]
    assert current_data_files(objects, ranges) == expected
    assert current_data_files(objects[:3], []) == [file(f"s{i}", i) for i in (1, 2, 3)]


def registered(object_id: int) -> RegisteredObject:
    return RegisteredObject(
        TABLE, DT, object_id, f"s{object_id}", object_id, object_id, "src", "k", 1, False
    )


def merge_range(lower: int | None, upper: int) -> MergeRange:
    if lower is None:
        return MergeRange(TABLE, DT, None, 0, None, 0, 0, 0, 0)
    return MergeRange(TABLE, DT, lower, upper, f"m{upper}", upper, upper, 1, 0)


def file(url: str, n: int) -> DataFile:
    return DataFile(url, n, n)


def test_a_version_written_too_long_ago_is_refused() -> None:
    """A publisher paused between writing its manifests and recording them must not make a
    version current whose manifests garbage collection may already have taken."""
    tp = partition(3)
    written = replace(publication(2), written_at_ms=1_000)
    check_publication(tp, written, now_ms=1_000 + MAX_UNRECORDED_AGE_MS)
    with pytest.raises(StalePublicationError, match="was written"):
        check_publication(tp, written, now_ms=1_000 + MAX_UNRECORDED_AGE_MS + 1)
    check_publication(tp, publication(2), now_ms=10**12)  # not said: not judged


def test_a_revision_is_of_the_current_publication_at_its_version() -> None:
    live = partition(6, published=(False, 5))  # its current publication is seq 1
    revision = replace(publication(5), revises=1)
    check_publication(live, revision)
    # A revision of a publication that is no longer current (another revision or a newer
    # version was recorded since) is stale, as a version not newer than the current one is.
    later = replace(live, publication_seq=2)
    with pytest.raises(StalePublicationError, match="revises publication 1, but the current"):
        check_publication(later, revision)
    with pytest.raises(StalePublicationError):
        check_publication(partition(6), revision)  # never published
    # At another version it is a bug, never recorded.
    with pytest.raises(LeaseholdError, match="not its"):
        check_publication(live, replace(publication(4), revises=1))
    # A merged revision lists the current chain, as any merged publication must.
    switched = partition(6, last_live=5, merged_upper=5, published=(True, 5))
    check_publication(switched, replace(publication(5, switched=True), revises=1))
    moved = replace(switched, merged_upper=6)
    with pytest.raises(StalePublicationError, match="older chain"):
        check_publication(moved, replace(publication(5, switched=True), revises=1))
    # Without `revises` the same version is stale, as before.
    with pytest.raises(StalePublicationError):
        check_publication(live, publication(5))
