"""`leasehold redrive`: dead letters back to CLOSED and due, by key or all of a stream's, on both
backends; everything else refused one line each, exit 1; a bad command line exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from resources.cli.main import main
from resources.coordination.backoff import ReopenBackoff
from resources.coordination.items import PartitionStatus
from resources.coordination.lease_store import LeaseStore
from resources.stores import build_store
from resources.stores.settings import settings_from_env
from tests.support.cli_env import configure_store_env

PROGRESS = {"unit": [["k1", 5], ["k2", 5]], "done": ["k1"]}


@pytest.fixture(params=["sqlite", "dynamodb"])
def configured(request, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> LeaseStore:
    """The environment of a deployment with the repository's streams file, and its store
    holding two dead letters of `events` (one key with a `|`), a completed unit and a unit of
    another stream; closed again at the end."""
    configure_store_env(request, monkeypatch, tmp_path, request.param)
    store = build_store(settings_from_env())
    sid = store.source_identifier("events")
    keys = ["bucket|dead-b", "dead-a", "done"]
    store.create_partitions(sid, keys, progress_state=json.dumps(PROGRESS))
    for key in keys[:2]:
        token = store.acquire(sid, key, "run", 60).token
        store.close(token, ReopenBackoff.fixed(1), max_closed_count=0, reason=f"{key}: 403")
    store.complete(store.acquire(sid, "done", "run", 60).token)
    other = store.source_identifier("other")
    store.create_partitions(other, ["x"])
    store.close(store.acquire(other, "x", "run", 60).token, ReopenBackoff.fixed(1), 0)
    yield store
    store.close_store()


def test_redrive_by_key_and_all(configured: LeaseStore, capsys) -> None:
    store, sid = configured, configured.source_identifier("events")
    before = {i.partition_key: i for i in store.iter_items(sid)}

    assert main(["redrive", "events", "--all", "--dry-run"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "events: would re-drive 'bucket|dead-b' (dead-lettered after 1 closes: bucket|dead-b: 403)",
        "events: would re-drive 'dead-a' (dead-lettered after 1 closes: dead-a: 403)",
    ]
    assert {i.partition_key: i for i in store.iter_items(sid)} == before

    # The UI's partition key (`|` escaped) names the same unit; the others are refused.
    assert main(["redrive", "events", "bucket%7Cdead-b", "done", "nope"]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines()[0] == (
        "events: re-driven 'bucket|dead-b' (dead-lettered after 1 closes: bucket|dead-b: 403)"
    )
    assert captured.err.splitlines() == [
        "leasehold: events: not re-driven 'done': not a dead letter (COMPLETED)",
        "leasehold: events: not re-driven 'nope': no lease item with this key",
    ]
    item = store.get(sid, "bucket|dead-b")
    assert (item.status, item.closed_count, item.dead_letter_reason) == (
        PartitionStatus.CLOSED,
        0,
        None,
    )
    assert item.progress == PROGRESS and item.epoch == before["bucket|dead-b"].epoch
    assert store.get(sid, "done") == before["done"]

    assert main(["redrive", "events", "--all", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document == {
        "stream": "events",
        "dryRun": False,
        "results": [
            {
                "sourcePartitionKey": "dead-a",
                "redriven": True,
                "deadLetterReason": "dead-a: 403",
                "closedCount": 1,
                "sourcePartitionStatus": "CLOSED",
            }
        ],
    }
    assert main(["redrive", "events", "--all"]) == 0
    assert capsys.readouterr().out == "events: no dead letters\n"
    # Another stream's dead letter was never touched; `status` shows what was done.
    other = store.get(store.source_identifier("other"), "x")
    assert other.dead_letter_reason is not None
    assert main(["status", "--json"]) == 0
    (events,) = [
        s for s in json.loads(capsys.readouterr().out)["sources"] if s["sourceIdentifier"] == sid
    ]
    assert events["counts"]["CLOSED"] == 2 and events["counts"]["DEAD_LETTERED"] == 0
    assert events["closed"]["due"] == 2
    assert events["metrics"]["partitionsRedriven"] == 2


@pytest.mark.parametrize(
    "argv",
    [["redrive", "events"], ["redrive", "events", "dead-a", "--all"], ["redrive", "nope", "--all"]],
)
def test_a_bad_command_line_is_exit_2_and_changes_nothing(
    configured: LeaseStore, argv: list[str], capsys
) -> None:
    sid = configured.source_identifier("events")
    before = list(configured.iter_items(sid))
    assert main(argv) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("leasehold: invalid "), err
    assert list(configured.iter_items(sid)) == before
