"""Several hosts on one Postgres-backed instance create the Spark pool's limit at once (issue 34,
item 4): the three first `leasehold run`s of three hosts started together and one crashed in
`ensure_spark_pool` — Dagster's insert of the limit lost to another's (`UniqueViolation` on
`concurrency_limits_concurrency_key_key`), then its handler ran in the aborted transaction
(`InFailedSqlTransaction`). The loser now reads the winner's limit and goes on.

Against a PostgreSQL server on 127.0.0.1 (tests/support/postgres_server.py): the race is
Postgres's, SQLite goes on after a failed statement in a transaction."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from dagster import DagsterInstance

from resources.dagster_resources.instance import SPARK_POOL, SPARK_RUN_LIMIT, ensure_spark_pool
from tests.support.postgres_server import LocalPostgres

pytestmark = pytest.mark.slow

HOSTS = 6


@pytest.fixture(scope="module")
def postgres() -> Iterator[LocalPostgres]:
    server = LocalPostgres().start()
    yield server
    server.stop()


def pg_home(home: Path, url: str) -> Path:
    """A DAGSTER_HOME whose instance is on `url`, with deploy/dagster.yaml's pool default."""
    home.mkdir(parents=True, exist_ok=True)
    (home / "dagster.yaml").write_text(
        f"""telemetry:
  enabled: false
storage:
  postgres:
    postgres_url: {url}
concurrency:
  pools:
    granularity: run
    default_limit: {SPARK_RUN_LIMIT}
"""
    )
    return home


def drop_limit(instance: DagsterInstance) -> None:
    instance.event_log_storage.delete_concurrency_limit(SPARK_POOL)


def test_a_host_that_read_no_limit_before_another_created_it_goes_on(
    postgres: LocalPostgres, tmp_path: Path
) -> None:
    """The race made deterministic: host B read "no limit" just before host A created it."""
    with (
        DagsterInstance.from_config(str(pg_home(tmp_path / "a", postgres.url))) as a,
        DagsterInstance.from_config(str(pg_home(tmp_path / "b", postgres.url))) as b,
    ):
        drop_limit(a)
        real, reads = b.event_log_storage.get_pool_limits, []

        def pool_limits() -> Sequence[Any]:  # B's first read: before A's commit
            reads.append(1)
            return [] if len(reads) == 1 else real()

        b.event_log_storage.get_pool_limits = pool_limits  # type: ignore[method-assign]
        assert ensure_spark_pool(a) == SPARK_RUN_LIMIT
        assert ensure_spark_pool(b) == SPARK_RUN_LIMIT
        info = a.event_log_storage.get_concurrency_info(SPARK_POOL)
        assert info.slot_count == SPARK_RUN_LIMIT  # the loser's slots rolled back with it


def test_hosts_creating_the_pool_at_once_all_go_on(postgres: LocalPostgres, tmp_path: Path) -> None:
    """HOSTS instances (one each, as on as many hosts) call `ensure_spark_pool` together, a
    few rounds, the limit dropped before each."""
    homes = [pg_home(tmp_path / f"host{i}", postgres.url) for i in range(HOSTS)]
    instances = [DagsterInstance.from_config(str(home)) for home in homes]
    try:
        for _ in range(5):
            drop_limit(instances[0])
            results = at_once(instances)
            assert results == [SPARK_RUN_LIMIT] * HOSTS, results
            info = instances[0].event_log_storage.get_concurrency_info(SPARK_POOL)
            assert info.slot_count == SPARK_RUN_LIMIT
    finally:
        for instance in instances:
            instance.dispose()


def at_once(instances: Sequence[DagsterInstance]) -> list[object]:
    """`ensure_spark_pool` on each instance, in a thread each, started behind one barrier:
    what each returned or raised."""
    barrier = threading.Barrier(len(instances))
    results: list[object] = [None] * len(instances)

    def host(i: int) -> None:
        barrier.wait()
        try:
            results[i] = ensure_spark_pool(instances[i])
        except Exception as exc:  # noqa: BLE001 - the caller's assertion names it
            results[i] = exc

    threads = [threading.Thread(target=host, args=(i,)) for i in range(len(instances))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results
