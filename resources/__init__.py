"""leasehold's resources: the domain code and the Dagster resources that expose it.

Layers, top to bottom (each may import only the ones below it; import-linter checks it, see
`[tool.importlinter]` in pyproject.toml):

    cli/                 the `leasehold` command (may also import `coordination_assets`)
    dagster_resources/   the ConfigurableResources and the embedded Dagster instance: the only
                         `dagster` importers under resources/
    ingestion/           discovery, the ingestion runner, the Spark source reader, checks
    stores/ objects/ spark/   store backends; object stores; the Spark session
    ledger/              the ledger model and `Ledger` interface
    coordination/        lease items, pure transitions, `LeaseStore`, leases, metrics, health
    errors, retry, settings, streams   shared by every layer
"""
