"""The publication checks pass on a good table (one partition switched, one live) and each
fails on the fault it exists for: a missing file, a file of the wrong length, a catalog
pointing at an old version or at nothing the ledger published, a manifest whose rows are not
the committed ones, a switch the chain does not cover, rows unpublished past their interval.
Plus ingestion's duplicate check, which reads the files that hold each committed row once, so
it still works once garbage collection deleted the small objects a published merge covers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from resources.check_outcome import CheckOutcome
from resources.ingestion.checks import find_duplicate_ids
from resources.ledger.merge import MergeRange
from resources.ledger.model import RegisteredObject, TablePartition
from resources.ledger.publication_lag import MERGE_MARGIN_MS, PUBLISH_MARGIN_MS
from resources.publication import checks
from resources.publication.manifest import catalog_location, read_spectrum
from tests.publication.conftest import DT, World
from tests.support.fakes import FakeClock
from tests.support.merge_child import TABLE

LIVE_DT = "2027-01-14"


@pytest.fixture
def good(world: World) -> World:
    """`DT` switched to merged objects and republished after a delayed object; `LIVE_DT` live,
    published twice."""
    world.ingest(3)
    world.close()
    world.merge()
    world.publish()
    world.ingest(1)
    world.merge()
    world.publish()
    world.ingest(2, LIVE_DT)
    world.publish(LIVE_DT)
    world.ingest(1, LIVE_DT)
    world.publish(LIVE_DT)
    return world


def run(world: World) -> dict[str, CheckOutcome]:
    return {
        o.name: o for o in checks.run_all(world.config, world.store, world.objects, world.target)
    }


def failed(world: World) -> dict[str, str]:
    return {name: o.summary for name, o in run(world).items() if not o.passed}


def local(url: str) -> Path:
    return Path(url[len("file://") :])


def test_a_good_table_passes_every_check(good: World) -> None:
    outcomes = run(good)
    assert list(outcomes) == list(checks.CHECKS)
    assert [o.summary for o in outcomes.values() if not o.passed] == []
    assert outcomes["catalog_current"].metadata["partitions"] == 2
    assert good.current(DT).switched and not good.current(LIVE_DT).switched


def test_a_missing_file_fails(good: World) -> None:
    entry = read_spectrum(good.objects, good.current(LIVE_DT).location)[1]
    local(entry.url).unlink()
    found = failed(good)
    assert set(found) == {"manifest_entries_exist", "published_rows"}
    assert f"{entry.url} does not exist" in found["manifest_entries_exist"]


def test_a_file_of_the_wrong_length_fails(good: World) -> None:
    entry = read_spectrum(good.objects, good.current(DT).location)[0]
    with local(entry.url).open("ab") as f:
        f.write(b"\0")
    found = failed(good)
    assert "manifest_entries_exist" in found
    assert (
        f"is {entry.content_length + 1} bytes, the manifest records"
        in (found["manifest_entries_exist"])
    )


def test_a_manifest_serving_other_rows_fails(good: World) -> None:
    entry = read_spectrum(good.objects, good.current(LIVE_DT).location)[0]
    path = local(entry.url)
    rows = pq.read_table(path)
    pq.write_table(rows.slice(0, rows.num_rows - 1), path)  # one row lost
    found = failed(good)
    assert "published_rows" in found
    assert f"{TABLE} dt={LIVE_DT}: the manifest (seq 2) serves" in found["published_rows"]


def test_a_catalog_pointing_at_an_old_version_fails(good: World) -> None:
    old = good.store.publications(TABLE, DT)[0]
    good.catalog.publish_partition(TABLE, DT, catalog_location(old.location), 99)
    found = failed(good)
    assert set(found) == {"catalog_current"}
    assert (
        f"the catalog points at {catalog_location(old.location)} (seq 99)"
        in (found["catalog_current"])
    )


def test_a_catalog_partition_the_ledger_never_published_fails(good: World) -> None:
    good.catalog.publish_partition(TABLE, "2027-01-01", "file:///elsewhere/symlink/", 1)
    found = failed(good)
    assert set(found) == {"catalog_current"}
    assert (
        "dt=2027-01-01: in the catalog, but the ledger has no publication"
        in (found["catalog_current"])
    )


def test_a_switch_the_chain_does_not_cover_fails() -> None:
    def rng(lower: int | None, upper: int) -> MergeRange:
        url = None if lower is None else f"file:///t/part-{upper}.parquet"
        return MergeRange(TABLE, DT, lower, upper, url, 10, 10, 1, 0)

    chain = [rng(None, 0), rng(0, 3)]
    tp = TablePartition(
        TABLE, DT, next_object_id=6, last_live_object_id=4, current_manifest_version=3,
        desired_manifest_version=3, switched=True, merged_upper=3, published_upper=3,
        publication_seq=1,
    )  # fmt: skip
    assert checks._coverage_problems(TABLE, tp, chain) == [
        f"{TABLE} dt={DT}: switched, but the chain ends at 3, below the last live id 4"
    ]
    never_merged = checks._coverage_problems(TABLE, tp, [])
    assert f"{TABLE} dt={DT}: switched but never merged" in never_merged
    live_past = TablePartition(
        TABLE, DT, next_object_id=3, current_manifest_version=0, published_upper=5,
        publication_seq=1,
    )  # fmt: skip
    assert checks._coverage_problems(TABLE, live_past, []) == [
        f"{TABLE} dt={DT}: the current live publication covers 1..5, outside 1..2"
    ]
    assert checks._coverage_problems(TABLE, tp, [*chain, rng(3, 5)]) == []


def test_duplicate_ids_are_checked_over_the_files_gc_keeps(good: World) -> None:
    """Delete what garbage collection may delete once a merge is published (the small objects
    the chain covers): the duplicate check reads only what is left, and sees every row."""
    (merged,) = [r for r in good.store.merge_ranges(TABLE, DT) if not r.is_sentinel]
    for o in good.store.ledger_objects(TABLE, DT):
        if o.object_id <= merged.upper:
            local(o.url).unlink()
    report = find_duplicate_ids(good.store, TABLE, "event_id", good.objects.read_column)
    assert report.duplicates == {}
    assert report.partitions_checked == 2
    assert report.rows_checked == sum(good.expected(DT).values()) + sum(
        good.expected(LIVE_DT).values()
    )


def test_rows_without_a_record_id_are_no_duplicates(good: World) -> None:
    """A record id column added after some objects were written: those objects read it as
    null (`read_column` by name), and nulls are no ids, so they are never duplicates; repeated
    ids still are."""

    def read_column(urls: Sequence[str], column: str) -> pa.ChunkedArray:
        ids = good.objects.read_column(list(urls), column)
        return pa.chunked_array([pa.nulls(4, pa.string()), *ids.chunks, ids.chunks[0][:1]])

    report = find_duplicate_ids(good.store, TABLE, "event_id", read_column)
    assert set(report.duplicates) == {DT, LIVE_DT}
    assert all(len(ids) == 1 and ids != ["None"] for ids in report.duplicates.values())
    expected = sum(good.expected(DT).values()) + sum(good.expected(LIVE_DT).values())
    assert report.rows_checked == expected + 2 * 5


def test_rows_unpublished_past_their_interval_fail_publication_lag(
    good: World, clock: FakeClock
) -> None:
    """The store's clock is the fake one: a live commit left unpublished past a publication
    tick and the margin fails, and so does a delayed object left unmerged past
    `merge.delayed_interval` and the margin; publishing (and merging) makes it pass again."""
    good.ingest(1, LIVE_DT)
    assert run(good)["publication_lag"].passed  # just committed: within its interval
    clock.advance(PUBLISH_MARGIN_MS / 1000 + 1)
    outcome = run(good)["publication_lag"]
    assert not outcome.passed and outcome.metadata["behind"] == 1
    assert f"{TABLE} dt={LIVE_DT}: ids 4..4 unpublished (published up to 3)" in outcome.summary
    good.publish(LIVE_DT)
    assert run(good)["publication_lag"].summary == (
        "2 table partitions: every committed row is published"
    )

    good.ingest(1)  # DT is closed and switched: a delayed object, visible once merged
    wait_s = good.config.merge.delayed_interval_s + MERGE_MARGIN_MS / 1000
    clock.advance(wait_s)
    assert run(good)["publication_lag"].passed
    clock.advance(1)
    found = failed(good)
    assert set(found) == {"publication_lag"}
    assert "delayed object 5 was committed" in found["publication_lag"]
    good.merge()
    good.publish()
    assert run(good)["publication_lag"].passed


class _Rows:
    """Just the ledger reads `publication_lag` makes, recording which partitions' objects it
    reads."""

    def __init__(self, partitions: list[TablePartition], objects: list[RegisteredObject]):
        self.partitions, self.objects = partitions, objects
        self.read: list[str | None] = []

    def table_partitions(self, table: str) -> list[TablePartition]:
        return self.partitions

    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        self.read.append(dt)
        return [o for o in self.objects if o.dt == dt]


def _object(dt: str, object_id: int, committed_at_ms: int | None) -> RegisteredObject:
    return RegisteredObject(
        TABLE, dt, object_id, f"s{object_id}", 1, 1, "src", "k", 1, False, committed_at_ms
    )


def test_publication_lag_reads_only_partitions_behind_and_passes_on_unknown_times() -> None:
    """Objects are read only for a partition whose row shows ids past what is published; one
    whose unpublished objects have no commit time passes, with a note."""
    published = TablePartition(
        TABLE, "2027-01-13", next_object_id=3, current_manifest_version=0, published_upper=2,
        publication_seq=1,
    )  # fmt: skip
    behind = replace(published, dt="2027-01-14", next_object_id=4)
    ledger = _Rows([published, behind], [_object("2027-01-14", 3, None)])
    outcome = checks.publication_lag(ledger, TABLE, 300.0, now_ms=10**15)  # type: ignore[arg-type]
    assert ledger.read == ["2027-01-14"]
    assert outcome.passed and outcome.metadata["unknown_commit_times"] == 1
    assert outcome.summary == (
        "2 table partitions: 1 behind, none past its publication deadline; 1 unpublished ids "
        f"have an unknown commit time: {TABLE} dt=2027-01-14: ids 3..3 unpublished (published "
        "up to 2), 1 with an unknown commit time"
    )
    ledger.objects = [_object("2027-01-14", 3, 10**15 - PUBLISH_MARGIN_MS - 1)]
    late = checks.publication_lag(ledger, TABLE, 300.0, now_ms=10**15)  # type: ignore[arg-type]
    assert not late.passed and late.severity == "error" and late.metadata["behind"] == 1
