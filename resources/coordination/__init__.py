"""Coordination: who may work on which source partition (docs/architecture.md).

Holds the lease item model (`items`), the pure state machine of a lease item (`transitions`)
and how long a CLOSED one waits (`backoff`), the `LeaseStore` interface that store backends
implement (`lease_store`; its global-state leases in `global_state`), errors, a held lease
with its background renewer (`lease`) and the run-wide `LeaseKeeper` (`keeper`), Data
Prepper's metrics (`metrics`), and what status and health checks report (`status`, `health`).
May import: `resources.errors`, `resources.retry`, `resources.settings`. Nothing else of the
project, and never Dagster, boto3 or Spark.
"""
