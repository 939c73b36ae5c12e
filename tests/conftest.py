from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from resources.stores import CoordinationStore, build_store
from resources.stores.settings import StoreSettings
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer
from tests.support.fakes import FakeClock, StoreFactory

# No traffic off loopback, ever; and no real AWS credentials reach a test.
os.environ.update(AWS_TEST_ENV)
os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")

# The recorder: every AWS action product code calls, compared with docs/iam-policy.json.
pytest_plugins = ["tests.support.spark_fixture", "tests.support.iam_policy_plugin"]

BACKENDS = ["sqlite", "dynamodb"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Modules with slow tests run first. A 3-minute test that starts last keeps CI waiting
    for it on one core while the other idles; the many short tests fill in behind the slow
    ones instead. With `--dist loadfile --no-loadscope-reorder` (pyproject.toml) xdist hands
    out whole modules in this order: a module's fixtures that start servers (Spark Connect,
    Postgres, `dagster dev`) start once, on one worker. (Not `loadgroup`: with pytest 9 its
    group marks are ignored, and modules were split over both workers, their servers started
    twice at once and the tests meant to run in order ran apart.)"""
    slow_modules = {item.module for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.module not in slow_modules)


@pytest.fixture(scope="session")
def aws_server() -> Iterator[LocalAwsServer]:
    server = LocalAwsServer().start()
    yield server
    server.stop()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def settings_for(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[..., StoreSettings]:
    """Settings for a fresh, isolated store of the given backend (own file or own table)."""

    def make(backend: str, **overrides: object) -> StoreSettings:
        if backend == "sqlite":
            base = StoreSettings(
                backend="sqlite", sqlite_path=str(tmp_path / f"{uuid.uuid4().hex}.db")
            )
        else:
            server = request.getfixturevalue("aws_server")
            base = StoreSettings(
                backend="dynamodb",
                table_name=f"leasehold-{uuid.uuid4().hex[:12]}",
                region="us-east-1",
                endpoint_url=server.endpoint_url,
            )
        return StoreSettings(**{**base.__dict__, **overrides})

    return make


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def make_store(
    backend: str, settings_for: Callable[..., StoreSettings], clock: FakeClock
) -> Iterator[StoreFactory]:
    """Build stores of the parametrized backend; several calls with the same settings share
    one underlying table or file (two nodes of one cluster)."""
    stores: list[CoordinationStore] = []

    def make(settings: StoreSettings | None = None, **overrides: object) -> CoordinationStore:
        store = build_store(settings or settings_for(backend, **overrides), clock=clock)
        stores.append(store)
        return store

    yield make
    for store in stores:
        store.close_store()


@pytest.fixture
def store(make_store: StoreFactory) -> CoordinationStore:
    return make_store(ttl="P1D")
