"""Catalog configuration: which catalog publication writes to, validated before any work.

Declared once (`resources.settings.setting`); the Dagster catalog resource takes its fields
from here and the CLI reads the same variables. The embedded default (a catalog file under the
data directory for `manifests` tables, a SQLite Iceberg catalog beside it for `iceberg` ones)
needs no configuration. `glue` serves both formats from one database; `rest` (an Iceberg REST
catalog) serves `iceberg` tables only.

Snapshot retention (`iceberg_snapshot_retention_seconds`, default 5 days): a snapshot older
than that is expired by the next switch of its table. It must be at least the GC safety delay
(`LEASEHOLD_GC_SAFETY_DELAY_SECONDS`, 1 day): leasehold's GC deletes a file only when no
retained snapshot references it, so a shorter retention would let a reader that planned a
query against the snapshot a switch just replaced lose its files sooner than a `manifests`
reader would. Five days is Iceberg's own default (`history.expire.max-snapshot-age-ms`) and
covers a long weekend: a bad publication noticed on Tuesday can still be read as it was on
Friday. `iceberg_max_snapshots` (default 250) caps the count as well, since every commit
rewrites the table's metadata file, which lists each retained snapshot: with publications
every minute, 5 days would be 7,200 snapshots and a commit cost that grows with them. Each
retained snapshot adds ~0.9 KB to that file and ~0.02 ms to a switch (bench/publication.py);
at 250 a switch costs at most ~1.1x one on a table with no history, the bound the benchmark
holds it to (1.2x), with time travel over the last 250 switches (over 4 hours at a switch a
minute, days at the usual pace of merges and publications). Raise it for a longer history at
that price per snapshot.

The switch that expires snapshots also deletes their manifest lists and the manifests no
retained snapshot names (`resources/catalog/iceberg/references.py`), so the retention is what
protects readers: one still planning a query on a snapshot expired meanwhile fails. By age,
that is `iceberg_snapshot_retention_seconds` after the snapshot was replaced; by count,
`iceberg_max_snapshots` switches later.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from resources.catalog.glue_items import name_problem
from resources.errors import ConfigError
from resources.settings import (
    Settings,
    at_least,
    default_data_dir,
    http_url,
    one_of,
    positive,
    setting,
)

BACKENDS = ("local", "glue", "rest")
ICEBERG_ONLY_BACKENDS = ("rest",)
"""Backends that hold Iceberg tables only: a `manifests` table needs a Hive catalog."""


class CatalogConfigError(ConfigError):
    """Invalid catalog configuration (`CatalogSettings`), naming the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="catalog configuration")


@dataclass(frozen=True)
class CatalogSettings(Settings):
    """Which catalog holds the tables (local file or Glue) and how to reach it."""

    config_error = CatalogConfigError

    catalog: str = setting(
        "local",
        env="LEASEHOLD_CATALOG",
        doc="`local`, `glue` or `rest` (Iceberg tables only)",
        check=one_of(*BACKENDS),
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

    iceberg_catalog_path: str | None = setting(
        None,
        env="LEASEHOLD_ICEBERG_CATALOG_PATH",
        doc="the embedded Iceberg catalog's SQLite file (default "
        "`$LEASEHOLD_DATA_DIR/iceberg/catalog.db`)",
    )
    iceberg_rest_uri: str | None = setting(
        None, env="LEASEHOLD_ICEBERG_REST_URI", doc="Iceberg REST catalog URI", check=http_url
    )
    iceberg_rest_warehouse: str | None = setting(
        None, env="LEASEHOLD_ICEBERG_REST_WAREHOUSE", doc="REST catalog warehouse"
    )
    iceberg_rest_credential: str | None = setting(
        None,
        env="LEASEHOLD_ICEBERG_REST_CREDENTIAL",
        doc="REST catalog OAuth2 client credential (`client_id:client_secret`)",
    )
    iceberg_rest_token: str | None = setting(
        None, env="LEASEHOLD_ICEBERG_REST_TOKEN", doc="REST catalog bearer token"
    )
    iceberg_snapshot_retention_seconds: float = setting(
        432000.0,
        env="LEASEHOLD_ICEBERG_SNAPSHOT_RETENTION_SECONDS",
        doc="an Iceberg snapshot older than this is expired by the next switch (at least the "
        "GC safety delay)",
        check=positive,
    )
    iceberg_max_snapshots: int = setting(
        250,
        env="LEASEHOLD_ICEBERG_MAX_SNAPSHOTS",
        doc="snapshots an Iceberg table keeps at most (older ones expire with the next switch)",
        check=at_least(1),
    )

    def validate(self) -> CatalogSettings:
        super().validate()
        if self.catalog == "rest" and not self.iceberg_rest_uri:
            raise CatalogConfigError(
                "iceberg_rest_uri", "must be set when LEASEHOLD_CATALOG is rest"
            )
        return self

    def local_path(self) -> Path:
        return Path(self.catalog_path) if self.catalog_path else default_data_dir() / "catalog.json"

    def iceberg_sqlite_path(self) -> Path:
        """The embedded Iceberg catalog's SQLite file."""
        if self.iceberg_catalog_path:
            return Path(self.iceberg_catalog_path)
        return default_data_dir() / "iceberg" / "catalog.db"
