"""`dedupe: {mode: latest, order_by: amount, scope: table}`: each key is served once in the whole
table, by its record of the greatest `amount` (ties to the later commit: commit time, date,
then row), whichever date that record is on — a date that loses its key to a later record on
another date is published again at its version (a revision) in the same store transaction as
the date that took it; across merges and the switch; the checks pass on the table as a whole."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import partial

import pytest

from resources.ingestion.check_suite import unique_record_ids
from resources.key_settings import LATEST, TABLE, DedupeSettings
from resources.publication import checks
from resources.publication.deduped_files import served_and_sources
from tests.publication.conftest import DT, World, commit_keyed, served_by_date
from tests.support.merge_child import TABLE as TABLE_NAME

DT2 = "2027-01-16"
DT3 = "2027-01-17"

Record = tuple[str, float]
"""(id, amount)"""


class LatestKeyed:
    """Records committed on chosen dates, one object a commit, each named by its user_id
    (`u<commit>-<position>`); the account of which record wins a key is kept here."""

    def __init__(self, world: World) -> None:
        self.world = world
        world.config = replace(world.config, dedupe=DedupeSettings(LATEST, "amount", TABLE))
        self.best: dict[str, tuple[float, int, str, int, int]] = {}
        """id -> (amount, committed_at_ms, dt, commit, position) of its best record."""
        self.dates: set[str] = set()
        self.n = 0

    def commit(self, dt: str, records: list[Record]) -> None:
        ids, amounts = [i for i, _ in records], [a for _, a in records]
        users = [f"u{self.n}-{p}" for p in range(len(ids))]
        o = commit_keyed(self.world, dt, f"latest-{self.n:04d}", ids, users, amounts)
        for p, (i, amount) in enumerate(records):
            mine = (amount, o.committed_at_ms or 0, dt, self.n, p)
            self.best[i] = max(self.best.get(i, mine), mine)
        self.dates.add(dt)
        self.n += 1

    def publish(self, dts: list[str] | None = None) -> None:
        w = self.world
        publisher = w.publisher()
        outcomes = publisher.publish(sorted(self.dates) if dts is None else dts)
        assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]

    def served(self) -> list[tuple[str, str, str]]:
        return served_by_date(self.world, self.dates)

    def assert_serves_each_key_by_its_latest_record(self) -> None:
        want = sorted((i, dt, f"u{n}-{p}") for i, (_, _, dt, n, p) in self.best.items())
        assert self.served() == want
        w = self.world
        outcomes = checks.run_all(w.config, w.store, w.objects, w.target)
        assert [o.summary for o in outcomes if not o.passed] == []
        unique = unique_record_ids(
            w.store, TABLE_NAME, "event_id", w.objects.read_column,
            served_urls=partial(served_and_sources, w.objects), across_dates=True,
        )  # fmt: skip
        assert unique.passed, unique.summary


@pytest.fixture
def keyed(world: World) -> LatestKeyed:
    return LatestKeyed(world)


def test_a_later_record_on_another_date_takes_the_key_and_that_date_is_revised(
    keyed: LatestKeyed,
) -> None:
    keyed.commit(DT, [("a", 1.0), ("b", 5.0), ("a", 2.0)])
    keyed.commit(DT2, [("b", 3.0), ("c", 1.0)])  # b: DT's 5.0 wins in the same run
    keyed.publish()
    keyed.assert_serves_each_key_by_its_latest_record()
    before = keyed.world.current(DT)
    # Only DT3 has new rows: it takes a (3.0 > 2.0) from DT and c (a tie: the later commit)
    # from DT2; b's 4.0 loses to DT's 5.0.
    keyed.commit(DT3, [("a", 3.0), ("c", 1.0), ("b", 4.0), ("d", 0.5)])
    keyed.publish([DT3])
    keyed.assert_serves_each_key_by_its_latest_record()
    revised = keyed.world.current(DT)
    assert (revised.revises, revised.upper) == (before.seq, before.upper)
    assert revised.seq == before.seq + 1
    assert keyed.world.current(DT2).revises > 0


def test_every_run_serves_each_key_by_its_latest_record(keyed: LatestKeyed) -> None:
    rng = random.Random(7)
    for wave in range(6):
        for _ in range(rng.randint(1, 4)):
            dt = rng.choice([DT, DT2, DT3])
            ids = [rng.choice("abcdefghij") for _ in range(rng.randint(1, 6))]
            keyed.commit(dt, [(i, float(rng.randint(0, 4))) for i in ids])  # many ties
        keyed.publish()
        keyed.assert_serves_each_key_by_its_latest_record()
        if wave == 2:  # DT2 closes and switches to merged files; revisions follow its chain
            keyed.world.close(DT2)
            keyed.world.merge(DT2)
            keyed.publish()
            assert keyed.world.current(DT2).switched
            keyed.assert_serves_each_key_by_its_latest_record()
