"""The `leasehold` command line: the entry point (`main`), its parser (`parser`) and exit
statuses (`exit_status`), and one module per command — `run`, `init`, `demo` (the worker race),
`status`, `config`, `doctor`, `purge` (`purge-expired`), `check`, `table`, `gc`, `redrive` (dead
letters back to be retried), `rollup`, `schema`; `story` draws `run`'s stage lines and tables.

The top layer: may import everything, including `coordination_assets` (`leasehold run` executes
the same sensor, assets and checks the daemon runs).
"""
