"""A publication run switches every date it publishes in ONE `PublicationTarget.switch` (an
Iceberg table commits one snapshot per run), with the files of each publication and the
ledger's positions in the summary; a date whose served partition lags the ledger (a publisher
killed after recording) is folded into the same switch. The target here is the real
`HiveManifestsTarget` behind a recorder of its calls: the recorder only proves the batching."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from resources.catalog.base import CatalogUnreachableError
from resources.catalog.hive_target import HiveManifestsTarget, symlink_location
from resources.catalog.target import PartitionSwitch, PublicationTarget
from resources.publication import checks
from resources.publication.manifest import read_spectrum
from resources.publication.outcome import CATALOG_REPAIRED, FAILED, PUBLISHED
from resources.publication.publisher import SUMMARY_KEY, Publisher
from tests.publication.conftest import DT, World
from tests.support.merge_child import TABLE

DT2, DT3 = "2027-01-16", "2027-01-17"


class Recording(HiveManifestsTarget):
    """`HiveManifestsTarget` over the world's catalog, recording every `switch` call (and
    failing it, when told to, as a catalog that stays unreachable)."""

    def __init__(self, inner: HiveManifestsTarget, fail_switch: bool = False) -> None:
        super().__init__(inner.catalog)
        self.switches: list[tuple[list[PartitionSwitch], dict[str, str]]] = []
        self.fail_switch = fail_switch

    def switch(self, table: str, switches: Sequence[PartitionSwitch], **kw: Any) -> list[str]:
        self.switches.append((list(switches), dict(kw.get("summary") or {})))
        if self.fail_switch:
            raise CatalogUnreachableError("the catalog does not answer (test)")
        return super().switch(table, switches, **kw)


@pytest.fixture
def recording(world: World) -> Recording:
    return Recording(world.target)


def publisher(world: World, target: PublicationTarget, **kwargs: Any) -> Publisher:
    return Publisher(world.config, world.store, world.objects, target, **kwargs)


def assert_served_is_ledger(world: World, *dts: str) -> None:
    for dt in dts:
        served, current = world.target.partition(TABLE, dt), world.current(dt)
        assert served is not None
        assert (served.seq, served.location) == (current.seq, symlink_location(current.location))
        assert world.read(dt) == world.expected(dt, upto=current.upper)
    outcomes = checks.run_all(world.config, world.store, world.objects, world.target)
    assert [o.summary for o in outcomes if not o.passed] == []


def test_a_run_over_several_dates_switches_them_all_in_one_call(
    world: World, recording: Recording
) -> None:
    for dt, count in ((DT, 3), (DT2, 2), (DT3, 1)):
        world.ingest(count, dt)
    pub = publisher(world, recording)
    outcomes = pub.publish(pub.due())
    assert [(o.dt, o.outcome) for o in outcomes] == [(d, PUBLISHED) for d in (DT, DT2, DT3)]
    ((switches, summary),) = recording.switches  # ONE switch for the three dates
    assert [(s.dt, s.seq) for s in switches] == [(DT, 1), (DT2, 1), (DT3, 1)]
    for s, outcome in zip(switches, outcomes, strict=True):
        p = outcome.publication
        assert p is not None and s.version_url == p.location
        assert [f.url for f in s.files] == [e.url for e in read_spectrum(world.objects, p.location)]
        assert sum(f.rows for f in s.files) == p.rows and sum(f.size for f in s.files) == p.bytes
        assert outcome.location == symlink_location(p.location)
        assert outcome.metadata()["location"] == outcome.location
    assert summary == {SUMMARY_KEY: f"{DT}:1,{DT2}:1,{DT3}:1"}
    assert_served_is_ledger(world, DT, DT2, DT3)

    recording.switches.clear()
    assert pub.publish(pub.due()) == [] and recording.switches == []  # nothing due: no switch


def test_a_lagging_date_is_repaired_in_the_same_switch_as_the_dates_published(
    world: World, recording: Recording
) -> None:
    world.ingest(2, DT)
    world.ingest(2, DT2)

    class Killed(Exception):
        pass

    def kill_after_recording_the_second(step: str, dt: str) -> None:
        if (step, dt) == ("recorded", DT2):
            raise Killed  # DT and DT2 recorded, neither switched

    with pytest.raises(Killed):
        publisher(world, recording, on_step=kill_after_recording_the_second).publish([DT, DT2])
    assert recording.switches == [] and world.target.table(TABLE) is None
    world.ingest(1, DT2)  # DT2 due again; DT only lags

    pub = publisher(world, recording)
    assert pub.due() == [DT, DT2]
    outcomes = {o.dt: o for o in pub.publish(pub.due())}
    assert outcomes[DT].outcome == CATALOG_REPAIRED and outcomes[DT2].outcome == PUBLISHED
    assert outcomes[DT].publication == world.current(DT)
    ((switches, summary),) = recording.switches
    assert [(s.dt, s.seq) for s in switches] == [(DT, 1), (DT2, 2)]
    (repair,) = [s for s in switches if s.dt == DT]
    assert [f.url for f in repair.files] == [o.url for o in world.store.ledger_objects(TABLE, DT)]
    assert summary == {SUMMARY_KEY: f"{DT}:1,{DT2}:2"}
    assert pub.due() == []
    assert_served_is_ledger(world, DT, DT2)


def test_a_failed_switch_fails_every_date_of_the_run_and_the_next_run_repairs_them(
    world: World,
) -> None:
    world.ingest(2, DT)
    world.ingest(1, DT2)
    down = Recording(world.target, fail_switch=True)
    outcomes = publisher(world, down).publish([DT, DT2])
    assert [o.outcome for o in outcomes] == [FAILED, FAILED]
    assert all("CatalogUnreachableError" in o.message for o in outcomes)
    assert len(down.switches) == 1  # tried once for both: the target retries, not the run
    assert world.current(DT).seq == 1 and world.current(DT2).seq == 1  # recorded all the same

    pub = publisher(world, Recording(world.target))
    assert pub.due() == [DT, DT2]
    assert [o.outcome for o in pub.publish(pub.due())] == [CATALOG_REPAIRED] * 2
    assert_served_is_ledger(world, DT, DT2)
