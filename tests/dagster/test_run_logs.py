"""Inside a Dagster run on the embedded instance, leasehold's Python logs reach the run's logs.

No `from __future__ import annotations`: this file defines a Dagster asset.
"""

import logging
from pathlib import Path

from dagster import DagsterInstance, asset, materialize

from resources.dagster_resources.instance import write_instance_yaml


@asset
def renews_a_lease() -> None:
    logging.getLogger("resources.coordination.keeper").warning("renewing 1 of 1 leases failed")
    logging.getLogger("elsewhere").warning("not leasehold's")


def test_leasehold_warnings_reach_the_run_log(tmp_path: Path) -> None:
    write_instance_yaml(tmp_path)
    with DagsterInstance.from_config(str(tmp_path)) as instance:
        assert instance.managed_python_loggers == ["resources"]
        result = materialize([renews_a_lease], instance=instance)
        assert result.success
        logs = [(e.level, e.user_message) for e in instance.all_logs(result.run_id)]
    assert (logging.WARNING, "renewing 1 of 1 leases failed") in logs
    assert all(message != "not leasehold's" for _, message in logs)
