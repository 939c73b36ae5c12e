"""One local SparkSession for the whole test session (start-up costs ~7 s), UI off, loopback."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from resources.spark.session import build_spark_session


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = build_spark_session(master="local[2]", app_name="leasehold-tests")
    yield session
    session.stop()
