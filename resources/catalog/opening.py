"""The catalog the settings name, built after they are validated in full.

Glue's module (and boto3) is imported only when Glue is chosen: the embedded default needs
neither.
"""

from __future__ import annotations

from resources.catalog.base import Catalog
from resources.catalog.local import LocalCatalog
from resources.catalog.settings import CatalogSettings


def catalog_for(settings: CatalogSettings) -> Catalog:
    """The catalog of `settings`; a bad field raises `CatalogConfigError` naming it before
    anything is opened or contacted."""
    settings.validate()
    if settings.catalog == "local":
        return LocalCatalog(settings.local_path())
    from resources.catalog.glue import GlueCatalog

    return GlueCatalog(
        settings.glue_database,
        region=settings.glue_region,
        endpoint_url=settings.glue_endpoint_url,
        catalog_id=settings.glue_catalog_id,
    )
