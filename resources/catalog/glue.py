"""The AWS Glue catalog, through boto3.

A table is an external Hive table partitioned by `dt` (a string) whose data Athena, Trino and
Presto read through `SymlinkTextInputFormat`: each partition's location is a manifest version's
`symlink/` directory, whose text files list the Parquet objects (read with the Parquet serde).
Tables this code created carry `leasehold.managed=true`; one it did not create is never taken
over or written to, and is not listed.

Glue has no conditional write, so `publish_partition` reads the partition's
`leasehold.publication_seq` and then creates or updates it: two publishers racing may both pass
the check, and the lower one may land last. The publisher compares the catalog with the ledger
and repairs a partition that lags (docs/architecture.md); the check here keeps a slow publisher from
moving a partition back in every case but that race.

A table's columns only grow (`resources.catalog.base`). Glue's `UpdateTable` replaces the whole
table, so `ensure_table` and `add_columns` read the table, grow its column list and write it
back with the `VersionId` they read: Glue refuses the write with
`ConcurrentModificationException` if another writer updated the table in between, and the
update is decided again on the table as it is now (`_update_table`, at most
`MAX_TABLE_UPDATES` times). Two publishers adding columns at once both land.

boto3's own retries are off: every call goes through `call_with_retries` (bounded, with jitter)
and one that still fails raises `CatalogError` naming the database, region and endpoint.
Glue names are lowercase (Athena's rule): table and column names are lowercased, and one that
is not letters, digits and underscores after that is refused.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar, cast

from botocore.model import StructureShape

from resources.catalog import glue_items as items
from resources.catalog.base import (
    PARTITION_KEY,
    Catalog,
    CatalogError,
    CatalogPartition,
    CatalogUnreachableError,
    Column,
    TableDefinition,
    grown_columns,
)
from resources.catalog.glue_items import MANAGED, SEQ, glue_name
from resources.retry import RetryPolicy, call_with_retries, log_retries

T = TypeVar("T")

log = logging.getLogger(__name__)


RETRYABLE_CODES = {
    "ThrottlingException",
    "Throttling",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "InternalServiceException",
    "InternalFailure",
    "ServiceUnavailable",
    "ServiceUnavailableException",
    "OperationTimeoutException",
    "ConcurrentModificationException",
}
NOT_FOUND = "EntityNotFoundException"
ALREADY_EXISTS = "AlreadyExistsException"
CONCURRENT_MODIFICATION = "ConcurrentModificationException"

MAX_TABLE_UPDATES = 8
"""Read-grow-write rounds of one table update before giving up: each lost round means another
writer's update landed, so this many in a row is a writer that never stops."""


class _Expected(Exception):
    """A Glue answer the caller handles (not found, already exists), carried out of the retry
    loop without being retried or turned into a CatalogError."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class GlueCatalog(Catalog):
    """The `Catalog` in an AWS Glue database: a table's partitions point at their manifests,
    each update conditional on the table's VersionId."""

    def __init__(
        self,
        database: str,
        *,
        region: str,
        endpoint_url: str | None = None,
        catalog_id: str | None = None,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        import boto3
        from botocore.config import Config

        self.database = glue_name(database, "database")
        self.region = region
        self.endpoint_url = endpoint_url
        self.catalog_id = catalog_id
        self.retry = retry or RetryPolicy()
        self._sleep = sleep
        self.client = boto3.client(
            "glue",
            endpoint_url=endpoint_url,
            region_name=region,
            config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=30),
        )

    def __repr__(self) -> str:
        return f"GlueCatalog({self.database!r}, region={self.region!r})"

    # -- calls -------------------------------------------------------------------------------

    def _where(self) -> str:
        endpoint = self.endpoint_url or "AWS's endpoint"
        return f"Glue database {self.database!r} (region {self.region}, {endpoint})"

    def _call(
        self,
        action: str,
        fn: Callable[..., T],
        expected: tuple[str, ...] = (),
        /,
        **params: Any,
    ) -> T:
        """`fn(**params)` (plus the catalog id) with bounded retries of throttling, 5xx and
        connection errors; `_Expected` for not-found, already-exists and the `expected` error
        codes (not retried: the caller decides); any other failure is a CatalogError naming
        the action and where."""
        from botocore.exceptions import BotoCoreError, ClientError

        if self.catalog_id:
            params["CatalogId"] = self.catalog_id
        what = f"{self._where()}: {action}"

        def give_up(exc: BaseException, attempts: int) -> BaseException:
            return CatalogUnreachableError(f"{what} failed after {attempts} attempts: {exc}")

        def attempt() -> T:
            try:
                return fn(**params)
            except ClientError as exc:
                if _code(exc) in (NOT_FOUND, ALREADY_EXISTS, *expected):
                    raise _Expected(_code(exc), str(exc)) from exc
                raise

        try:
            return call_with_retries(
                attempt,
                policy=self.retry,
                is_retryable=retryable_glue_error,
                on_give_up=give_up,
                sleep=self._sleep,
                on_retry=log_retries(log, logging.WARNING, what, self.retry),
            )
        except BotoCoreError as exc:  # no credentials, a bad endpoint URL: not the request's
            raise CatalogUnreachableError(f"{what} failed: {exc}") from exc
        except ClientError as exc:
            raise CatalogError(f"{what} failed: {exc}") from exc

    def _get_table(self, name: str) -> dict[str, Any] | None:
        try:
            answer = self._call(
                "get table", self.client.get_table, DatabaseName=self.database, Name=name
            )
        except _Expected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise CatalogError(f"{self._where()}: get table {name!r}: {exc}") from exc
        return cast(dict[str, Any], answer["Table"])  # boto3-stubs: a TypedDict

    def _managed_table(self, table: str) -> tuple[str, dict[str, Any]]:
        """The Glue name and description of `table`, which must exist and be leasehold's."""
        name = glue_name(table, "table")
        found = self._get_table(name)
        if found is None or not items.managed(found):
            raise CatalogError(f"{self._where()} has no table {name!r} managed by leasehold")
        return name, found

    # -- tables ------------------------------------------------------------------------------

    def ensure_table(self, table: TableDefinition) -> None:
        name = glue_name(table.name, "table")
        columns = items.glue_columns(table.columns)
        if self._get_table(name) is None:
            self._ensure_database()
            try:
                self._call(
                    "create table",
                    self.client.create_table,
                    DatabaseName=self.database,
                    TableInput=items.table_input(name, columns, table.location),
                )
                log.info("%s: created table %s", self._where(), name)
                return
            except _Expected as exc:
                if exc.code != ALREADY_EXISTS:
                    raise CatalogError(f"{self._where()}: create table {name!r}: {exc}") from exc
            # Created meanwhile by another process: grown like any existing table.

        def wanted(found: dict[str, Any]) -> dict[str, Any] | None:
            grown = grown_columns(name, items.definition(found).columns, columns)
            table_input = items.table_input(name, grown, table.location)
            return None if items.comparable(found) == items.comparable(table_input) else table_input

        if self._update_table(name, wanted):
            log.info("%s: updated table %s to %s", self._where(), name, table)

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        name = glue_name(table, "table")
        wanted_columns = items.glue_columns(columns)
        added: list[Column] = []

        def wanted(found: dict[str, Any]) -> dict[str, Any] | None:
            held = items.definition(found).columns
            grown = grown_columns(name, held, wanted_columns)
            added[:] = grown[len(held) :]
            if not added:
                return None
            # Only the columns change: whatever else the table holds is written back as read.
            table_input = self._as_table_input(found)
            descriptor = dict(table_input.get("StorageDescriptor", {}))
            descriptor["Columns"] = [
                *descriptor.get("Columns", []),
                *({"Name": c.name, "Type": c.type} for c in added),
            ]
            table_input["StorageDescriptor"] = descriptor
            return table_input

        if self._update_table(name, wanted):
            log.info(
                "%s: table %s gained columns %s",
                self._where(), name, ", ".join(f"{c.name} {c.type}" for c in added),
            )  # fmt: skip
        return list(added)

    def _update_table(
        self, name: str, wanted: Callable[[dict[str, Any]], dict[str, Any] | None]
    ) -> bool:
        """Write `wanted(table)` (a TableInput; None: nothing to change) over the table as Glue
        holds it now, conditional on its `VersionId`: when another writer updated it since it
        was read (`ConcurrentModificationException`), read it again and decide again, at most
        `MAX_TABLE_UPDATES` times. Returns whether it wrote. Raises `CatalogError` when the
        table is missing or not leasehold's, what `wanted` raises, and `CatalogError` when
        every round lost."""
        for attempt in range(1, MAX_TABLE_UPDATES + 1):
            found = self._get_table(name)
            if found is None:
                raise CatalogError(f"{self._where()} has no table {name!r}")
            if not items.managed(found):
                raise CatalogError(
                    f"{self._where()} already holds a table {name!r} that leasehold did not "
                    f"create (no {MANAGED} parameter); leasehold will not take it over"
                )
            table_input = wanted(found)
            if table_input is None:
                return False
            params: dict[str, Any] = {"DatabaseName": self.database, "TableInput": table_input}
            if found.get("VersionId"):
                params["VersionId"] = found["VersionId"]
            try:
                self._call(
                    "update table",
                    self.client.update_table,
                    (CONCURRENT_MODIFICATION,),
                    **params,
                )
                return True
            except _Expected as exc:
                if exc.code != CONCURRENT_MODIFICATION:
                    raise CatalogError(f"{self._where()}: update table {name!r}: {exc}") from exc
                log.info(
                    "%s: table %s changed since version %s was read (round %d); reading again",
                    self._where(), name, found.get("VersionId"), attempt,
                )  # fmt: skip
                self._sleep(self.retry.delay(attempt))
        raise CatalogError(
            f"{self._where()}: update table {name!r}: another writer changed it first "
            f"{MAX_TABLE_UPDATES} times in a row"
        )

    def _as_table_input(self, found: dict[str, Any]) -> dict[str, Any]:
        """A table as `GetTable` returns it, as the `TableInput` that writes it back unchanged
        (the members `TableInput` takes; the read-only ones, like `VersionId`, left out)."""
        shape = self.client.meta.service_model.shape_for("TableInput")
        assert isinstance(shape, StructureShape)  # TableInput is a structure
        members = shape.members
        return {k: v for k, v in found.items() if k in members}

    def _ensure_database(self) -> None:
        try:
            self._call(
                "create database",
                self.client.create_database,
                DatabaseInput={
                    "Name": self.database,
                    "Description": "Tables published by leasehold",
                },
            )
            log.info("%s: created the database", self._where())
        except _Expected as exc:
            if exc.code != ALREADY_EXISTS:
                raise CatalogError(f"{self._where()}: create database: {exc}") from exc

    def table(self, name: str) -> TableDefinition | None:
        found = self._get_table(glue_name(name, "table"))
        return None if found is None or not items.managed(found) else items.definition(found)

    def tables(self) -> list[str]:
        names: list[str] = []
        params: dict[str, Any] = {"DatabaseName": self.database}
        while True:
            try:
                page = self._call("list tables", self.client.get_tables, **params)
            except _Expected as exc:
                if exc.code == NOT_FOUND:
                    return []  # no database yet: no tables
                raise CatalogError(f"{self._where()}: list tables: {exc}") from exc
            names.extend(
                t["Name"]
                for t in page.get("TableList", [])
                if items.managed(cast(dict[str, Any], t))
            )
            if not page.get("NextToken"):
                return sorted(names)
            params["NextToken"] = page["NextToken"]

    # -- partitions --------------------------------------------------------------------------

    def _get_partition(self, name: str, dt: str) -> dict[str, Any] | None:
        try:
            answer = self._call(
                f"get partition {name}/{PARTITION_KEY}={dt}",
                self.client.get_partition,
                DatabaseName=self.database,
                TableName=name,
                PartitionValues=[dt],
            )
        except _Expected as exc:
            if exc.code == NOT_FOUND:
                return None
            raise CatalogError(f"{self._where()}: get partition {name}/{dt}: {exc}") from exc
        return cast(dict[str, Any], answer["Partition"])  # boto3-stubs: a TypedDict

    def publish_partition(self, table: str, dt: str, location: str, seq: int) -> bool:
        name, found = self._managed_table(table)
        what = f"{name}/{PARTITION_KEY}={dt}"
        descriptor = {**found["StorageDescriptor"], "Location": location}
        partition_input = {
            "Values": [dt],
            "StorageDescriptor": descriptor,
            "Parameters": {SEQ: str(seq)},
        }
        current = self._get_partition(name, dt)
        if current is None:
            try:
                self._call(
                    f"create partition {what}",
                    self.client.create_partition,
                    DatabaseName=self.database,
                    TableName=name,
                    PartitionInput=partition_input,
                )
                return True
            except _Expected as exc:
                if exc.code != ALREADY_EXISTS:
                    raise CatalogError(f"{self._where()}: create partition {what}: {exc}") from exc
            # Another publisher created it since we looked: compare with what it wrote.
            current = self._get_partition(name, dt)
            if current is None:
                raise CatalogError(f"{self._where()}: partition {what} exists and then does not")
        if items.publication_seq(current, what) >= seq:
            return False
        try:
            self._call(
                f"update partition {what}",
                self.client.update_partition,
                DatabaseName=self.database,
                TableName=name,
                PartitionValueList=[dt],
                PartitionInput=partition_input,
            )
        except _Expected as exc:
            raise CatalogError(f"{self._where()}: update partition {what}: {exc}") from exc
        return True

    def partition(self, table: str, dt: str) -> CatalogPartition | None:
        name = glue_name(table, "table")
        found = self._get_partition(name, dt)
        if found is None:
            self._managed_table(table)  # a missing table is an error, not a missing partition
            return None
        return items.partition_from(name, found)

    def partitions(self, table: str) -> list[CatalogPartition]:
        name, _ = self._managed_table(table)
        out: list[CatalogPartition] = []
        params: dict[str, Any] = {"DatabaseName": self.database, "TableName": name}
        while True:
            try:
                page = self._call(
                    f"list partitions of {name}", self.client.get_partitions, **params
                )
            except _Expected as exc:
                raise CatalogError(f"{self._where()}: list partitions of {name}: {exc}") from exc
            out.extend(
                items.partition_from(name, cast(dict[str, Any], p))
                for p in page.get("Partitions", [])
            )
            if not page.get("NextToken"):
                return sorted(out, key=lambda p: p.dt)
            params["NextToken"] = page["NextToken"]


def _code(exc: Any) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def retryable_glue_error(exc: BaseException) -> bool:
    """Throttling, 5xx and connection errors: worth another attempt."""
    from botocore.exceptions import (
        ClientError,
        ConnectionClosedError,
        ConnectTimeoutError,
        EndpointConnectionError,
        ReadTimeoutError,
    )

    if isinstance(
        exc,
        (
            EndpointConnectionError,
            ConnectionClosedError,
            ConnectTimeoutError,
            ReadTimeoutError,
        ),
    ):
        return True
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        return _code(exc) in RETRYABLE_CODES or status >= 500
    return False
