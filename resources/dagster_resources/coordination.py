"""`CoordinationResource`: the lease store and leases, as a Dagster resource.

Configured by environment in production (`EnvVar("LEASEHOLD_STORE_BACKEND")` …) and needing
no configuration at all for the embedded SQLite default. The store itself is plain Python
(`resources.coordination`, `resources.stores`); this file only adapts it to Dagster's resource
lifecycle.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import InitResourceContext
from pydantic import PrivateAttr

from resources.coordination.health import LeaseHealthReport, lease_health_report
from resources.coordination.items import ItemType
from resources.coordination.lease import Lease, LeaseTiming, TimingSettings, new_owner_id
from resources.dagster_resources.door import failing_the_run
from resources.dagster_resources.env import settings_resource
from resources.dagster_resources.runs import tag_run_process
from resources.stores import CoordinationStore, build_store
from resources.stores.settings import StoreSettings


# A base built at import from the declarations: mypy cannot follow it (its fields read as Any).
class CoordinationResource(settings_resource(StoreSettings, TimingSettings)):  # type: ignore[misc]
    """Lease acquisition and renewal against the coordination store (SQLite or DynamoDB).

    Its fields are the settings declared by `StoreSettings` (the store) and `TimingSettings`
    (lease timing, the retry window of partitions no run took). `from_env()` is the resource
    as Definitions binds it.
    """

    _store: CoordinationStore | None = PrivateAttr(default=None)
    _owner: str | None = PrivateAttr(default=None)

    def settings(self) -> StoreSettings:
        settings: StoreSettings = self.settings_of(StoreSettings)
        return settings

    def timing(self) -> LeaseTiming:
        timing: TimingSettings = self.settings_of(TimingSettings)
        return timing.lease_timing()

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Fail fast: invalid configuration, or a store that does not answer, stops the run
        # before any step does work, with leasehold's message on top (`failing_the_run`).
        with failing_the_run():
            self.validate_settings()
            if context.run is not None and context.instance is not None:
                # First thing in a run: from here on a tick can tell if this process dies.
                tag_run_process(context.instance, context.run)
            self.store  # noqa: B018 - builds the store

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._store is not None:
            self._store.close_store()
            self._store = None

    @property
    def store(self) -> CoordinationStore:
        if self._store is None:
            self._store = build_store(self.settings())
        return self._store

    @property
    def owner(self) -> str:
        if self._owner is None:
            self._owner = new_owner_id()
        return self._owner

    def source_identifier(self, stream: str) -> str:
        return self.store.source_identifier(stream, ItemType.PARTITION)

    def lease_health(self, stream: str | None) -> LeaseHealthReport:
        """Of one stream's partitions, or of every stream's with None."""
        return lease_health_report(
            self.store, stream, self.ownership_timeout_seconds, self.unassigned_retry_after_seconds
        )

    @contextmanager
    def hold(
        self, stream: str, partition_key: str, on_lost: Callable[[Lease], None] | None = None
    ) -> Iterator[Lease]:
        """Acquire a named partition and keep it renewed for the block.

        Raises `PartitionUnavailableError` (e.g. already COMPLETED, or held by a live owner)
        or `PartitionNotFoundError` without entering the block.
        """
        timing = self.timing()
        item = self.store.acquire(
            self.source_identifier(stream), partition_key, self.owner, timing.ownership_timeout_s
        )
        with Lease(self.store, item, timing, on_lost=on_lost) as lease:
            yield lease

    @contextmanager
    def hold_next(
        self, stream: str, on_lost: Callable[[Lease], None] | None = None
    ) -> Iterator[Lease | None]:
        """Acquire whatever is next in the acquisition order; yields None when nothing is."""
        timing = self.timing()
        item = self.store.acquire_next(
            self.source_identifier(stream), self.owner, timing.ownership_timeout_s
        )
        if item is None:
            yield None
            return
        with Lease(self.store, item, timing, on_lost=on_lost) as lease:
            yield lease
