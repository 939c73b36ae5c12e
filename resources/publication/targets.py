"""The `PublicationTarget` of a stream's `table_format`, opened from the catalog settings.

The one place publication, its checks, the CLI and the Dagster resource open a target:
`resources.catalog.opening.target_for` (`manifests`: `HiveManifestsTarget` over the configured
catalog; `iceberg`: `IcebergTarget` on the Iceberg catalog of the same backend).
"""

from __future__ import annotations

from resources.catalog.opening import target_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import PublicationTarget


def open_target(
    settings: CatalogSettings,
    table_format: str,
    *,
    s3_endpoint_url: str | None = None,
    s3_region: str | None = None,
) -> PublicationTarget:
    """The target serving tables of `table_format` through the catalog `settings` name
    (`s3_endpoint_url` / `s3_region`: the lake's, for Iceberg metadata on `s3://`). Raises
    `CatalogConfigError` (a bad catalog setting or format, before anything is contacted),
    `CatalogUnreachableError` (an Iceberg catalog that does not answer)."""
    return target_for(settings, table_format, s3_endpoint_url=s3_endpoint_url, s3_region=s3_region)
