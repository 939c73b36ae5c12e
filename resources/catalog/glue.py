"""The AWS Glue catalog, through boto3.

A table is an external Hive table partitioned by `dt` (a string) whose data Athena, Trino and
Presto read through `SymlinkTextInputFormat`: each partition's location is a manifest version's
`symlink/` directory, whose text files list the Parquet objects (read with the Parquet serde).
Tables this code created carry `leasehold.managed=true`; one it did not create is never taken
over or written to, and is not listed.

Glue has no conditional write, so `publish_partition` reads the partition's
`leasehold.publication_seq` and then creates or updates it: two publishers racing may both pass
the check, and the lower one may land last. The publisher compares the catalog with the ledger
and repairs a partition that lags (ARCHITECTURE §6); the check here keeps a slow publisher from
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
import re
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from resources.catalog.base import (
    OUTPUT_FORMAT,
    PARQUET_SERDE,
    PARTITION_KEY,
    SYMLINK_INPUT_FORMAT,
    Catalog,
    CatalogError,
    CatalogPartition,
    CatalogUnreachableError,
    Column,
    TableDefinition,
    grown_columns,
)
from resources.retry import RetryPolicy, call_with_retries, log_retries

T = TypeVar("T")

log = logging.getLogger(__name__)

MANAGED = "leasehold.managed"
SEQ = "leasehold.publication_seq"
TABLE_PARAMETERS = {"classification": "parquet", "EXTERNAL": "TRUE", MANAGED: "true"}

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

_TABLE_NAME = re.compile(r"[a-z0-9_]{1,255}")
_DATABASE_NAME = re.compile(r"[a-z0-9_][a-z0-9_-]{0,254}")


def name_problem(name: str, what: str) -> str | None:
    """What keeps Glue (and Athena) from holding `name`, lowercased, as a `what` name."""
    pattern = _DATABASE_NAME if what == "database" else _TABLE_NAME
    if pattern.fullmatch(name.lower()):
        return None
    allowed = "letters, digits, '_' and '-'" if what == "database" else "letters, digits, '_'"
    return f"Glue cannot hold {what} name {name!r}: use 1-255 {allowed}"


def glue_name(name: str, what: str) -> str:
    """`name` as Glue holds it (lowercase); CatalogError if it cannot."""
    problem = name_problem(name, what)
    if problem is not None:
        raise CatalogError(problem)
    return name.lower()


class _Expected(Exception):
    """A Glue answer the caller handles (not found, already exists), carried out of the retry
    loop without being retried or turned into a CatalogError."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class GlueCatalog(Catalog):
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
        from botocore.exceptions import (
            BotoCoreError,
            ClientError,
            ConnectionClosedError,
            ConnectTimeoutError,
            EndpointConnectionError,
            ReadTimeoutError,
        )

        if self.catalog_id:
            params["CatalogId"] = self.catalog_id
        what = f"{self._where()}: {action}"

        def retryable(exc: BaseException) -> bool:
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
                is_retryable=retryable,
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
        return answer["Table"]

    def _managed_table(self, table: str) -> tuple[str, dict[str, Any]]:
        """The Glue name and description of `table`, which must exist and be leasehold's."""
        name = glue_name(table, "table")
        found = self._get_table(name)
        if found is None or not _managed(found):
            raise CatalogError(f"{self._where()} has no table {name!r} managed by leasehold")
        return name, found

    # -- tables ------------------------------------------------------------------------------

    def ensure_table(self, table: TableDefinition) -> None:
        name = glue_name(table.name, "table")
        columns = _glue_columns(table.columns)
        if self._get_table(name) is None:
            self._ensure_database()
            try:
                self._call(
                    "create table",
                    self.client.create_table,
                    DatabaseName=self.database,
                    TableInput=_table_input(name, columns, table.location),
                )
                log.info("%s: created table %s", self._where(), name)
                return
            except _Expected as exc:
                if exc.code != ALREADY_EXISTS:
                    raise CatalogError(f"{self._where()}: create table {name!r}: {exc}") from exc
            # Created meanwhile by another process: grown like any existing table.

        def wanted(found: dict[str, Any]) -> dict[str, Any] | None:
            grown = grown_columns(name, _definition(found).columns, columns)
            table_input = _table_input(name, grown, table.location)
            return None if _comparable(found) == _comparable(table_input) else table_input

        if self._update_table(name, wanted):
            log.info("%s: updated table %s to %s", self._where(), name, table)

    def add_columns(self, table: str, columns: Sequence[Column]) -> list[Column]:
        name = glue_name(table, "table")
        wanted_columns = _glue_columns(columns)
        added: list[Column] = []

        def wanted(found: dict[str, Any]) -> dict[str, Any] | None:
            held = _definition(found).columns
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
            if not _managed(found):
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
        members = self.client.meta.service_model.shape_for("TableInput").members
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
        return None if found is None or not _managed(found) else _definition(found)

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
            names.extend(t["Name"] for t in page.get("TableList", []) if _managed(t))
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
        return answer["Partition"]

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
        if _seq(current, what) >= seq:
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
        return _partition(name, found)

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
            out.extend(_partition(name, p) for p in page.get("Partitions", []))
            if not page.get("NextToken"):
                return sorted(out, key=lambda p: p.dt)
            params["NextToken"] = page["NextToken"]


def _code(exc: Any) -> str:
    return exc.response.get("Error", {}).get("Code", "")


def _managed(table: dict[str, Any]) -> bool:
    return table.get("Parameters", {}).get(MANAGED) == "true"


def _glue_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    """`columns` as Glue holds them: names lowercased (CatalogError for one it cannot hold)."""
    return tuple(Column(glue_name(c.name, "column"), c.type) for c in columns)


def _table_input(name: str, columns: Sequence[Column], location: str) -> dict[str, Any]:
    """The TableInput of a leasehold table: `columns` (Glue names), partitioned by `dt`, read
    through symlink manifests."""
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "Parameters": dict(TABLE_PARAMETERS),
        "PartitionKeys": [{"Name": PARTITION_KEY, "Type": "string"}],
        "StorageDescriptor": {
            "Columns": [{"Name": c.name, "Type": c.type} for c in columns],
            "Location": location,
            "InputFormat": SYMLINK_INPUT_FORMAT,
            "OutputFormat": OUTPUT_FORMAT,
            "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {}},
        },
    }


def _comparable(table: dict[str, Any]) -> tuple[Any, ...]:
    """What `ensure_table` sets, from a TableInput or a Glue table: equal means no update."""
    sd = table.get("StorageDescriptor", {})
    params = table.get("Parameters", {})
    return (
        table.get("TableType"),
        tuple((k["Name"], k["Type"]) for k in table.get("PartitionKeys", [])),
        tuple((c["Name"], c["Type"]) for c in sd.get("Columns", [])),
        sd.get("Location"),
        sd.get("InputFormat"),
        sd.get("OutputFormat"),
        sd.get("SerdeInfo", {}).get("SerializationLibrary"),
        tuple(params.get(k) for k in sorted(TABLE_PARAMETERS)),
    )


def _definition(table: dict[str, Any]) -> TableDefinition:
    sd = table["StorageDescriptor"]
    return TableDefinition(
        name=table["Name"],
        columns=tuple(Column(c["Name"], c["Type"]) for c in sd.get("Columns", [])),
        location=sd.get("Location", ""),
    )


def _seq(partition: dict[str, Any], what: str) -> int:
    """The publication seq a partition was set from; one without it (made by hand or by a
    crawler) counts as older than any publication, so publishing replaces it."""
    raw = partition.get("Parameters", {}).get(SEQ)
    try:
        return int(raw)
    except (TypeError, ValueError):
        log.warning(
            "Glue partition %s has no valid %s (%r): treating it as unpublished", what, SEQ, raw
        )
        return -1


def _partition(name: str, partition: dict[str, Any]) -> CatalogPartition:
    what = f"{name}/{PARTITION_KEY}={partition['Values'][0]}"
    return CatalogPartition(
        table=name,
        dt=partition["Values"][0],
        location=partition.get("StorageDescriptor", {}).get("Location", ""),
        seq=_seq(partition, what),
    )
