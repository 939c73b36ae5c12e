"""Lease store configuration: validated in full before any work, one message naming the field.

The embedded default (SQLite under the data directory) needs no configuration at all.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from resources.coordination.errors import StoreConfigError
from resources.settings import default_data_dir, parse_iso_duration

BACKENDS = ("sqlite", "dynamodb")


@dataclass(frozen=True)
class StoreSettings:
    backend: str = "sqlite"
    sqlite_path: str | None = None
    table_name: str = "leasehold-coordination"
    region: str = "us-east-1"
    endpoint_url: str | None = None
    sts_role_arn: str | None = None
    sts_external_id: str | None = None
    skip_table_creation: bool = False
    billing_mode: str = "PROVISIONED"
    provisioned_read_capacity_units: int = 10
    provisioned_write_capacity_units: int = 10
    ttl: str | None = None
    partition_prefix: str | None = None

    def validate(self) -> StoreSettings:
        if self.backend not in BACKENDS:
            raise StoreConfigError(
                "backend", f"{self.backend!r} is unknown; choose one of {', '.join(BACKENDS)}"
            )
        if self.ttl is not None:
            parse_iso_duration(self.ttl, "ttl", StoreConfigError)
        if self.partition_prefix is not None and (
            not self.partition_prefix.strip() or "|" in self.partition_prefix
        ):
            raise StoreConfigError("partition_prefix", "must be non-empty and contain no '|'")
        if self.backend == "dynamodb":
            if not self.table_name or not self.table_name.strip():
                raise StoreConfigError("table_name", "must not be empty")
            if not re.fullmatch(r"[A-Za-z0-9_.-]{3,255}", self.table_name):
                raise StoreConfigError(
                    "table_name", f"{self.table_name!r}: 3-255 of letters, digits, '_', '-', '.'"
                )
            if not self.region or not self.region.strip():
                raise StoreConfigError("region", "must not be empty")
            if self.billing_mode not in ("PROVISIONED", "PAY_PER_REQUEST"):
                raise StoreConfigError(
                    "billing_mode", f"{self.billing_mode!r}: PROVISIONED or PAY_PER_REQUEST"
                )
            for field in ("provisioned_read_capacity_units", "provisioned_write_capacity_units"):
                value = getattr(self, field)
                if not isinstance(value, int) or value < 1:
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


# One environment variable per field: the CLI reads them directly, the Dagster resource as EnvVar.
ENV_VARS: dict[str, str] = {
    "backend": "LEASEHOLD_STORE_BACKEND",
    "sqlite_path": "LEASEHOLD_SQLITE_PATH",
    "table_name": "LEASEHOLD_DYNAMODB_TABLE",
    "region": "LEASEHOLD_DYNAMODB_REGION",
    "endpoint_url": "LEASEHOLD_DYNAMODB_ENDPOINT_URL",
    "sts_role_arn": "LEASEHOLD_STS_ROLE_ARN",
    "sts_external_id": "LEASEHOLD_STS_EXTERNAL_ID",
    "skip_table_creation": "LEASEHOLD_SKIP_TABLE_CREATION",
    "billing_mode": "LEASEHOLD_DYNAMODB_BILLING_MODE",
    "provisioned_read_capacity_units": "LEASEHOLD_DYNAMODB_READ_CAPACITY",
    "provisioned_write_capacity_units": "LEASEHOLD_DYNAMODB_WRITE_CAPACITY",
    "ttl": "LEASEHOLD_TTL",
    "partition_prefix": "LEASEHOLD_PARTITION_PREFIX",
}
INT_FIELDS = {"provisioned_read_capacity_units", "provisioned_write_capacity_units"}
BOOL_FIELDS = {"skip_table_creation"}


def parse_env_value(field: str, raw: str) -> str | int | bool:
    """Typed value of one configuration field given as text, or a StoreConfigError naming it."""
    if field in BOOL_FIELDS:
        lowered = raw.strip().lower()
        if lowered not in ("true", "false", "1", "0", "yes", "no"):
            raise StoreConfigError(field, f"{raw!r} is not a boolean (true/false)")
        return lowered in ("true", "1", "yes")
    if field in INT_FIELDS:
        try:
            return int(raw)
        except ValueError:
            raise StoreConfigError(field, f"{raw!r} is not an integer") from None
    return raw


def settings_from_env(environ: dict[str, str] | None = None) -> StoreSettings:
    env = os.environ if environ is None else environ
    values = {f: parse_env_value(f, env[v]) for f, v in ENV_VARS.items() if env.get(v)}
    return StoreSettings(**values).validate()  # type: ignore[arg-type]
