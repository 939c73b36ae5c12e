"""A replacement (`on_change: replace`) as the publisher and merges see it, on both backends:
the new content's rows and a retraction marker on every date it touches committed in one
transaction; the earlier content's rows leave their dates in the same publication as the new
content joins its own — held back together while one of the dates is closed and its merge has
not taken the marker yet — and recorded in one store transaction; a merge of a range holding
both contents keeps the new one (under `first` the earlier would otherwise win); the
`unique_record_ids` check knows the retracted keys."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from functools import partial

import pyarrow.parquet as pq
import pytest

from resources.dedupe.key_index import row_ids
from resources.ingestion.check_suite import unique_record_ids
from resources.key_settings import DATE, FIRST, LATEST, DedupeSettings
from resources.ledger.model import RegisteredObject
from resources.ledger.retraction_marker import (
    Retraction,
    contributed_spans,
    marker_sources,
    retraction_of,
)
from resources.objects.base import ObjectInfo, ObjectStoreError
from resources.publication.outcome import PUBLISHED, UP_TO_DATE
from resources.publication.publication_state import served_and_sources
from resources.publication.retraction import retracted_rows
from tests.publication.conftest import (
    DT,
    World,
    commit_keyed,
    commit_replacement,
    content,
    served_by_date,
)
from tests.support.merge_child import TABLE

D2 = "2027-01-16"


def check(world: World) -> bool:
    outcome = unique_record_ids(
        world.store, TABLE, "event_id", world.objects.read_column,
        served_urls=partial(served_and_sources, world.objects),
    )  # fmt: skip
    assert outcome.passed, outcome.summary
    return True


def test_markers_round_trip_and_name_the_rows_to_retract() -> None:
    r = Retraction("k@etag:2", ("2027-01-15", "2027-01-16"), "u", "f.jsonl", True)
    assert retraction_of(marker_sources(r)) == r
    assert retraction_of((("f.jsonl", 3),)) is None
    rows, mark = (("g", 2), ("f.jsonl", 3)), marker_sources(r)
    objects = [
        RegisteredObject(TABLE, DT, 1, "file:///1", 1, 5, "s", "u", 1, False, sources=rows),
        RegisteredObject(TABLE, DT, 2, "file:///2", 1, 0, "s", r.group, 1, False, sources=mark),
    ]
    assert contributed_spans(objects, "u", "f.jsonl", only_object=False) == {1: [(2, 5)]}
    assert retracted_rows(objects, 0, 2).tolist() == row_ids(1, 5)[2:].tolist()
    assert retracted_rows(objects, 2, 2).tolist() == []  # the marker is below the range


@pytest.mark.parametrize("mode", [FIRST, LATEST])
def test_a_replacement_is_published_with_all_its_dates_once_the_closed_one_is_merged(
    world: World, mode: str
) -> None:
    order_by = "amount" if mode == LATEST else None
    world.config = replace(
        world.config, dedupe=DedupeSettings(mode, order_by, DATE), on_change="replace"
    )
    commit_keyed(
        world, DT, "old", ["x", "y", "z"], ["x0", "y0", "z0"], [1.0] * 3, sources=(("f.jsonl", 3),)
    )
    commit_keyed(world, DT, "other", ["q"], ["q0"], [1.0])
    publisher = world.publisher()
    assert publisher.publish_one(DT).ok
    world.merge()
    world.close()
    assert publisher.publish_one(DT).switched_now
    assert sorted(u for _, _, u in served_by_date(world, {DT})) == ["q0", "x0", "y0", "z0"]

    # f.jsonl rewritten: y and w, on the next day. One transaction: content and markers.
    commit_replacement(world, content(world, D2, "new", ["y", "w"], ["y1", "w1"]), DT)
    # DT is closed: its marker waits for a merge; D2's new rows wait with it.
    (held,) = publisher.publish([D2])
    assert held.outcome == UP_TO_DATE and "held back" in held.message, held
    assert sorted(u for _, _, u in served_by_date(world, {DT})) == ["q0", "x0", "y0", "z0"]
    assert publisher.due() == []  # the sensor asks for no run that would publish nothing
    switched: list[str] = []
    world.merge()
    assert publisher.due() == [DT, D2]
    outcomes = world.publisher(
        lambda step, dt: switched.append(dt) if step == "cataloged" else None
    ).publish([D2])
    assert [(o.dt, o.outcome) for o in outcomes] == [(D2, PUBLISHED), (DT, PUBLISHED)]
    assert sorted(switched) == [DT, D2]  # one switch of both
    assert served_by_date(world, {DT, D2}) == [("q", DT, "q0"), ("w", D2, "w1"), ("y", D2, "y1")]
    assert check(world)
    # A later publication carries the retracted keys forward.
    commit_keyed(world, D2, "later", ["v"], ["v0"], [1.0])
    assert publisher.publish_one(D2).outcome == PUBLISHED
    assert check(world)


@pytest.mark.parametrize("listing", ["lists", "fails"])
def test_due_reads_the_ledger_of_the_dates_holding_a_marker_only(
    world: World, monkeypatch: pytest.MonkeyPatch, listing: str
) -> None:
    """A backfill's due dates cost one listing of the markers, not store reads each; a failed
    listing reads every due date, and the answer is the same."""
    world.config = replace(
        world.config, dedupe=DedupeSettings(FIRST, None, DATE), on_change="replace"
    )
    others = [f"2027-02-{day:02d}" for day in range(1, 7)]
    for i, dt in enumerate(others):
        commit_keyed(world, dt, f"o{i}", [f"k{i}"], ["u"], [1.0])
    commit_keyed(world, DT, "old", ["x"], ["x0"], [1.0], sources=(("f.jsonl", 1),))
    commit_replacement(world, content(world, D2, "new", ["x"], ["x1"]), DT)
    if listing == "fails":

        def fail(prefix: str) -> Iterator[ObjectInfo]:
            raise ObjectStoreError("the listing is down")

        monkeypatch.setattr(world.objects, "list_prefix", fail)
    read: list[str] = []
    ledger_objects = world.store.ledger_objects

    def spied(table: str, dt: str) -> list[RegisteredObject]:
        read.append(dt)
        return ledger_objects(table, dt)

    monkeypatch.setattr(world.store, "ledger_objects", spied)
    assert world.publisher().due() == sorted([DT, D2, *others])
    assert set(read) == ({DT, D2, *others} if listing == "fails" else {DT, D2})


def test_a_merge_of_both_contents_keeps_the_new_one(world: World) -> None:
    world.config = replace(world.config, dedupe=DedupeSettings(FIRST, None, DATE))
    commit_keyed(world, DT, "old", ["x", "y"], ["x0", "y0"], [1.0] * 2, sources=(("f.jsonl", 2),))
    commit_replacement(world, content(world, DT, "new", ["y", "w"], ["y1", "w1"]), DT)
    (merged,) = world.merge()
    local = world.objects.local_copy(
        world.objects.key_of(merged.url), world.lake.table_dir / "check"
    )
    assert sorted(pq.read_table(local).column("user_id").to_pylist()) == ["w1", "y1"]
    world.close()
    assert world.publish().switched_now
    assert served_by_date(world, {DT}) == [("w", DT, "w1"), ("y", DT, "y1")]
    assert check(world)
