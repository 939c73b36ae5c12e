"""Opening an Iceberg catalog from `CatalogSettings`, and calling it with bounded retries.

- `local` (the embedded default): pyiceberg's `SqlCatalog` (as `internals.LeaseholdSqlCatalog`,
  like Glue's: the commit without pyiceberg's deep copy of the metadata) on the SQLite file
  `CatalogSettings.iceberg_sqlite_path()` (`$LEASEHOLD_DATA_DIR/iceberg/catalog.db`), namespace
  `leasehold`;
- `glue`: pyiceberg's Glue catalog in the Glue database, region, endpoint and catalog id the
  Hive Glue catalog uses (`LEASEHOLD_GLUE_*`); boto3's own retries off, as in
  `resources.catalog.glue`: every call goes through `IcebergCatalog.call`;
- `rest`: pyiceberg's REST catalog at `LEASEHOLD_ICEBERG_REST_URI` (warehouse, OAuth2
  credential or bearer token when set), namespace `leasehold`.

Table metadata on `s3://` roots is read and written through pyiceberg's FileIO with the S3
endpoint and region the lake's objects use (`LEASEHOLD_S3_ENDPOINT_URL`, `LEASEHOLD_S3_REGION`,
passed by the caller) and the AWS keys of the environment when set (boto3's default chain
reads the same ones for the objects).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pyiceberg.catalog import Catalog as PyIcebergCatalog
from pyiceberg.exceptions import (
    CommitStateUnknownException,
    NamespaceAlreadyExistsError,
    ServerError,
    ServiceUnavailableError,
)

from resources.catalog.base import CatalogUnreachableError
from resources.catalog.glue_items import glue_name
from resources.catalog.settings import CatalogSettings
from resources.retry import RetryPolicy, call_with_retries, log_retries

T = TypeVar("T")

log = logging.getLogger(__name__)

NAMESPACE = "leasehold"
"""The namespace of the embedded and REST catalogs (Glue: the Glue database)."""

_FILE_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


@dataclass
class IcebergCatalog:
    """An open pyiceberg catalog, the namespace leasehold's tables live in, and `call`, which
    retries what failed because the catalog (or the metadata store) did not answer."""

    catalog: PyIcebergCatalog
    namespace: str
    where: str
    """Names the catalog and where it is, for errors."""
    lowercase_names: bool = False
    """Glue: table names are lowercase (Athena's rule, as in the Hive Glue catalog)."""
    retry: RetryPolicy = field(default_factory=RetryPolicy)
    sleep: Callable[[float], None] = time.sleep

    def identifier(self, table: str) -> tuple[str, str]:
        return (self.namespace, glue_name(table, "table") if self.lowercase_names else table)

    def call(self, action: str, fn: Callable[[], T]) -> T:
        """`fn()`, tried again (bounded, full jitter) while it fails because the catalog or
        the metadata store is unreachable; then `CatalogUnreachableError` naming the catalog,
        the action and the attempts. Any other error is raised as it is."""
        return _with_retries(f"{self.where}: {action}", fn, self.retry, self.sleep)

    def ensure_namespace(self) -> None:
        """Create the namespace if missing; another process creating it at once is fine (the
        SQL catalog checks, then inserts: the one that inserts second gets the database's
        unique-key error, not `NamespaceAlreadyExistsError`, so any failure after which the
        namespace exists is success)."""

        def create() -> None:
            try:
                self.catalog.create_namespace(self.namespace)
            except NamespaceAlreadyExistsError:
                pass
            except Exception:
                if not self.catalog.namespace_exists(self.namespace):
                    raise

        self.call("create namespace", create)


def open_catalog(
    settings: CatalogSettings,
    *,
    s3_endpoint_url: str | None = None,
    s3_region: str | None = None,
    retry: RetryPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> IcebergCatalog:
    """The Iceberg catalog `settings` name (validated first: a bad field raises
    `CatalogConfigError` naming it), opened with bounded retries. Raises
    `CatalogUnreachableError` when it does not answer."""
    settings.validate()
    policy = retry or RetryPolicy()
    io = file_io_properties(s3_endpoint_url, s3_region or settings.glue_region)
    if settings.catalog == "glue":
        where = f"Iceberg Glue catalog {settings.glue_database!r} ({settings.glue_region}, "
        where += f"{settings.glue_endpoint_url or 'AWS'})"
        opened = _with_retries(f"{where}: open", lambda: _glue(settings, io), policy, sleep)
        namespace = glue_name(settings.glue_database, "database")
        return IcebergCatalog(opened, namespace, where, True, policy, sleep)
    if settings.catalog == "rest":
        where = f"Iceberg REST catalog {settings.iceberg_rest_uri}"
        opened = _with_retries(f"{where}: open", lambda: _rest(settings, io), policy, sleep)
        return IcebergCatalog(opened, NAMESPACE, where, False, policy, sleep)
    path = settings.iceberg_sqlite_path()
    where = f"Iceberg SQL catalog {path}"
    opened = _with_retries(f"{where}: open", lambda: _sqlite(path, io), policy, sleep)
    return IcebergCatalog(opened, NAMESPACE, where, False, policy, sleep)


def file_io_properties(endpoint_url: str | None, region: str | None) -> dict[str, str]:
    """pyiceberg FileIO properties for `s3://` metadata: the lake's endpoint and region, and
    the environment's AWS keys when set."""
    props = {"s3.region": region or "us-east-1", "s3.connect-timeout": "5"}
    if endpoint_url:
        props["s3.endpoint"] = endpoint_url
    for key, var in (
        ("s3.access-key-id", "AWS_ACCESS_KEY_ID"),
        ("s3.secret-access-key", "AWS_SECRET_ACCESS_KEY"),
        ("s3.session-token", "AWS_SESSION_TOKEN"),
    ):
        if os.environ.get(var):
            props[key] = os.environ[var]
    return props


def _sqlite(path: Path, io: dict[str, str]) -> PyIcebergCatalog:
    from resources.catalog.iceberg.internals import LeaseholdSqlCatalog

    path.parent.mkdir(parents=True, exist_ok=True)
    return LeaseholdSqlCatalog("leasehold", uri=f"sqlite:///{path}", **io)


def _glue(settings: CatalogSettings, io: dict[str, str]) -> PyIcebergCatalog:
    import boto3
    from botocore.config import Config

    from resources.catalog.iceberg.internals import LeaseholdGlueCatalog

    client = boto3.client(
        "glue",
        endpoint_url=settings.glue_endpoint_url,
        region_name=settings.glue_region,
        config=Config(retries={"total_max_attempts": 1}, connect_timeout=2, read_timeout=30),
    )
    if settings.glue_catalog_id:
        catalog_id = settings.glue_catalog_id

        def add_catalog_id(params: dict[str, Any], **_: Any) -> None:
            params.setdefault("CatalogId", catalog_id)

        client.meta.events.register("provide-client-params.glue", add_catalog_id)
    return LeaseholdGlueCatalog("leasehold", client=client, **io)


def _rest(settings: CatalogSettings, io: dict[str, str]) -> PyIcebergCatalog:
    from pyiceberg.catalog.rest import RestCatalog

    assert settings.iceberg_rest_uri is not None  # CatalogSettings.validate
    props = {"uri": settings.iceberg_rest_uri, **io}
    for key, value in (
        ("warehouse", settings.iceberg_rest_warehouse),
        ("credential", settings.iceberg_rest_credential),
        ("token", settings.iceberg_rest_token),
    ):
        if value:
            props[key] = value
    return RestCatalog("leasehold", **props)


def unreachable(exc: BaseException) -> bool:
    """Worth another attempt: the catalog or the metadata store did not answer (connection
    refused or reset, a timeout, throttling, a 5xx, SQLite busy)."""
    from resources.catalog.glue import retryable_glue_error

    if isinstance(exc, (ServerError, ServiceUnavailableError, CommitStateUnknownException)):
        return True
    if retryable_glue_error(exc):
        return True
    module = type(exc).__module__
    if module.startswith("sqlalchemy") and type(exc).__name__ == "OperationalError":
        return True
    if module.startswith(("requests", "urllib3")) and "Connection" in type(exc).__name__:
        return True
    if module.startswith(("requests", "urllib3")) and "Timeout" in type(exc).__name__:
        return True
    return isinstance(exc, OSError) and not isinstance(exc, _FILE_ERRORS)


def _with_retries(
    what: str, fn: Callable[[], T], policy: RetryPolicy, sleep: Callable[[float], None]
) -> T:
    def give_up(exc: BaseException, attempts: int) -> BaseException:
        return CatalogUnreachableError(f"{what} failed after {attempts} attempts: {exc}")

    return call_with_retries(
        fn,
        policy=policy,
        is_retryable=unreachable,
        on_give_up=give_up,
        sleep=sleep,
        on_retry=log_retries(log, logging.WARNING, what, policy),
    )
