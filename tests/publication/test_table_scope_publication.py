"""`dedupe: {mode: first, scope: table}`: a key re-sent on another date is served once in the
whole table — by the date that published it first — at every publication, across merges and
the switch; the check judges the table as a whole; a run waits for the table's keys lease."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from resources.check_outcome import CheckOutcome
from resources.coordination.items import ItemType
from resources.coordination.lease import LeaseTiming
from resources.ingestion.check_suite import unique_record_ids
from resources.key_settings import DATE, FIRST, TABLE, DedupeSettings
from resources.publication import checks
from resources.publication.outcome import FAILED, PUBLISHED, PublicationOutcome
from resources.publication.publication_state import served_and_sources
from resources.publication.publisher import Publisher
from tests.publication.conftest import DT, World, commit_keyed, served_by_date
from tests.support.merge_child import TABLE as TABLE_NAME

DT2 = "2027-01-16"
DT3 = "2027-01-17"


class TableKeyed:
    """Records of chosen ids committed on chosen dates, one object a commit; the account of
    which date serves each key is kept here, run by run, apart from the store."""

    def __init__(self, world: World) -> None:
        self.world = world
        world.config = replace(world.config, dedupe=DedupeSettings(FIRST, None, TABLE))
        self.owner: dict[str, tuple[str, int]] = {}
        """id -> (dt, commit number) serving it."""
        self.pending: list[tuple[int, str, int, list[str]]] = []
        """(committed_at_ms, dt, commit number, ids) committed since the last publication."""
        self.dates: set[str] = set()
        self.n = 0

    def commit(self, dt: str, ids: list[str]) -> None:
        users = [f"user-{self.n}"] * len(ids)
        o = commit_keyed(self.world, dt, f"keyed-{self.n:04d}", ids, users, [1.0] * len(ids))
        self.pending.append((o.committed_at_ms or 0, dt, self.n, ids))
        self.dates.add(dt)
        self.n += 1

    def publisher(self, **kwargs: object) -> Publisher:
        w = self.world
        return Publisher(w.config, w.store, w.objects, w.target, **kwargs)  # type: ignore[arg-type]

    def publish(self) -> list[PublicationOutcome]:
        """Every date with something due, in one run; the account follows: a key no date
        serves goes to its first committed record of this run (commit time, date, then commit
        order within the date)."""
        outcomes = self.publisher().publish(sorted(self.dates))
        assert all(o.ok for o in outcomes), [o.describe() for o in outcomes]
        for _when, dt, n, ids in sorted(self.pending):
            for i in ids:
                self.owner.setdefault(i, (dt, n))
        self.pending = []
        return outcomes

    def served(self) -> list[tuple[str, str, str]]:
        return served_by_date(self.world, self.dates)

    def assert_serves_each_key_once(self) -> None:
        want = sorted((i, dt, f"user-{n}") for i, (dt, n) in self.owner.items())
        assert self.served() == want
        w = self.world
        outcomes = checks.run_all(w.config, w.store, w.objects, w.target)
        assert [o.summary for o in outcomes if not o.passed] == []
        assert self.unique().passed, self.unique().summary

    def unique(self) -> CheckOutcome:
        w = self.world
        return unique_record_ids(
            w.store, TABLE_NAME, "event_id", w.objects.read_column,
            served_urls=partial(served_and_sources, w.objects), across_dates=True,
        )  # fmt: skip


@pytest.fixture
def keyed(world: World) -> TableKeyed:
    return TableKeyed(world)


def test_a_key_re_sent_on_another_date_is_served_once_in_the_table(keyed: TableKeyed) -> None:
    keyed.commit(DT, ["a", "b", "a"])
    keyed.commit(DT2, ["c", "b"])  # b: on DT in the same run, committed first
    keyed.publish()
    keyed.assert_serves_each_key_once()
    keyed.commit(DT2, ["a", "d"])  # a: published by DT already
    keyed.commit(DT3, ["d", "e"])  # d: new on two dates in one run
    keyed.commit(DT, ["e", "f"])
    outcomes = keyed.publish()
    keyed.assert_serves_each_key_once()
    assert sum(o.dropped for o in outcomes) >= 3
    assert {i for i, _, _ in keyed.served()} == set("abcdef")


def test_merges_and_the_switch_keep_each_key_on_its_date(keyed: TableKeyed) -> None:
    keyed.commit(DT, ["a", "b"])
    keyed.commit(DT2, ["b", "c"])
    keyed.commit(DT2, ["c", "d", "a"])
    keyed.publish()
    keyed.world.merge(DT2)
    keyed.world.close(DT2)
    keyed.commit(DT, ["c", "z"])
    keyed.publish()
    assert keyed.world.current(DT2).switched
    keyed.assert_serves_each_key_once()


def test_the_check_fails_a_key_served_by_two_dates(keyed: TableKeyed) -> None:
    keyed.commit(DT, ["a", "b"])
    keyed.commit(DT2, ["a", "c"])
    w = keyed.world
    per_date = replace(w.config, dedupe=DedupeSettings(FIRST, None, DATE))
    Publisher(per_date, w.store, w.objects, w.target).publish([DT, DT2])  # a forged table
    outcome = keyed.unique()
    assert not outcome.passed and "also dt=2027-01-15" in outcome.summary, outcome.summary


def test_a_run_waits_for_the_keys_lease_then_fails_without_recording(keyed: TableKeyed) -> None:
    keyed.commit(DT, ["a"])
    store = keyed.world.store
    sid = store.source_identifier(TABLE_NAME, ItemType.KEYS_JOB)
    store.create_partitions(sid, [TABLE_NAME])
    held = store.acquire(sid, TABLE_NAME, "another-run", 600.0)
    timing = LeaseTiming(ownership_timeout_s=1.0, renew_interval_s=0.25)
    (outcome,) = keyed.publisher(keys_timing=timing).publish([DT])
    assert outcome.outcome == FAILED and "another-run" in outcome.message, outcome.message
    assert store.table_partition(TABLE_NAME, DT).publication_seq == 0  # type: ignore[union-attr]
    store.give_up(held.token)
    (outcome,) = keyed.publisher(keys_timing=timing).publish([DT])
    assert outcome.outcome == PUBLISHED
