"""`leasehold table ls|files|read|history` over an Iceberg table (the default `table_format`):
the same commands as over Hive manifests (tests/cli/test_table.py), plus the table's history
and a date read as an older snapshot served it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.cli.exit_status import EXIT_FAILURE
from resources.publication.publisher import Publisher
from tests.cli.test_table import DT, DT2, STREAM, STREAMS_YAML, Published, published_env, run

ICEBERG_YAML = STREAMS_YAML.replace("table_format: manifests", "table_format: iceberg")


class IcebergPublished(Published):
    def publisher(self) -> Publisher:
        target = target_for(CatalogSettings.from_env(), "iceberg")
        return Publisher(self.config, self.store, self.objects, target)


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Published]:
    """As tests/cli/test_table.py's: DT 3 small objects (60 rows), DT2 one (5 rows), each
    published live — here into an Iceberg table on the embedded SQL catalog."""
    published = published_env(tmp_path, monkeypatch, IcebergPublished, ICEBERG_YAML)
    assert published.config.table_format == "iceberg"
    yield published
    published.store.close_store()


def history(capsys: pytest.CaptureFixture[str]) -> list[dict[str, object]]:
    code, out, err = run(capsys, "table", "history", STREAM, "--json")
    assert (code, err) == (0, "")
    return list(json.loads(out))


def event_ids(out: str) -> list[int]:
    return sorted(int(json.loads(line)["event_id"][1:]) for line in out.splitlines())


def test_ls_and_files_show_the_current_snapshot(env: Published, capsys) -> None:
    code, out, err = run(capsys, "table", "ls", STREAM, "--json")
    assert (code, err) == (0, "")
    rows = {r["dt"]: r for r in json.loads(out)}
    assert (rows[DT]["kind"], rows[DT]["upper"], rows[DT]["files"]) == ("live", 3, 3)
    assert (rows[DT2]["kind"], rows[DT2]["upper"], rows[DT2]["files"]) == ("live", 1, 1)
    assert rows[DT]["location"] == env.config.table  # an engine plans from the snapshot

    code, out, err = run(capsys, "table", "files", STREAM, DT, "--json")
    assert (code, err) == (0, "")
    files = json.loads(out)["files"]
    ledger = {o.url: o.content_length for o in env.store.ledger_objects(STREAM, DT)}
    assert {f["url"]: f["contentLength"] for f in files} == ledger


def test_history_and_reading_as_an_older_snapshot_served(env: Published, capsys) -> None:
    before = history(capsys)
    assert [h["dates"] for h in before] == [{DT: 1}, {DT2: 1}]  # one snapshot per publication run
    env.switch(DT)  # the same 60 rows, now from one merged object: a third snapshot
    after = history(capsys)
    assert [h["dates"] for h in after] == [{DT: 1}, {DT2: 1}, {DT: 2}]
    assert (after[-1]["added_files"], after[-1]["deleted_files"]) == (1, 3)

    code, out, _ = run(capsys, "table", "read", STREAM, DT, "--json")
    assert (code, event_ids(out)) == (0, list(range(1, 61)))
    first = str(before[0]["snapshot_id"])
    code, out, _ = run(capsys, "table", "read", STREAM, DT, "--as-of", first, "--json")
    assert (code, event_ids(out)) == (0, list(range(1, 61)))
    code, out, _ = run(capsys, "table", "read", STREAM, DT2, "--as-of", first, "--json")
    assert (code, out) == (0, "")  # DT2 was not published yet at the first snapshot

    code, out, err = run(capsys, "table", "read", STREAM, DT, "--as-of", "2000-01-01T00:00:00Z")
    assert (code, out) == (EXIT_FAILURE, "")
    assert "has no snapshot as of 2000-01-01 00:00:00+00:00 (it retains 3 snapshots" in err


def test_a_file_another_engine_took_out_of_the_snapshot_fails_served_files(
    env: Published, capsys
) -> None:
    code, out, _ = run(capsys, "check", "--json")
    assert code == 0, out
    target = target_for(CatalogSettings.from_env(), "iceberg")
    table = target.load(STREAM)  # type: ignore[attr-defined]
    gone = target.data_files(STREAM, DT)[0]  # type: ignore[attr-defined]
    with table.transaction() as tx, tx.update_snapshot().overwrite() as overwrite:
        entry = next(t.file for t in table.scan().plan_files() if t.file.file_path == gone.url)
        overwrite.delete_data_file(entry)  # another engine's commit, not leasehold's

    code, out, _ = run(capsys, "check", "--json", "--full")  # the ledger did not change
    assert code != 0
    failed = {c["check"]: c for c in json.loads(out) if not c["passed"]}
    assert "served_files" in failed
    assert (
        f"{STREAM} dt={DT} (seq 1): serves 2 files, the publication records 3"
        in (failed["served_files"]["summary"])
    )
