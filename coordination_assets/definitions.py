"""The code location: every Dagster definition of leasehold, bound to its resources.

Thin on purpose: domain logic lives in `resources/`; this file only says what exists.
"""

from __future__ import annotations

from dagster import Definitions

from coordination_assets.coordination_status import coordination_status, lease_health
from resources.coordination import coordination_resource_from_env

defs = Definitions(
    assets=[coordination_status],
    asset_checks=[lease_health],
    resources={"coordination": coordination_resource_from_env()},
)
