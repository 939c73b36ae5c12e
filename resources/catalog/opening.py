"""The catalog and the publication target the settings name, built after they are validated in
full.

Glue's module (and boto3) is imported only when Glue is chosen, pyiceberg only for `iceberg`:
the embedded default of `manifests` needs neither.
"""

from __future__ import annotations

from resources.catalog.base import Catalog
from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.local import LocalCatalog
from resources.catalog.settings import ICEBERG_ONLY_BACKENDS, CatalogConfigError, CatalogSettings
from resources.catalog.target import ICEBERG, MANIFESTS, TABLE_FORMATS, PublicationTarget


def catalog_for(settings: CatalogSettings) -> Catalog:
    """The Hive catalog of `settings`; a bad field raises `CatalogConfigError` naming it before
    anything is opened or contacted (`catalog: rest` too: it holds Iceberg tables only)."""
    settings.validate()
    if settings.catalog in ICEBERG_ONLY_BACKENDS:
        raise CatalogConfigError(
            "catalog",
            f"{settings.catalog!r} holds Iceberg tables only; a `{MANIFESTS}` table needs "
            "`local` or `glue`",
        )
    if settings.catalog == "local":
        return LocalCatalog(settings.local_path())
    from resources.catalog.glue import GlueCatalog

    return GlueCatalog(
        settings.glue_database,
        region=settings.glue_region,
        endpoint_url=settings.glue_endpoint_url,
        catalog_id=settings.glue_catalog_id,
    )


def target_for(
    settings: CatalogSettings,
    table_format: str,
    *,
    s3_endpoint_url: str | None = None,
    s3_region: str | None = None,
) -> PublicationTarget:
    """The publication target of a stream's `table_format` on the catalog of `settings`:
    `manifests` the Hive partitions of `catalog_for(settings)`, `iceberg` an `IcebergTarget`
    on the Iceberg catalog of the same backend (`s3_endpoint_url` / `s3_region`: the lake's
    S3 endpoint and region, for table metadata on `s3://`). Raises `CatalogConfigError`
    naming the field (`table_format` unknown; `catalog: rest` with `manifests`) before
    anything is contacted, `CatalogUnreachableError` when the Iceberg catalog does not
    answer."""
    if table_format not in TABLE_FORMATS:
        raise CatalogConfigError(
            "table_format", f"{table_format!r} is unknown; choose one of {', '.join(TABLE_FORMATS)}"
        )
    if table_format == MANIFESTS:
        return HiveManifestsTarget(catalog_for(settings))
    assert table_format == ICEBERG
    from resources.catalog.iceberg.catalogs import open_catalog
    from resources.catalog.iceberg.target import IcebergTarget

    catalog = open_catalog(settings, s3_endpoint_url=s3_endpoint_url, s3_region=s3_region)
    return IcebergTarget(
        catalog,
        retention_s=settings.iceberg_snapshot_retention_seconds,
        max_snapshots=settings.iceberg_max_snapshots,
    )
