"""`SparkResource`: the one SparkSession of a run, created lazily.

The first asset that needs Spark pays for starting it, and no other step starts a second one.
A classic session (a master) is started by dagster-pyspark's `LazyPySparkResource` from
leasehold's settings (`SparkSettings.options`: leasehold's defaults, `spark-defaults.conf`,
`LEASEHOLD_SPARK_CONF`, the keys leasehold requires); a Spark Connect session
(`remote`) by leasehold itself, since dagster-pyspark has no Connect support. Either way
`starting_spark` finds Java, sends the JVM's output to `LEASEHOLD_SPARK_LOG` and turns a
failure to start into one message. On a master that is not `local`, the project's code is
shipped to the executors (resources/spark/code_shipping.py), as `build_spark_session` does.
"""

from __future__ import annotations

from typing import Any

from dagster import InitResourceContext
from pydantic import PrivateAttr

from resources.dagster_resources.door import failing_the_run
from resources.dagster_resources.env import settings_resource
from resources.spark.code_shipping import ship_code
from resources.spark.reachable import require_reachable
from resources.spark.session import (
    SparkSettings,
    build_spark_session,
    starting_spark,
)


# A base built at import from the declarations: mypy cannot follow it (its fields read as Any).
class SparkResource(settings_resource(SparkSettings)):  # type: ignore[misc]
    """`master` (default `local[*]`) or `remote` (a Spark Connect URL), with its options.

    Its fields are the settings `SparkSettings` declares; `from_env()` is the resource as
    Definitions binds it.
    """

    _session: Any = PrivateAttr(default=None)
    _owned: bool = PrivateAttr(default=False)

    @property
    def sees_local_files(self) -> bool:
        """Whether Spark's executors see this process's disk: only a `local[...]` master's,
        which run in this process's JVM. A cluster's and a Connect server's do not."""
        return not self.remote and (self.master or "local").split("[")[0] == "local"

    def setup_for_execution(self, context: InitResourceContext) -> None:
        with failing_the_run():
            self.validate_settings()
            # A master or Connect server that is not listening fails the run here, in a second,
            # not in its first step after a minute of Spark's own attempts.
            require_reachable(self.master, self.remote)

    def session(self) -> Any:
        if self._session is None:
            from pyspark import SparkContext
            from pyspark.sql import SparkSession

            # A session that already runs in this process (a notebook's, the tests') is used,
            # not owned. Asked from the runner's reader thread, `getActiveSession` (per thread)
            # would not see it, so look at the process-wide context instead.
            if not self.remote and SparkContext._active_spark_context is not None:
                active = SparkSession.getActiveSession()
                self._session = active or SparkSession.builder.getOrCreate()
                self._owned = False
            elif self.remote:
                # dagster-pyspark builds classic sessions only (no `builder.remote`).
                self._session = build_spark_session(remote=self.remote)
                self._owned = True
            else:
                # Imported here: dagster_pyspark imports pyspark.sql (~1.3 s), which a run or
                # a code location load that starts no Spark should not pay.
                from dagster_pyspark import LazyPySparkResource

                options = self.settings_of(SparkSettings).options()
                pyspark = LazyPySparkResource(spark_config=options)
                with starting_spark(self.master, None, self.log_file):
                    self._session = pyspark.spark_session
                ship_code(self._session, self.master, None)
                self._owned = True
        return self._session

    def teardown_after_execution(self, context: InitResourceContext) -> None:
        # Stop only a session this run started: one that was already active (a notebook, a
        # test session) belongs to whoever started it.
        if self._session is not None and self._owned:
            self._session.stop()
        self._session = None
