"""The environment of a deployment for CLI tests: no `LEASEHOLD_*` variable of the caller's, a
data directory of the test's own, the repository's streams file, and the store backend asked
for (DynamoDB on the loopback server, a table of its own)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def configure_store_env(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, backend: str
) -> None:
    """Set the environment (undone by `monkeypatch`) for a store of `backend`."""
    for name in list(os.environ):
        if name.startswith("LEASEHOLD_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LEASEHOLD_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("LEASEHOLD_STREAMS", str(REPO / "streams.yaml"))
    if backend == "dynamodb":
        server = request.getfixturevalue("aws_server")
        monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "dynamodb")
        monkeypatch.setenv("LEASEHOLD_DYNAMODB_ENDPOINT_URL", server.endpoint_url)
        monkeypatch.setenv("LEASEHOLD_DYNAMODB_TABLE", f"leasehold-{uuid.uuid4().hex[:12]}")
