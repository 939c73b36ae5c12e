"""`CoordinationResource`: the lease store and leases, as a Dagster resource.

Configured by environment in production (`EnvVar("LEASEHOLD_STORE_BACKEND")` …) and needing
no configuration at all for the embedded SQLite default. The store itself is plain Python
(`resources.coordination`, `resources.stores`); this file only adapts it to Dagster's resource
lifecycle.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from dagster import ConfigurableResource, EnvVar, InitResourceContext
from pydantic import PrivateAttr

from resources.coordination.health import LeaseHealthReport, lease_health_report
from resources.coordination.items import ItemType
from resources.coordination.lease import Lease, LeaseTiming, new_owner_id
from resources.coordination.lease_store import LeaseStore
from resources.stores import build_store
from resources.stores.settings import (
    ENV_VARS,
    INT_FIELDS,
    StoreSettings,
    parse_env_value,
    settings_from_env,
)


class CoordinationResource(ConfigurableResource):
    """Lease acquisition and renewal against the coordination store (SQLite or DynamoDB)."""

    backend: str = "sqlite"
    sqlite_path: str | None = None
    table_name: str = "leasehold-coordination"
    region: str = "us-east-1"
    endpoint_url: str | None = None
    sts_role_arn: str | None = None
    sts_external_id: str | None = None
    skip_table_creation: bool = False
    billing_mode: str = "PROVISIONED"
    provisioned_read_capacity_units: int = 10
    provisioned_write_capacity_units: int = 10
    ttl: str | None = None
    partition_prefix: str | None = None
    ownership_timeout_seconds: float = LeaseTiming.ownership_timeout_s
    renew_interval_seconds: float = LeaseTiming.renew_interval_s
    reopen_after_seconds: float = LeaseTiming.reopen_after_s
    max_closed_count: int = LeaseTiming.max_closed_count
    # A partition UNASSIGNED this long has no run coming for it: its run failed or was canceled
    # before taking it, or a stopping run handed it back. The discovery sensor then asks for a
    # run of it again, and `lease_health` reports it. Longer than a busy run queue's wait.
    unassigned_retry_after_seconds: float = 1800.0

    _store: LeaseStore | None = PrivateAttr(default=None)
    _owner: str | None = PrivateAttr(default=None)

    def settings(self) -> StoreSettings:
        return StoreSettings(
            backend=self.backend,
            sqlite_path=self.sqlite_path,
            table_name=self.table_name,
            region=self.region,
            endpoint_url=self.endpoint_url,
            sts_role_arn=self.sts_role_arn,
            sts_external_id=self.sts_external_id,
            skip_table_creation=self.skip_table_creation,
            billing_mode=self.billing_mode,
            provisioned_read_capacity_units=self.provisioned_read_capacity_units,
            provisioned_write_capacity_units=self.provisioned_write_capacity_units,
            ttl=self.ttl,
            partition_prefix=self.partition_prefix,
        )

    def timing(self) -> LeaseTiming:
        return LeaseTiming(
            ownership_timeout_s=self.ownership_timeout_seconds,
            renew_interval_s=self.renew_interval_seconds,
            reopen_after_s=self.reopen_after_seconds,
            max_closed_count=self.max_closed_count,
        )

    def setup_for_execution(self, context: InitResourceContext) -> None:
        # Fail fast: invalid configuration stops the run before any step does work.
        self.timing()
        if not self.unassigned_retry_after_seconds >= 1:
            raise ValueError(
                "unassigned_retry_after_seconds must be at least 1 "
                f"(got {self.unassigned_retry_after_seconds})"
            )
        self.store  # noqa: B018 - builds and validates

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        if self._store is not None:
            self._store.close_store()
            self._store = None

    @property
    def store(self) -> LeaseStore:
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


def coordination_resource_from_env() -> CoordinationResource:
    """The resource as Definitions should bind it: each field that has its environment variable
    set is bound to it (`EnvVar`, so the UI shows where the value comes from and secrets never
    land in run config); every other field keeps its default, which is the embedded SQLite
    store. Values are validated here, so a bad variable fails the code location at load with a
    message naming the field, before any run starts."""
    settings_from_env()  # validate now; raises StoreConfigError naming the field
    kwargs: dict[str, object] = {}
    for field, var in ENV_VARS.items():
        raw = os.environ.get(var)
        if not raw:
            continue
        if field in INT_FIELDS:
            kwargs[field] = EnvVar.int(var)
        elif isinstance(parse_env_value(field, raw), bool):
            kwargs[field] = parse_env_value(field, raw)
        else:
            kwargs[field] = EnvVar(var)
    return CoordinationResource(**kwargs)
