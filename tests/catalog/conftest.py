"""The publication targets every contract case runs over: Hive manifests on the local catalog
file and on Glue, Iceberg on the SQL catalog (SQLite) and on Glue with its tables on `s3://`
(both Glue ones through the proxy that checks `UpdateTable`'s `VersionId` as AWS does)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from resources.catalog.settings import CatalogSettings
from tests.support.aws_server import LocalAwsServer
from tests.support.glue_proxy import GlueProxy
from tests.support.target_lake import TargetSpec

TARGETS = ["hive-local", "hive-glue", "iceberg-sql", "iceberg-glue"]
LAKE_BUCKET = "iceberg-lake"


@pytest.fixture(scope="module")
def glue_proxy(aws_server: LocalAwsServer) -> Iterator[GlueProxy]:
    # Checking UpdateTable's VersionId as AWS does: the loopback server alone ignores it.
    with GlueProxy(aws_server.endpoint_url, page_size=50, check_table_versions=True) as proxy:
        yield proxy


@pytest.fixture(scope="module")
def lake_bucket(aws_server: LocalAwsServer) -> str:
    s3 = boto3.client("s3", region_name="us-east-1", endpoint_url=aws_server.endpoint_url)
    s3.create_bucket(Bucket=LAKE_BUCKET)
    return LAKE_BUCKET


def target_spec(kind: str, request: pytest.FixtureRequest, tmp_path: Path) -> TargetSpec:
    local_root = f"file://{tmp_path}/lake/events"
    database = f"db_{uuid.uuid4().hex[:12]}"
    if kind == "hive-local":
        return TargetSpec(
            CatalogSettings(catalog_path=str(tmp_path / "catalog.json")), "manifests", local_root
        )
    if kind == "iceberg-sql":
        settings = CatalogSettings(iceberg_catalog_path=str(tmp_path / "iceberg" / "catalog.db"))
        return TargetSpec(settings, "iceberg", local_root)
    proxy: GlueProxy = request.getfixturevalue("glue_proxy")
    glue = CatalogSettings(
        catalog="glue", glue_database=database, glue_endpoint_url=proxy.endpoint_url
    )
    if kind == "hive-glue":
        return TargetSpec(glue, "manifests", local_root)
    bucket = request.getfixturevalue("lake_bucket")
    server: LocalAwsServer = request.getfixturevalue("aws_server")
    return TargetSpec(glue, "iceberg", f"s3://{bucket}/{database}/events", server.endpoint_url)


@pytest.fixture(params=TARGETS)
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> TargetSpec:
    return target_spec(request.param, request, tmp_path)


@pytest.fixture(params=["iceberg-sql", "iceberg-glue"])
def iceberg_spec(request: pytest.FixtureRequest, tmp_path: Path) -> TargetSpec:
    return target_spec(request.param, request, tmp_path)
