"""Invalid catalog configuration fails before any catalog is opened, naming the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.catalog.glue import GlueCatalog
from resources.catalog.local import LocalCatalog
from resources.catalog.opening import catalog_for, target_for
from resources.catalog.settings import CatalogConfigError, CatalogSettings
from resources.settings import DATA_DIR_ENV


@pytest.mark.parametrize(
    ("env", "field", "shown"),
    [
        ({"LEASEHOLD_CATALOG": "hive"}, "catalog", "hive"),
        ({"LEASEHOLD_CATALOG": "Glue"}, "catalog", "Glue"),
        (
            {"LEASEHOLD_CATALOG": "glue", "LEASEHOLD_GLUE_ENDPOINT_URL": "localhost:4566"},
            "glue_endpoint_url",
            "localhost:4566",
        ),
        (
            {"LEASEHOLD_CATALOG": "glue", "LEASEHOLD_GLUE_DATABASE": "my database"},
            "glue_database",
            "my database",
        ),
        ({"LEASEHOLD_CATALOG": "rest"}, "iceberg_rest_uri", "LEASEHOLD_CATALOG is rest"),
        (
            {"LEASEHOLD_CATALOG": "rest", "LEASEHOLD_ICEBERG_REST_URI": "catalog:8181"},
            "iceberg_rest_uri",
            "catalog:8181",
        ),
    ],
)
def test_bad_variables_name_the_field(env: dict[str, str], field: str, shown: str) -> None:
    with pytest.raises(CatalogConfigError) as err:
        CatalogSettings.from_env(env)
    assert err.value.field == field
    assert field in str(err.value) and shown in str(err.value)


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (CatalogSettings(catalog="hive"), "catalog"),
        (CatalogSettings(catalog="glue", glue_endpoint_url="ftp://x"), "glue_endpoint_url"),
        (CatalogSettings(catalog="glue", glue_database="bad/name"), "glue_database"),
    ],
)
def test_catalog_for_validates_before_opening(settings: CatalogSettings, field: str) -> None:
    with pytest.raises(CatalogConfigError) as err:
        catalog_for(settings)
    assert err.value.field == field


@pytest.mark.parametrize(
    ("settings", "table_format", "field", "shown"),
    [
        (CatalogSettings(), "delta", "table_format", "'delta' is unknown"),
        (CatalogSettings(), "Iceberg", "table_format", "'Iceberg' is unknown"),
        (
            CatalogSettings(catalog="rest", iceberg_rest_uri="http://127.0.0.1:1"),
            "manifests",
            "catalog",
            "Iceberg tables only",
        ),
        (CatalogSettings(catalog="rest"), "iceberg", "iceberg_rest_uri", "is rest"),
    ],
)
def test_target_for_names_the_field_before_contacting_anything(
    settings: CatalogSettings, table_format: str, field: str, shown: str
) -> None:
    with pytest.raises(CatalogConfigError) as err:
        target_for(settings, table_format)
    assert err.value.field == field
    assert field in str(err.value) and shown in str(err.value)


def test_catalog_for_builds_the_named_backend(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV, str(tmp_path))
    local = catalog_for(CatalogSettings.from_env({}))
    assert isinstance(local, LocalCatalog) and local.path == tmp_path / "catalog.json"
    explicit = catalog_for(CatalogSettings(catalog_path=str(tmp_path / "c.json")))
    assert isinstance(explicit, LocalCatalog) and explicit.path == tmp_path / "c.json"
    glue = catalog_for(
        CatalogSettings.from_env(
            {
                "LEASEHOLD_CATALOG": "glue",
                "LEASEHOLD_GLUE_DATABASE": "Analytics",
                "LEASEHOLD_GLUE_REGION": "eu-west-1",
                "LEASEHOLD_GLUE_ENDPOINT_URL": "http://127.0.0.1:1",
            }
        )
    )
    assert isinstance(glue, GlueCatalog)
    assert (glue.database, glue.region, glue.endpoint_url) == (
        "analytics",
        "eu-west-1",
        "http://127.0.0.1:1",
    )
