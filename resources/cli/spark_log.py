"""Where the Spark JVM's log goes for a command that starts Spark (`run`, `init`)."""

import os

from resources.settings import default_data_dir


def quiet_spark(verbose: bool) -> None:
    """For a command that starts Spark: unless --verbose, the Spark JVM's log (Java's module
    warning, log4j's start-up lines, Hadoop's native-code WARN) goes to a file. An explicit
    LEASEHOLD_SPARK_LOG wins either way."""
    if not verbose:
        log = default_data_dir() / "logs" / "spark.log"
        os.environ.setdefault("LEASEHOLD_SPARK_LOG", str(log))
