"""`deploy/dagster.yaml` keeps the embedded instance's run limits and monitoring: the two are
written by hand in two places, and a production instance that let more Spark runs start at
once than the embedded one would be a difference nobody chose."""

from __future__ import annotations

from pathlib import Path

import yaml

from resources.dagster_resources.instance import INSTANCE_YAML

REPO = Path(__file__).resolve().parents[2]
SHARED = ("concurrency", "run_monitoring", "python_logs", "telemetry")


def test_the_production_instance_has_the_embedded_ones_limits_and_monitoring() -> None:
    production = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    embedded = yaml.safe_load(INSTANCE_YAML.format(storage=""))
    for section in SHARED:
        assert production[section] == embedded[section], section


def test_the_production_instance_reads_its_storage_and_logs_from_the_environment() -> None:
    production = yaml.safe_load((REPO / "deploy" / "dagster.yaml").read_text())
    assert production["storage"] == {"postgres": {"postgres_url": {"env": "DAGSTER_PG_URL"}}}
    logs = production["compute_logs"]
    assert logs["class"] == "S3ComputeLogManager"
    assert logs["config"]["bucket"] == {"env": "DAGSTER_COMPUTE_LOG_BUCKET"}
    assert "run_launcher" not in production  # the ECS launcher is documented, not enabled
