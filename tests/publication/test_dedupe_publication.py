"""Every publication serves each key once under the stream's policy — live small objects
included, across merges and the switch — and the checks vouch for what it left out."""

from __future__ import annotations

import json
import random
from dataclasses import replace
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.aggregation.first_records import FirstRecords
from resources.aggregation.partials import ArrowPartials
from resources.aggregation.runner import RollupRunner
from resources.check_outcome import CheckOutcome
from resources.coordination.lease import LeaseTiming
from resources.dedupe.key_index import KeyIndex
from resources.dedupe.keys import SIPHASH
from resources.dedupe.served import DROPPED_KEY, INDEX_NAME, LEGACY_INDEX_NAME, STATE_NAME
from resources.ingestion.check_suite import unique_record_ids
from resources.key_settings import FIRST, LATEST, NONE, DedupeSettings
from resources.ledger.model import SmallObject
from resources.publication import checks
from resources.publication.manifest import read_spectrum
from resources.publication.outcome import FAILED, PUBLISHED
from resources.publication.publication_state import served_and_sources, served_state
from resources.publication.reader import read_partition
from resources.rollup.cursor import rollup_id
from resources.rollup.spec import parse_rollups
from tests.publication.conftest import DT, World
from tests.support.merge_child import TABLE, commit_source, epoch_us

Record = tuple[str, int]
"""(event id, version): a record's id and the value it is ordered by under `latest`."""


class KeyedWorld:
    """The publisher's world with records of chosen ids and versions, each commit one object;
    the account of what each policy must serve is kept here, apart from the store."""

    def __init__(self, world: World, mode: str) -> None:
        self.world = world
        order_by = "amount" if mode == LATEST else None
        world.config = replace(world.config, dedupe=DedupeSettings(mode, order_by))
        self.mode = mode
        self.commits: list[list[Record]] = []
        self.rng = random.Random(5)

    def commit(self, records: list[Record]) -> None:
        n = len(self.commits)
        start = epoch_us(DT)
        table = pa.table(
            {
                "event_id": [r[0] for r in records],
                "user_id": [f"user-{n}"] * len(records),
                "amount": pa.array([float(r[1]) for r in records], pa.float64()),
                "event_time": pa.array(
                    [start + self.rng.randrange(86_400_000_000) for _ in records],
                    pa.timestamp("us", tz="UTC"),
                ),
            }
        )
        path = self.world.lake.table_dir / f"dt={DT}" / f"keyed-{n:04d}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path)
        small = SmallObject(TABLE, DT, f"file://{path}", path.stat().st_size, len(records))
        commit_source(self.world.store, f"keyed/{n:04d}", [small], merge_after_s=600.0)
        self.commits.append(records)

    def expected(self) -> dict[str, tuple[int, int]]:
        """id -> (version, commit) the policy serves (under `none`: every record)."""
        chosen: dict[str, tuple[int, int]] = {}
        for n, records in enumerate(self.commits):
            for event_id, version in records:
                held = chosen.get(event_id)
                if held is None or (self.mode == LATEST and version >= held[0]):
                    chosen[event_id] = (version, n)
        return chosen

    def served(self) -> list[tuple[str, int, str]]:
        rows = read_partition(self.world.target, TABLE, DT)
        return sorted(
            zip(
                rows.column("event_id").to_pylist(),
                [int(a) for a in rows.column("amount").to_pylist()],
                rows.column("user_id").to_pylist(),
                strict=True,
            )
        )

    def assert_serves_the_policy(self) -> None:
        served = self.served()
        want = sorted((i, v, f"user-{n}") for i, (v, n) in self.expected().items())
        assert served == want
        outcomes = checks.run_all(
            self.world.config, self.world.store, self.world.objects, self.world.target
        )
        assert [o.summary for o in outcomes if not o.passed] == []


@pytest.fixture(params=[FIRST, LATEST])
def keyed(request: pytest.FixtureRequest, world: World) -> KeyedWorld:
    return KeyedWorld(world, request.param)


def test_re_sent_and_repeated_records_are_served_once_at_every_publication(
    keyed: KeyedWorld,
) -> None:
    keyed.commit([("a", 1), ("b", 1), ("a", 3)])  # a key twice in one object
    keyed.commit([("c", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()
    keyed.commit([("a", 2), ("b", 5), ("d", 1)])  # re-sends of published keys
    keyed.commit([("d", 1), ("e", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()
    current = keyed.world.current()
    committed = sum(len(c) for c in keyed.commits)
    assert current.rows == len(keyed.expected()) < committed


def test_an_object_whose_every_row_lost_is_served_as_nothing_and_read_once(
    keyed: KeyedWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A producer's retry of a whole object under a new name: every row loses (under `latest`
    # to greater versions), so the publication serves nothing for it from its key column
    # alone, and never reads the whole object to copy none of it. One that keeps a row is
    # read again, and copied.
    keyed.commit([("a", 1), ("b", 1), ("c", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.commit([("a", 0), ("b", 0), ("c", 0)])
    keyed.commit([("a", 0), ("d", 1)])
    objects = keyed.world.objects
    reads: list[str] = []
    get_bytes = objects.get_bytes
    monkeypatch.setattr(objects, "get_bytes", lambda key: reads.append(key) or get_bytes(key))
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()
    state = served_state(objects, keyed.world.current())
    assert state is not None
    retry, partial_resend = (
        f for f in state.files if f.source.endswith(("0001.parquet", "0002.parquet"))
    )
    assert (retry.served, retry.rows, partial_resend.copied, partial_resend.rows) == (
        False,
        0,
        True,
        1,
    )
    assert reads.count(objects.key_of(retry.source)) == 1
    assert reads.count(objects.key_of(partial_resend.source)) == 2


def test_merges_keep_one_row_per_key_and_the_switch_serves_the_policy(
    keyed: KeyedWorld,
) -> None:
    keyed.commit([("a", 1), ("b", 2)])
    keyed.commit([("a", 4), ("c", 1)])
    keyed.world.publish()
    keyed.world.merge()
    keyed.world.close()
    keyed.commit([("b", 9), ("c", 0)])  # delayed: after the close
    keyed.world.merge()
    outcome = keyed.world.publish()
    assert outcome.outcome == PUBLISHED and outcome.switched_now
    keyed.assert_serves_the_policy()
    keyed.commit([("a", 7), ("z", 1)])
    keyed.world.merge()
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()


@pytest.mark.parametrize(
    "since, ids, dropped",
    [
        ([], ["a", "b", "c"], 2),  # a2, c2
        ([("b", 3), ("d", 1), ("d", 2), ("e", 1)], ["a", "b", "c", "d", "e"], 4),  # and b3, d2
    ],
)
def test_under_first_a_merge_of_published_objects_merges_what_the_publication_serves(
    world: World, since: list[Record], ids: list[str], dropped: int
) -> None:
    # Under `first` a record that lost stays out, so a merge of small objects the current
    # publication covers takes the files it serves (each key's first record already) instead
    # of looking for keys again: the original of a copied object is not even read. Objects
    # committed since lose the keys its index holds, and their own repeats.
    keyed = KeyedWorld(world, FIRST)
    keyed.commit([("a", 1), ("b", 1)])
    keyed.commit([("a", 2), ("c", 1), ("c", 2)])
    assert world.publish().outcome == PUBLISHED
    state = served_state(world.objects, world.current())
    assert state is not None
    (copied,) = [f for f in state.files if f.copied]
    world.objects.delete(world.objects.key_of(copied.source))
    if since:
        keyed.commit(since)  # not published
    (outcome,) = world.merge()
    local = world.objects.local_copy(world.objects.key_of(outcome.url), Path(world.lake.root))
    assert sorted(pq.read_table(local).column("event_id").to_pylist()) == ids
    assert int(pq.read_metadata(local).metadata[DROPPED_KEY]) == dropped
    world.close()
    assert world.publish().switched_now
    keyed.assert_serves_the_policy()


def test_none_keeps_every_record(world: World) -> None:
    keyed = KeyedWorld(world, NONE)
    keyed.commit([("a", 1), ("a", 2)])
    keyed.commit([("a", 3)])
    world.publish()
    assert [r[0] for r in keyed.served()] == ["a", "a", "a"]


def test_a_publication_that_lost_its_race_leaves_orphans_only(keyed: KeyedWorld) -> None:
    keyed.commit([("a", 1)])
    keyed.world.publish()
    keyed.commit([("a", 2), ("b", 1)])
    slow = keyed.world.publisher()
    keyed.world.publish()  # the winner
    assert slow.publish_one(DT).outcome != PUBLISHED
    keyed.assert_serves_the_policy()


def unique_ids(world: World) -> CheckOutcome:
    return unique_record_ids(
        world.store,
        TABLE,
        "event_id",
        world.objects.read_column,
        served_urls=partial(served_and_sources, world.objects),
    )


def test_unique_record_ids_fails_a_key_served_twice_or_never(keyed: KeyedWorld) -> None:
    keyed.commit([("a", 1), ("b", 1)])
    keyed.commit([("a", 2), ("c", 1)])
    keyed.world.publish()
    assert unique_ids(keyed.world).passed
    served = [e.url for e in read_spectrum(keyed.world.objects, keyed.world.current().location)]
    # The mechanism broken by hand: a served file loses a row, or a key comes back twice.
    path = served[-1].removeprefix("file://")
    rows = pq.read_table(path)
    pq.write_table(rows.slice(1), path)
    outcome = unique_ids(keyed.world)
    assert not outcome.passed and "served by no row" in outcome.summary, outcome.summary
    pq.write_table(pa.concat_tables([rows, rows]), path)
    outcome = unique_ids(keyed.world)
    assert not outcome.passed and "appear more than once" in outcome.summary, outcome.summary


def test_a_rollup_under_first_counts_each_key_once_and_follows_the_publications(
    world: World,
) -> None:
    keyed = KeyedWorld(world, FIRST)
    spec = parse_rollups(
        {"per_user": {"group_by": ["user_id"], "aggregates": {"n": "count", "s": "sum(amount)"}}},
        {c.name: c.type for c in world.config.columns},
    )[0]
    runner = RollupRunner(
        world.store,
        world.objects,
        TABLE,
        spec,
        lambda input_bytes: ArrowPartials(world.config.columns),
        owner="test",
        timing=LeaseTiming(ownership_timeout_s=60, renew_interval_s=15),
        work_dir=world.lake.table_dir.parent / "scratch",
        first_records=FirstRecords(world.config, world.store, world.objects, TABLE),
    )

    def state() -> dict[str, tuple[int, float]]:
        states = world.store.rollup_states(rollup_id(TABLE, spec), DT)
        return {k: (int(s.value[0] or 0), float(s.value[1] or 0)) for k, s in states.items()}

    def served_totals() -> dict[str, tuple[int, float]]:
        rows = read_partition(world.target, TABLE, DT)
        totals: dict[str, tuple[int, float]] = {}
        for user, amount in zip(
            rows.column("user_id").to_pylist(), rows.column("amount").to_pylist(), strict=True
        ):
            n, s = totals.get(f'["{user}"]', (0, 0.0))
            totals[f'["{user}"]'] = (n + 1, s + amount)
        return totals

    keyed.commit([("a", 1), ("b", 2), ("a", 3)])
    runner.run([DT])
    assert state() == {}  # nothing published yet: nothing rolled up
    world.publish()
    keyed.commit([("a", 4), ("c", 5)])  # committed, not published yet: not counted yet
    runner.run([DT])
    assert state() == served_totals() == {'["user-0"]': (2, 3.0)}
    world.publish()
    runner.run([DT])
    assert state() == served_totals() == {'["user-0"]': (2, 3.0), '["user-1"]': (1, 5.0)}


def test_a_date_keyed_by_the_earlier_hash_keeps_it(
    keyed: KeyedWorld, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A date whose index an earlier version built with SipHash: its later publications look
    # their new rows up with SipHash too, and the index stays SipHash.
    empty = KeyIndex.empty
    monkeypatch.setattr(
        KeyIndex, "empty", lambda order_type, hash_name="": empty(order_type, SIPHASH)
    )
    keyed.commit([("a", 1), ("b", 1)])
    keyed.world.publish()
    monkeypatch.setattr(KeyIndex, "empty", empty)
    keyed.commit([("a", 2), ("b", 0), ("c", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()
    index = keyed.world.objects.key_of(keyed.world.current().location + INDEX_NAME)
    data = keyed.world.objects.get_bytes(index)
    assert (
        KeyIndex.from_bytes(data, pa.float64() if keyed.mode == LATEST else None).hash_name
        == SIPHASH
    )


def test_a_state_and_parquet_index_an_earlier_version_wrote_are_read_and_extended(
    keyed: KeyedWorld,
) -> None:
    # Before the index was an Arrow file, a state did not name it and `keys.parquet` held it:
    # a table published then goes on under this version, its next index an Arrow file.
    keyed.commit([("a", 1), ("b", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    objects, location = keyed.world.objects, keyed.world.current().location
    order = pa.float64() if keyed.mode == LATEST else None
    index = KeyIndex.from_bytes(objects.get_bytes(objects.key_of(location + INDEX_NAME)), order)
    sink = pa.BufferOutputStream()
    pq.write_table(index.to_table(), sink, compression="none", use_dictionary=False)
    objects.put_bytes(objects.key_of(location + LEGACY_INDEX_NAME), sink.getvalue().to_pybytes())
    objects.delete(objects.key_of(location + INDEX_NAME))
    state = json.loads(objects.get_bytes(objects.key_of(location + STATE_NAME)))
    del state["index"]
    objects.put_bytes(objects.key_of(location + STATE_NAME), json.dumps(state).encode())
    keyed.commit([("a", 2), ("b", 0), ("c", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    keyed.assert_serves_the_policy()
    after = keyed.world.current().location
    assert objects.get_bytes(objects.key_of(after + INDEX_NAME))[:6] == b"ARROW1"


def test_a_key_index_that_covers_other_ids_than_its_state_fails_the_publication(
    keyed: KeyedWorld,
) -> None:
    # The index and the new rows are read at once, the rows chosen by the state's range: an
    # index of another range (a torn or foreign write) would resolve them against the wrong
    # keys, so the publication fails (and the next run retries) rather than serve that.
    keyed.commit([("a", 1), ("b", 1)])
    assert keyed.world.publish().outcome == PUBLISHED
    key = keyed.world.objects.key_of(keyed.world.current().location + INDEX_NAME)
    order = pa.float64() if keyed.mode == LATEST else None
    index = KeyIndex.from_bytes(keyed.world.objects.get_bytes(key), order)
    keyed.world.objects.put_bytes(key, replace(index, upper=0).to_bytes())
    keyed.commit([("a", 2), ("c", 1)])
    outcome = keyed.world.publish()
    assert outcome.outcome == FAILED
    assert "a key index of ids 1..0 beside a state of ids 1..1" in outcome.message
