"""The `leasehold` command line (`main`), its `config` command (`config`), `gc`, `table`,
`redrive` (dead letters back to be retried) and the worker-race demo (`demo`).

The top layer: may import everything, including `coordination_assets` (`leasehold run` executes
the same sensor, assets and checks the daemon runs).
"""
