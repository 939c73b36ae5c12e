"""The Dagster side of resources: ConfigurableResources and the embedded Dagster instance.

Holds `CoordinationResource` (leases against the store), `LakeResource` (streams, object
stores, the ingestion runner), `SparkResource` (one SparkSession per run), `CatalogResource`
(the catalog, the publisher and garbage collector built on it), the sensors' ticks
(`discovery_tick`, `merge_tick`, `publication_tick`), `env` (resource
fields from settings declarations, bound to `EnvVar`s) and `instance` (the embedded
instance's `dagster.yaml` and event log). These are the only modules under `resources/` that
import `dagster`. May import every package below it; never the CLI or `coordination_assets`.
"""
