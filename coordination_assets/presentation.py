"""What the Dagster UI shows about each asset besides its computation: owners, kinds, columns.

The asset builders say what an asset does; this says who answers for it and what it is made of,
from the deployment's settings, read once when the code location loads: owners
(`LEASEHOLD_ASSET_OWNERS`), the lease store's backend (`sqlite` or `dynamodb`: the store holds
the leases, the ledger and the publications every asset depends on), the catalog's (`glue`
shown only when it is Glue: the local catalog is a file, not a system anyone looks up) and each
stream's table schema. Applied to the built definitions (`AssetsDefinition.map_asset_specs`),
so `leasehold run` and the tests keep building the same assets without any environment.

Dagster shows at most a handful of kind icons well; each asset gets what it is built with:
ingestion and merge write Parquet with Spark, the published table is Parquet files a catalog
names, the coordination status is the store itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from dagster import AssetsDefinition, AssetSpec

from resources.catalog.settings import CatalogSettings
from resources.dagster_resources.asset_metadata import COLUMN_SCHEMA, column_schema
from resources.stores.settings import StoreSettings
from resources.streams import LakeSettings, StreamConfig


@dataclass(frozen=True)
class Presentation:
    owners: tuple[str, ...]
    store_kind: str  # "sqlite" or "dynamodb": StoreSettings.backend
    catalog_kind: str | None  # "glue", or None for the local catalog file

    @classmethod
    def from_env(cls) -> Presentation:
        catalog = CatalogSettings.from_env().catalog
        return cls(
            owners=tuple(LakeSettings.from_env().owners()),
            store_kind=StoreSettings.from_env().backend,
            catalog_kind=catalog if catalog == "glue" else None,
        )

    def ingested_kinds(self) -> set[str]:
        return {"spark", "parquet", self.store_kind}

    def merged_kinds(self) -> set[str]:
        return {"spark", "parquet", self.store_kind}

    def table_kinds(self) -> set[str]:
        return {"parquet", self.store_kind, *([self.catalog_kind] if self.catalog_kind else [])}

    def status_kinds(self) -> set[str]:
        return {self.store_kind}


def presented(
    asset: AssetsDefinition,
    presentation: Presentation,
    kinds: set[str],
    config: StreamConfig | None = None,
) -> AssetsDefinition:
    """`asset` with the presentation's owners, exactly `kinds`, and the stream's column schema
    when `config` is given (the ingested, merged and published assets hold the same columns)."""

    def present(spec: AssetSpec) -> AssetSpec:
        tags = {k: v for k, v in spec.tags.items() if not k.startswith("dagster/kind/")}
        metadata = dict(spec.metadata)
        if config is not None:
            metadata[COLUMN_SCHEMA] = column_schema(config)
        return spec.replace_attributes(
            owners=list(presentation.owners), tags=tags, kinds=kinds, metadata=metadata
        )

    return asset.map_asset_specs(present)
