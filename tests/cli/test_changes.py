"""`leasehold changes ls|ack` and the pending changes `leasehold status` names, on both
backends: a pending change is listed with the command that clears it, acknowledged once (only
the key given, when one is), then no longer named."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from resources.cli.main import main
from resources.coordination.source_changes import APPENDED, SourceChange
from resources.stores import build_store
from resources.stores.base import CoordinationStore
from resources.stores.settings import settings_from_env
from tests.support.cli_env import configure_store_env


@pytest.fixture(params=["sqlite", "dynamodb"])
def configured(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> Iterator[CoordinationStore]:
    """The repository's streams file and a store holding two pending changes of `events` and an
    appended one."""
    configure_store_env(request, monkeypatch, tmp_path, request.param)
    store = build_store(settings_from_env())
    sid = store.source_identifier("events")
    stored = store.record_changes(
        sid, [SourceChange(k, "e2", 5, "e1", 5, k, 1000) for k in ("a.jsonl", "b.jsonl", "c")]
    )
    store.set_change_state(sid, stored[2], APPENDED)
    yield store
    store.close_store()


def test_status_names_pending_changes_until_they_are_acknowledged(
    configured: CoordinationStore, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["status"]) == 0
    (line,) = [x for x in capsys.readouterr().out.splitlines() if "changed since" in x]
    assert line == (
        "events: 2 source objects changed since they were ingested, not read again (on_change: "
        "ignore): a.jsonl (and 1 more); see leasehold changes ls events, clear with leasehold "
        "changes ack events"
    )
    assert main(["changes", "ls", "events", "--json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert [(c["key"], c["state"]) for c in listed] == [
        ("a.jsonl", "pending"),
        ("b.jsonl", "pending"),
        ("c", "appended"),
    ]
    assert main(["changes", "ack", "events", "b.jsonl"]) == 0
    assert capsys.readouterr().out == "events: 1 pending changes acknowledged (not read)\n"
    assert main(["changes", "ack", "events"]) == 0
    assert main(["changes", "ack", "events"]) == 0  # twice: harmless
    assert capsys.readouterr().out.splitlines()[-1].startswith("events: 0 pending")
    assert main(["changes", "ls", "events"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "events: 3 changes recorded, 0 pending"
    assert out[0].split()[:2] == ["acknowledged", "a.jsonl"]
    assert main(["status"]) == 0
    assert "changed since" not in capsys.readouterr().out
