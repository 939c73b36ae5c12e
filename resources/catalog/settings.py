"""Catalog configuration: which catalog publication writes to, validated before any work.

Declared once (`resources.settings.setting`); the Dagster catalog resource takes its fields
from here and the CLI reads the same variables. The embedded default (a catalog file under the
data directory) needs no configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from resources.catalog.glue import name_problem
from resources.errors import ConfigError
from resources.settings import Settings, default_data_dir, http_url, one_of, setting

BACKENDS = ("local", "glue")


class CatalogConfigError(ConfigError):
    """Invalid catalog configuration (`CatalogSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="catalog configuration")


@dataclass(frozen=True)
class CatalogSettings(Settings):
    """Which catalog holds the tables (local file or Glue) and how to reach it."""

    config_error = CatalogConfigError

    catalog: str = setting(
        "local", env="LEASEHOLD_CATALOG", doc="`local` or `glue`", check=one_of(*BACKENDS)
    )
    catalog_path: str | None = setting(
        None,
        env="LEASEHOLD_CATALOG_PATH",
        doc="the local catalog file (default `$LEASEHOLD_DATA_DIR/catalog.json`)",
    )
    glue_database: str = setting(
        "leasehold",
        env="LEASEHOLD_GLUE_DATABASE",
        doc="Glue database (created if missing)",
        check=lambda v: name_problem(v, "database"),
    )
    glue_region: str = setting("us-east-1", env="LEASEHOLD_GLUE_REGION", doc="Glue region")
    glue_endpoint_url: str | None = setting(
        None, env="LEASEHOLD_GLUE_ENDPOINT_URL", doc="Glue endpoint (local servers)", check=http_url
    )
    glue_catalog_id: str | None = setting(
        None, env="LEASEHOLD_GLUE_CATALOG_ID", doc="Glue catalog id (default: the account's)"
    )

    def local_path(self) -> Path:
        return Path(self.catalog_path) if self.catalog_path else default_data_dir() / "catalog.json"
