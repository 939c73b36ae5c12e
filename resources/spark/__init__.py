"""The Spark session: `local[*]` by default, a master or a Spark Connect URL by configuration;
its options (`options`), the progress of its jobs (`progress`), what an executor's host offers
a task (`executor_host`), the code shipped to executors (`code_shipping`).

Only the embedded session binds to loopback. May import nothing of the project but
`resources.errors` and `resources.settings`.
"""
