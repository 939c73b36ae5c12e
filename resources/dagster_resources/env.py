"""Binding resource fields to environment variables as Dagster `EnvVar`s."""

from __future__ import annotations

import os
from typing import Any

from dagster import EnvVar


def env_fields(fields: dict[str, str]) -> dict[str, Any]:
    """Bind each field whose variable is set to it as an `EnvVar`; leave the rest default."""
    return {field: EnvVar(var) for field, var in fields.items() if os.environ.get(var)}
