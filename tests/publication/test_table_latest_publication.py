"""`dedupe: {mode: latest, order_by: amount, scope: table}`: each key is served once in the whole
table, by its record of the greatest `amount` (ties to the later commit: commit time, date,
then row), whichever date that record is on — a date that loses its key to a later record on
another date is published again at its version (a revision) in the same store transaction as
the date that took it; across merges and the switch; the checks pass on the table as a whole."""

from __future__ import annotations

import logging
import random
from dataclasses import replace
from functools import partial

import pytest

from resources.ingestion.check_suite import unique_record_ids
from resources.key_settings import LATEST, TABLE, DedupeSettings
from resources.publication import checks, latest_round
from resources.publication.publication_state import served_and_sources
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


def test_rounds_of_a_bounded_transaction_serve_each_key_once(
    keyed: LatestKeyed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With transactions of 3 publications, a run of 7 dates works in rounds (halved while a
    round's dates and revisions exceed 3), each against what the rounds before recorded."""
    monkeypatch.setattr(latest_round, "PUBLICATIONS_PER_TRANSACTION", 3)
    dates = [f"2027-02-{d:02d}" for d in range(1, 8)]
    for n, dt in enumerate(dates):
        keyed.commit(dt, [("shared", float(n % 3)), (f"own-{n}", 1.0), ("late", float(n))])
    keyed.publish()
    keyed.assert_serves_each_key_by_its_latest_record()
    # One date with a greater record of every key: it takes them all, from six dates revised
    # in transactions of their own first.
    keyed.commit(dates[0], [("shared", 9.0), *((f"own-{n}", 2.0) for n in range(7))])
    keyed.publish()
    keyed.assert_serves_each_key_by_its_latest_record()
    assert all(keyed.world.current(dt).revises for dt in dates[1:])


def test_a_date_taken_from_with_rows_of_its_own_or_a_moved_chain(
    keyed: LatestKeyed, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A taken-from date with new rows of its own is revised by the round that took from it and
    published by a later one; a switched date whose chain moved joins the round instead, and is
    revised by a later round taking from it."""
    monkeypatch.setattr(latest_round, "PUBLICATIONS_PER_TRANSACTION", 2)
    keyed.commit(DT, [("a", 1.0), ("b", 1.0)])
    keyed.commit(DT2, [("c", 1.0), ("d", 1.0)])
    keyed.commit(DT3, [("e", 1.0)])
    keyed.publish()
    keyed.assert_serves_each_key_by_its_latest_record()
    # DT takes c from DT2 in the first round (DT and DT2 fit one), while DT3, due too, takes
    # a from DT and gets its own d back from DT2 in a later one.
    keyed.commit(DT, [("c", 2.0)])
    keyed.commit(DT2, [("d", 0.5), ("f", 1.0)])
    keyed.commit(DT3, [("a", 3.0), ("d", 4.0)])
    keyed.publish()
    keyed.assert_serves_each_key_by_its_latest_record()
    # DT3 switches, then a merge of a delayed object moves its chain past what it serves. The
    # first batch (DT, DT2) takes a key from it: DT3 joins, the batch is halved to DT3 alone,
    # and DT and DT2 follow in the next round.
    keyed.world.close(DT3)
    keyed.world.merge(DT3)
    keyed.publish()
    keyed.commit(DT3, [("g", 1.0)])
    keyed.world.merge(DT3)
    before = keyed.world.current(DT3)
    keyed.commit(DT, [("e", 5.0)])
    keyed.commit(DT2, [("h", 1.0)])
    keyed.publish([DT])
    keyed.assert_serves_each_key_by_its_latest_record()
    published, revised = keyed.world.store.publications(TABLE_NAME, DT3)[-2:]
    assert (published.revises, published.upper) == (0, before.upper + 1)
    assert revised.revises == published.seq and revised.upper == published.upper


def test_a_round_refused_as_stale_is_planned_again(
    keyed: LatestKeyed, caplog: pytest.LogCaptureFixture
) -> None:
    """A merge commits between a round's plan and its record: the one transaction is refused
    as stale (nothing recorded), and the round is planned again with the new chain."""
    caplog.set_level(logging.INFO, logger=latest_round.__name__)
    keyed.commit(DT, [("a", 1.0)])
    keyed.commit(DT2, [("b", 1.0)])
    keyed.publish()
    keyed.world.close(DT2)
    keyed.world.merge(DT2)
    keyed.publish()
    keyed.commit(DT2, [("c", 1.0)])  # delayed, merged: DT2 is due as merged
    keyed.world.merge(DT2)
    keyed.commit(DT, [("b", 2.0)])  # takes b from DT2
    interrupted: list[str] = []

    def merge_meanwhile(step: str, dt: str) -> None:
        if step == "written" and dt == DT2 and not interrupted:
            interrupted.append(dt)
            keyed.commit(DT2, [("d", 1.0)])
            keyed.world.merge(DT2)

    outcomes = keyed.world.publisher(on_step=merge_meanwhile).publish([DT])
    assert interrupted and all(o.ok for o in outcomes), [o.describe() for o in outcomes]
    assert "older chain" in caplog.text and "the round is planned again" in caplog.text
    keyed.assert_serves_each_key_by_its_latest_record()
