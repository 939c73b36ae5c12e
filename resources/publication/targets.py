"""The `PublicationTarget` of a stream's `table_format`, opened from the catalog settings.

The one place publication, its checks, the CLI and the Dagster resource open a target. Until
`IcebergTarget` is in the tree (issue 33, `resources.catalog.opening.target_for`), only
`manifests` opens: `HiveManifestsTarget` over the configured catalog. When `target_for` lands,
`open_target`'s body becomes `return target_for(settings, table_format)`.
"""

from __future__ import annotations

from resources.catalog.hive_target import HiveManifestsTarget
from resources.catalog.opening import catalog_for
from resources.catalog.settings import CatalogSettings
from resources.catalog.target import MANIFESTS, PublicationTarget
from resources.errors import LeaseholdError


class TableFormatUnavailableError(LeaseholdError):
    """The stream's `table_format` has no target in this build."""


def open_target(settings: CatalogSettings, table_format: str) -> PublicationTarget:
    """The target serving tables of `table_format` through the catalog `settings` name.
    Raises `CatalogConfigError` (a bad catalog setting, before anything is contacted),
    `TableFormatUnavailableError` (`iceberg` before `IcebergTarget` is in the tree)."""
    if table_format != MANIFESTS:
        raise TableFormatUnavailableError(
            f"table_format {table_format!r} cannot be published by this build (only "
            f"{MANIFESTS!r}: Iceberg tables land with issue 33); set `table_format: "
            f"{MANIFESTS}` on the stream"
        )
    return HiveManifestsTarget(catalog_for(settings))
