"""Retracting what one source object gave (the step `on_change: replace` will take): the rows
are found by the ledger's sources of its unit's small objects, and a revision of the date's
current publication serves it without them — their keys leave the index, so a later record of
one of them (the object's new content) is served, and a key no other record holds is gone."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from resources.dedupe.key_index import row_ids
from resources.key_settings import DATE, FIRST, DedupeSettings
from resources.ledger.model import RegisteredObject
from resources.publication.deduped_files import DedupedFiles
from resources.publication.manifest import write_version
from resources.publication.retraction import RetractionError, contributed_rows
from tests.publication.conftest import DT, World, commit_keyed, served_by_date
from tests.support.merge_child import TABLE


def registered(object_id: int, unit: str, rows: int, sources: tuple) -> RegisteredObject:
    return RegisteredObject(
        TABLE, DT, object_id, f"file:///t/{object_id}", 10, rows, "src", unit, 1, False,
        sources=sources,
    )  # fmt: skip


def test_the_rows_a_source_gave_to_its_units_small_objects() -> None:
    objects = [
        registered(1, "u", 5, (("a", 2), ("b", 3))),
        registered(2, "v", 4, (("b", 4),)),  # another unit: another object named b
        registered(3, "u", 3, (("b", 1), ("a", 2))),
    ]
    rows = contributed_rows(objects, "u", "b", only_object=False)
    assert rows.tolist() == [*row_ids(1, 5)[2:].tolist(), row_ids(3, 3)[0]]
    assert contributed_rows(objects, "w", "b", only_object=False).tolist() == []
    legacy = [registered(1, "u", 3, ())]
    assert contributed_rows(legacy, "u", "a", only_object=True).tolist() == row_ids(1, 3).tolist()
    with pytest.raises(RetractionError, match="without its sources"):
        contributed_rows(legacy, "u", "a", only_object=False)


def test_a_revision_without_the_retracted_rows_frees_their_keys(world: World) -> None:
    world.config = replace(world.config, dedupe=DedupeSettings(FIRST, None, DATE))
    first = commit_keyed(
        world, DT, "unit-u", ["x", "y", "z", "w"], ["a0", "a1", "b0", "b1"], [1.0] * 4,
        sources=(("a.jsonl", 2), ("b.jsonl", 2)),
    )  # fmt: skip
    commit_keyed(world, DT, "unit-v", ["z"], ["resent"], [1.0])  # a re-send of b's z: lost
    publisher = world.publisher()
    assert publisher.publish_one(DT).ok
    assert sorted(u for _, _, u in served_by_date(world, {DT})) == ["a0", "a1", "b0", "b1"]

    # b.jsonl is rewritten: its rows are retracted in a revision of the current publication.
    retracted = contributed_rows(
        world.store.ledger_objects(TABLE, DT), first.source_partition_key, "b.jsonl",
        only_object=False,
    )  # fmt: skip
    assert np.array_equal(retracted, row_ids(first.object_id, 4)[2:])
    tp = world.store.table_partition(TABLE, DT)
    assert tp is not None
    current = world.current()
    deduped = DedupedFiles(world.config, world.objects)
    upper, files, spans = publisher.files_of(tp, "live")
    plan_key = f"_manifests/dt={DT}/live-{upper}-revision/"
    pending = deduped.prepare(
        DT, current, world.store.ledger_objects(TABLE, DT), files, spans, upper
    )
    served, state = deduped.finish(pending, plan_key, retracted=retracted)
    assert state.dropped_rows == 3  # b's two rows, and the re-send that lost to b's z
    location = write_version(world.objects, plan_key, served)
    revision = world.store.record_publication(
        replace(current, seq=0, location=location, files=len(served), revises=current.seq,
                rows=sum(f.row_count for f in served), written_at_ms=0)
    )  # fmt: skip
    assert revision.revises == current.seq
    # The new content of b.jsonl: z again, w no more. z is served from it; the re-send that
    # lost to the old z stays out (losing is final), w is gone.
    commit_keyed(world, DT, "unit-u2", ["z"], ["b0-new"], [2.0], sources=(("b.jsonl", 1),))
    assert publisher.publish_one(DT).ok
    assert sorted(u for _, _, u in served_by_date(world, {DT})) == ["a0", "a1", "b0-new"]
    assert len(deduped.state(world.current())[1]) == 3  # x, y, z
