"""`leasehold doctor`: check a configuration end to end, before a run finds out the hard way.

`leasehold config` validates values; this contacts what they name. A production profile
(DynamoDB + S3 + Glue + a Spark cluster or Connect server + a Postgres-backed Dagster instance)
fails in many places a value check cannot see — credentials, a table without its index, a
bucket the role may not write, a Connect server that is down — and a run that meets one of
those fails minutes in, in a log. Each check here prints PASS or FAIL, what it found and, on
FAIL, what to change. Every check touches only scratch data it deletes again (a
`leasehold-doctor|…` item, `_leasehold_doctor/…` objects). Exit 0 when all pass, 1 otherwise.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import uuid
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from resources.catalog.settings import CatalogSettings
from resources.cli.config import effective_configuration
from resources.cli.doctor_check import SCRATCH_PREFIX, Check, error_text
from resources.cli.doctor_notifications import check_notifications
from resources.cli.doctor_spark import check_spark
from resources.cli.doctor_store import check_store
from resources.errors import ConfigError
from resources.objects.factory import object_store_for
from resources.settings import default_data_dir
from resources.spark.session import SparkSettings
from resources.stores.settings import settings_from_env
from resources.streams import LakeSettings

SPARK_TIMEOUT_S = 180.0
CONFIG_FIX = "`leasehold config` shows every setting and its variable (docs/reference.md)"


# -- object stores -------------------------------------------------------------------------------


def check_objects(lake: LakeSettings) -> Iterator[Check]:
    for name, config in sorted(lake.streams().items()):
        yield _check_source(lake, name, config.source)
        for role, url in (("table", config.table), ("quarantine", config.quarantine)):
            yield _check_writable(lake, name, role, url)


def _bucket_fix(url: str) -> str:
    if url.startswith("s3://"):
        bucket = url[len("s3://") :].split("/", 1)[0]
        return (
            f"create bucket {bucket!r} or fix the stream's URL in the streams file; check "
            "LEASEHOLD_S3_ENDPOINT_URL / LEASEHOLD_S3_REGION and the role's s3:ListBucket, "
            "GetObject, PutObject, DeleteObject"
        )
    return "create the directory or fix the stream's URL in the streams file"


def _check_source(lake: LakeSettings, name: str, url: str) -> Check:
    what = f"objects: {name} source readable"
    if url.startswith("file://") and not Path(url[len("file://") :]).exists():
        # `leasehold run` writes a sample into a local source that is empty or missing.
        return Check(what, True, f"{url} does not exist yet (`leasehold run` writes a sample)")
    try:
        store = object_store_for(url, endpoint_url=lake.s3_endpoint_url, region=lake.region)
        found = store.list_after(None, 1)
    except Exception as exc:  # noqa: BLE001
        return Check(what, False, f"listing {url}: {error_text(exc)}", _bucket_fix(url))
    return Check(what, True, f"{url} listed ({'an object' if found else 'empty'})")


def _check_writable(lake: LakeSettings, name: str, role: str, url: str) -> Check:
    what = f"objects: {name} {role} writable"
    key = f"{SCRATCH_PREFIX}/{uuid.uuid4().hex}"
    data = b"leasehold doctor scratch object\n"
    try:
        store = object_store_for(url, endpoint_url=lake.s3_endpoint_url, region=lake.region)
        store.put_bytes(key, data)
        try:
            if store.get_bytes(key) != data:
                raise RuntimeError("the object read back differs from the one written")
        finally:
            store.delete(key)
            if url.startswith("file://"):  # no empty scratch directory left in a local lake
                with contextlib.suppress(OSError):
                    (Path(url[len("file://") :]) / SCRATCH_PREFIX).rmdir()
    except Exception as exc:  # noqa: BLE001
        return Check(
            what, False, f"write+read+delete under {url}: {error_text(exc)}", _bucket_fix(url)
        )
    return Check(what, True, f"wrote, read and deleted {url}/{key}")


# -- catalog -------------------------------------------------------------------------------------


def check_catalogs(settings: CatalogSettings, lake: LakeSettings) -> Iterator[Check]:
    """The catalog of each table format the streams use: Hive partitions (the local file, or
    the Glue database) and Iceberg tables (the SQL catalog's file, or the Glue database, or
    the REST catalog answering)."""
    formats = {config.table_format for config in lake.streams().values()}
    if "manifests" in formats or settings.catalog == "glue":
        yield check_catalog(settings)
    if "iceberg" in formats:
        yield check_iceberg_catalog(settings, lake)


def check_iceberg_catalog(settings: CatalogSettings, lake: LakeSettings) -> Check:
    """Local: the SQL catalog's file can be written (opening it would create it). Glue and
    REST: the catalog answers a listing of leasehold's namespace, within two attempts."""
    if settings.catalog == "local":
        return _writable(
            "catalog: Iceberg SQL catalog writable",
            settings.iceberg_sqlite_path().resolve(),
            "set LEASEHOLD_ICEBERG_CATALOG_PATH (or LEASEHOLD_DATA_DIR) to a writable place",
        )
    from pyiceberg.exceptions import NoSuchNamespaceError

    from resources.catalog.iceberg.catalogs import open_catalog
    from resources.retry import RetryPolicy

    what = "catalog: Iceberg catalog answers"
    try:
        opened = open_catalog(
            settings,
            s3_endpoint_url=lake.s3_endpoint_url,
            s3_region=lake.region,
            retry=RetryPolicy(max_attempts=2, base_delay_s=0.2, max_delay_s=1.0),
        )
        try:
            namespace = opened.namespace
            tables = opened.call("list tables", lambda: opened.catalog.list_tables(namespace))
            found = f"{len(tables)} tables in namespace {opened.namespace!r}"
        except NoSuchNamespaceError:
            found = f"namespace {opened.namespace!r} not created yet (the first publication does)"
    except Exception as exc:  # noqa: BLE001  (every failure is this check's finding)
        return Check(
            what,
            False,
            error_text(exc),
            "check LEASEHOLD_ICEBERG_REST_URI and its credential or token"
            if settings.catalog == "rest"
            else "check the credentials may call glue:GetDatabase, GetTable(s), CreateTable, "
            "UpdateTable; and LEASEHOLD_GLUE_ENDPOINT_URL / LEASEHOLD_GLUE_REGION",
        )
    return Check(what, True, f"{opened.where}: {found}")


def _writable(what: str, path: Path, fix: str) -> Check:
    existing = next((p for p in [path.parent, *path.parent.parents] if p.exists()), Path("/"))
    if os.access(existing, os.W_OK):
        return Check(what, True, str(path))
    return Check(what, False, f"{existing} is not writable: {path} cannot be written", fix)


def check_catalog(settings: CatalogSettings) -> Check:
    """Hive partitions' catalog: the local file can be written, or the Glue database
    exists."""
    if settings.catalog == "local":
        return _writable(
            "catalog: local file writable",
            settings.local_path().resolve(),
            "set LEASEHOLD_CATALOG_PATH (or LEASEHOLD_DATA_DIR) to a writable place",
        )
    import boto3
    from botocore.config import Config

    glue = boto3.session.Session(region_name=settings.glue_region).client(
        "glue",
        endpoint_url=settings.glue_endpoint_url,
        config=Config(retries={"total_max_attempts": 2}, connect_timeout=3, read_timeout=10),
    )
    where = f"Glue database {settings.glue_database!r} in {settings.glue_region} at " + (
        settings.glue_endpoint_url or "the AWS endpoint"
    )
    request: dict[str, Any] = {"Name": settings.glue_database.lower()}
    if settings.glue_catalog_id:
        request["CatalogId"] = settings.glue_catalog_id
    try:
        glue.get_database(**request)
    except Exception as exc:  # noqa: BLE001
        code = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        if code == "EntityNotFoundException":
            return Check(
                "catalog: Glue database exists",
                False,
                f"{where} does not exist",
                "create it (`aws glue create-database --database-input "
                f"Name={settings.glue_database.lower()}`), or let the first publication create "
                "it (needs glue:CreateDatabase); or fix LEASEHOLD_GLUE_DATABASE",
            )
        return Check(
            "catalog: Glue database exists",
            False,
            f"{where}: {error_text(exc)}",
            "check the credentials may call glue:GetDatabase, GetTable(s), CreateTable, "
            "UpdateTable, GetPartition(s), CreatePartition, UpdatePartition; and "
            "LEASEHOLD_GLUE_ENDPOINT_URL / LEASEHOLD_GLUE_REGION",
        )
    return Check("catalog: Glue database exists", True, where)


# -- Dagster -------------------------------------------------------------------------------------


def check_dagster() -> Check:
    from coordination_assets.instance_check import probe_instance

    home = os.environ.get("DAGSTER_HOME")
    what = "dagster: instance storage answers"
    if not home:
        default = default_data_dir() / "dagster_home"
        return Check(
            what,
            True,
            f"DAGSTER_HOME unset: `leasehold run` uses the embedded SQLite instance at {default}"
            " (the daemon and webserver need DAGSTER_HOME: docs/production.md)",
        )
    if not (Path(home) / "dagster.yaml").exists():
        return Check(
            what,
            False,
            f"{home}/dagster.yaml does not exist",
            "copy deploy/dagster.yaml there (Postgres storage; docs/production.md)",
        )
    try:
        storage = probe_instance(Path(home))
    except Exception as exc:  # noqa: BLE001 - Dagster's, SQLAlchemy's or psycopg2's
        fix = (
            "check the storage section of dagster.yaml and that its database is reachable "
            "(DAGSTER_PG_URL for deploy/dagster.yaml)"
        )
        if "No module named 'psycopg'" in str(exc):
            fix = (
                "write the URL as postgresql+psycopg2://… (SQLAlchemy 2.1 reads a bare "
                "postgresql:// as psycopg 3, which is not installed; dagster-postgres uses "
                "psycopg2)"
            )
        return Check(what, False, f"{home}/dagster.yaml: {error_text(exc)}", fix)
    if storage.spark_pool_limit is None:
        return Check(
            what,
            False,
            storage.describe(),
            "set concurrency.pools (granularity: run, default_limit: 2) in dagster.yaml as "
            "deploy/dagster.yaml does, or `dagster instance concurrency set leasehold_spark 2`",
        )
    return Check(what, True, storage.describe())


# -- the command ---------------------------------------------------------------------------------


def run_checks(
    *, spark_timeout_s: float = SPARK_TIMEOUT_S, spark_query: bool = True
) -> list[Check]:
    """Every check, in the order a run needs what they check. A configuration that does not
    validate stops here: every other check would read the same bad values."""
    try:
        config = effective_configuration()
    except ConfigError as exc:
        return [Check("configuration valid", False, error_text(exc), CONFIG_FIX)]
    checks = [
        Check(
            "configuration valid",
            True,
            f"{len(config.settings)} settings, streams: {', '.join(config.streams)}",
        )
    ]
    steps: list[Callable[[], Iterator[Check] | Check]] = [
        lambda: check_store(settings_from_env()),
        lambda: check_objects(LakeSettings.from_env()),
        lambda: check_notifications(LakeSettings.from_env()),
        lambda: check_catalogs(CatalogSettings.from_env(), LakeSettings.from_env()),
        lambda: check_spark(SparkSettings.from_env(), spark_timeout_s, spark_query),
        check_dagster,
    ]
    for step in steps:
        found = step()
        checks += [found] if isinstance(found, Check) else list(found)
    return checks


def cmd_doctor(args: argparse.Namespace) -> int:
    checks = run_checks(spark_timeout_s=args.spark_timeout, spark_query=not args.no_spark_query)
    ok = all(c.ok for c in checks)
    if args.json:
        print(json.dumps({"ok": ok, "checks": [asdict(c) for c in checks]}, indent=2))
    else:
        print("\n".join(c.text() for c in checks))
        failed = sum(not c.ok for c in checks)
        print(f"\n{len(checks) - failed} passed, {failed} failed")
    return 0 if ok else 1


def add_doctor_command(doctor: argparse.ArgumentParser) -> None:
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--spark-timeout",
        type=float,
        default=SPARK_TIMEOUT_S,
        help="seconds the Spark check may take to start a session and run a query",
    )
    doctor.add_argument(
        "--no-spark-query",
        action="store_true",
        help="check only that a Connect server answers; start no Spark session",
    )
    doctor.set_defaults(fn=cmd_doctor)


DOCTOR_HELP = (
    "check the configuration end to end: credentials, store table (keys, GSI, TTL), buckets, "
    "event queues, catalog, Spark, Dagster storage; PASS/FAIL each with the fix (exit 1 if one "
    "fails)"
)
