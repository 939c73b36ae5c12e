"""`CatalogResource`: the catalog publication writes to, and the publication settings.

Its fields are the settings `CatalogSettings` (which catalog: the local file, or Glue) and
`PublicationSettings` (how many partitions a publication run covers, the garbage collector's
safety delay) declare, so a bad `LEASEHOLD_CATALOG` fails the code location at load naming the
field, like every other variable. The catalog itself is plain Python (`resources.catalog`);
this file builds the publication objects the assets, sensor and GC job use from it, so they
stay free of how a catalog, a store or an object store is opened.
"""

from __future__ import annotations

from dagster import InitResourceContext
from pydantic import PrivateAttr

from resources.catalog.base import Catalog
from resources.catalog.opening import catalog_for
from resources.catalog.settings import CatalogSettings
from resources.dagster_resources.coordination import CoordinationResource
from resources.dagster_resources.env import settings_resource
from resources.dagster_resources.lake import LakeResource
from resources.publication.garbage import GarbageCollector
from resources.publication.publisher import Publisher
from resources.publication.settings import PublicationSettings


class CatalogResource(settings_resource(CatalogSettings, PublicationSettings)):
    """The catalog (opened once per run, when first asked for) and publication settings.

    `from_env()` is the resource as Definitions binds it.
    """

    _catalog: Catalog | None = PrivateAttr(default=None)

    def setup_for_execution(self, context: InitResourceContext) -> None:
        self.validate_settings()  # a bad setting fails the run before any step does work

    def open_catalog(self) -> Catalog:
        """Not `catalog()`: `catalog` is the setting that names the backend."""
        if self._catalog is None:
            self._catalog = catalog_for(self.settings_of(CatalogSettings))
        return self._catalog

    def publication_settings(self) -> PublicationSettings:
        return self.settings_of(PublicationSettings)

    def publisher(
        self, stream: str, coordination: CoordinationResource, lake: LakeResource
    ) -> Publisher:
        config = lake.stream(stream)
        return Publisher(
            config, coordination.store, lake.object_store(config.table), self.open_catalog()
        )

    def garbage_collector(
        self, stream: str, coordination: CoordinationResource, lake: LakeResource
    ) -> GarbageCollector:
        config = lake.stream(stream)
        return GarbageCollector(
            config,
            coordination.store,
            lake.object_store(config.table),
            safety_delay_s=self.gc_safety_delay_seconds,
        )
