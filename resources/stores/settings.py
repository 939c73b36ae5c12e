"""Lease store configuration: validated in full before any work, one message naming the field.

Each setting is declared once below (`resources.settings.setting`): its type, default,
environment variable and check. `CoordinationResource` takes its fields from these
declarations, the CLI reads the same variables (`settings_from_env`). The embedded default
(SQLite under the data directory) needs no configuration at all.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from resources.coordination.errors import StoreConfigError
from resources.settings import (
    DATA_DIR_ENV,
    Settings,
    default_data_dir,
    from_env,
    iso_duration_problem,
    one_of,
    parse_iso_duration,
    setting,
)

BACKENDS = ("sqlite", "dynamodb")
BILLING_MODES = ("PROVISIONED", "PAY_PER_REQUEST")


def _partition_prefix(value: str) -> str | None:
    return "must be non-empty and contain no '|'" if not value.strip() or "|" in value else None


@dataclass(frozen=True)
class StoreSettings(Settings):
    """Which coordination store (SQLite file or DynamoDB table) and how to reach it."""

    config_error = StoreConfigError

    backend: str = setting(
        "sqlite",
        env="LEASEHOLD_STORE_BACKEND",
        doc="`sqlite` or `dynamodb`",
        check=one_of(*BACKENDS),
    )
    sqlite_path: str | None = setting(
        None, env="LEASEHOLD_SQLITE_PATH", doc="SQLite file (default: the data directory's)"
    )
    table_name: str = setting(
        "leasehold-coordination", env="LEASEHOLD_DYNAMODB_TABLE", doc="DynamoDB table"
    )
    region: str = setting("us-east-1", env="LEASEHOLD_DYNAMODB_REGION", doc="DynamoDB region")
    endpoint_url: str | None = setting(
        None, env="LEASEHOLD_DYNAMODB_ENDPOINT_URL", doc="DynamoDB endpoint (local servers)"
    )
    sts_role_arn: str | None = setting(None, env="LEASEHOLD_STS_ROLE_ARN", doc="role to assume")
    sts_external_id: str | None = setting(
        None, env="LEASEHOLD_STS_EXTERNAL_ID", doc="external id of the role to assume"
    )
    skip_table_creation: bool = setting(
        False,
        env="LEASEHOLD_SKIP_TABLE_CREATION",
        doc="use an existing table (checked: keys, `source-status` GSI, TTL)",
    )
    billing_mode: str = setting(
        "PROVISIONED",
        env="LEASEHOLD_DYNAMODB_BILLING_MODE",
        doc="`PROVISIONED` or `PAY_PER_REQUEST`",
    )
    provisioned_read_capacity_units: int = setting(
        10, env="LEASEHOLD_DYNAMODB_READ_CAPACITY", doc="provisioned read units"
    )
    provisioned_write_capacity_units: int = setting(
        10, env="LEASEHOLD_DYNAMODB_WRITE_CAPACITY", doc="provisioned write units"
    )
    ttl: str | None = setting(
        None,
        env="LEASEHOLD_TTL",
        doc="ISO-8601 duration, e.g. `P7D`; set on create, extended on every update",
        check=iso_duration_problem,
    )
    partition_prefix: str | None = setting(
        None,
        env="LEASEHOLD_PARTITION_PREFIX",
        doc="prefix of `sourceIdentifier`",
        check=_partition_prefix,
    )

    def validate(self) -> StoreSettings:
        super().validate()  # each field: its type and its declared check
        if self.backend == "dynamodb":
            if not self.table_name or not self.table_name.strip():
                raise StoreConfigError("table_name", "must not be empty")
            if not re.fullmatch(r"[A-Za-z0-9_.-]{3,255}", self.table_name):
                raise StoreConfigError(
                    "table_name", f"{self.table_name!r}: 3-255 of letters, digits, '_', '-', '.'"
                )
            if not self.region or not self.region.strip():
                raise StoreConfigError("region", "must not be empty")
            if self.billing_mode not in BILLING_MODES:
                raise StoreConfigError(
                    "billing_mode", f"{self.billing_mode!r}: PROVISIONED or PAY_PER_REQUEST"
                )
            for field in ("provisioned_read_capacity_units", "provisioned_write_capacity_units"):
                value = getattr(self, field)
                if value < 1:
                    raise StoreConfigError(field, f"{value!r} must be a positive integer")
            if self.endpoint_url is not None and not re.match(r"^https?://", self.endpoint_url):
                raise StoreConfigError(
                    "endpoint_url", f"{self.endpoint_url!r} is not an http(s) URL"
                )
            if self.sts_external_id and not self.sts_role_arn:
                raise StoreConfigError("sts_external_id", "is only meaningful with sts_role_arn")
        return self

    @property
    def ttl_seconds(self) -> float | None:
        return None if self.ttl is None else parse_iso_duration(self.ttl, "ttl", StoreConfigError)

    def resolved_sqlite_path(self) -> Path:
        return Path(self.sqlite_path) if self.sqlite_path else default_data_dir() / "leasehold.db"

    def location(self) -> str:
        """Where the store is and which variables say so, on one line: what an operator needs
        when a command finds no store where it looked (say, run from another directory)."""
        if self.backend == "sqlite":
            path = self.resolved_sqlite_path().resolve()
            if self.sqlite_path:
                return f"SQLite file {path} (LEASEHOLD_SQLITE_PATH)"
            if DATA_DIR_ENV in os.environ:
                return f"SQLite file {path} ({DATA_DIR_ENV}; LEASEHOLD_SQLITE_PATH unset)"
            return (
                f"SQLite file {path} (the default under the working directory: "
                f"LEASEHOLD_SQLITE_PATH and {DATA_DIR_ENV} unset)"
            )
        return (
            f"DynamoDB table {self.table_name!r} in {self.region} at "
            f"{self.endpoint_url or 'the AWS endpoint'} (LEASEHOLD_DYNAMODB_TABLE, "
            "LEASEHOLD_DYNAMODB_REGION, LEASEHOLD_DYNAMODB_ENDPOINT_URL)"
        )


def settings_from_env(environ: Mapping[str, str] | None = None) -> StoreSettings:
    """The store settings the environment gives, validated (`StoreConfigError` naming the
    field); nothing set is the embedded SQLite default."""
    return from_env(StoreSettings, environ)
