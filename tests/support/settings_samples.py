"""Every documented environment variable with a valid non-default value and, where it has a
check, an invalid one: for the tests that set each variable through the CLI and the code
location, so a new variable is tested without anyone writing a test for it.

Values are derived from the declaration (its type and default) where that gives a valid,
meaningful one; the tables name only the exceptions. A derived value the declaration refuses
fails the test that asked for it, saying which table to extend.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from resources.cli.config import DECLARATIONS
from resources.settings import Settings, base_type, declared, field_types, parse_value

STREAMS_FILE = """
streams:
  clicks:
    source: file://sources/clicks
    schema: {click_id: string, clicked_at: timestamp}
    event_time: clicked_at
    table: file://lake/clicks
"""

DYNAMODB = {"LEASEHOLD_STORE_BACKEND": "dynamodb"}

VALID: dict[str, str] = {
    # a choice, a URL or a duration: no value derived from the type would pass the check
    "LEASEHOLD_STORE_BACKEND": "dynamodb",
    "LEASEHOLD_DYNAMODB_BILLING_MODE": "PAY_PER_REQUEST",
    "LEASEHOLD_DYNAMODB_ENDPOINT_URL": "http://127.0.0.1:8000",
    "LEASEHOLD_S3_ENDPOINT_URL": "http://127.0.0.1:9000",
    "LEASEHOLD_ICEBERG_REST_URI": "http://127.0.0.1:8181",
    "LEASEHOLD_SPARK_CONF": "spark.executor.memory=2g;spark.sql.shuffle.partitions=16",
    "LEASEHOLD_TTL": "P2D",
    "LEASEHOLD_PARTITION_RETENTION": "P30D",
    # passes as any text, but a realistic value reads better in a failure
    "LEASEHOLD_STS_ROLE_ARN": "arn:aws:iam::123456789012:role/leasehold",
    "LEASEHOLD_SPARK_MASTER": "local[2]",
    "LEASEHOLD_SPARK_REMOTE": "sc://127.0.0.1:15002",
    "LEASEHOLD_CATALOG": "glue",
    "LEASEHOLD_GLUE_ENDPOINT_URL": "http://127.0.0.1:5000",
    "LEASEHOLD_ASSET_OWNERS": "team:ingestion,data-eng@example.com",
}
"""Valid values where the derived one (`sample`) would not do."""

INVALID: dict[str, tuple[str, dict[str, str]]] = {
    "LEASEHOLD_PARTITION_PREFIX": ("a|b", {}),  # any text without '|' is a prefix
    # checked only when the store is DynamoDB (`StoreSettings.validate`)
    "LEASEHOLD_DYNAMODB_TABLE": ("no spaces allowed", DYNAMODB),
    "LEASEHOLD_DYNAMODB_REGION": ("  ", DYNAMODB),
    "LEASEHOLD_DYNAMODB_ENDPOINT_URL": ("127.0.0.1:8000", DYNAMODB),
    "LEASEHOLD_DYNAMODB_BILLING_MODE": ("FREE", DYNAMODB),
    "LEASEHOLD_STS_EXTERNAL_ID": ("external-1", DYNAMODB),  # without a role to assume
    "LEASEHOLD_SPARK_CONF": ("spark.executor.memory", {}),  # an entry without its value
}
"""Invalid values (and the other variables that make them checked) where the generic one
is accepted or not checked on its own."""

GENERIC_INVALID = "not valid"
"""Not a number, not a boolean, not a choice, URL or duration."""


@dataclass(frozen=True)
class Variable:
    declaration: type[Settings]
    field: str
    name: str

    @property
    def kind(self) -> Any:
        return base_type(field_types(self.declaration)[self.field])[0]

    @property
    def spec(self) -> dataclasses.Field[Any]:
        (f,) = [f for f in declared(self.declaration) if f.name == self.field]
        return f

    def __str__(self) -> str:
        return self.name


def documented_variables() -> list[Variable]:
    """Every declared setting that has an environment variable."""
    return [
        Variable(declaration, f.name, f.metadata["env"])
        for declaration in DECLARATIONS
        for f in declared(declaration)
        if f.metadata.get("env")
    ]


def sample(variable: Variable, tmp_path: Path) -> tuple[str, Any]:
    """(the text to set `variable` to, the value the setting must then have): valid, and
    not the default. `LEASEHOLD_STREAMS` gets a streams file of one stream, `clicks`."""
    default = variable.spec.default
    if variable.name == "LEASEHOLD_STREAMS":
        path = tmp_path / "elsewhere" / "streams.yaml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(STREAMS_FILE)
        raw = str(path)
    elif variable.name in VALID:
        raw = VALID[variable.name]
    elif variable.kind is bool:
        raw = "false" if default else "true"
    elif variable.kind in (int, float):
        raw = str(default + 1 if default is not None else 7)
    else:
        raw = f"sample-{variable.field.replace('_', '-')}"
    value = parse_value(variable.declaration, variable.field, raw, variable.name)
    assert value != default, f"{variable}: the sample {raw!r} is the default; extend VALID"
    return raw, value


def invalid(variable: Variable) -> tuple[str, dict[str, str]] | None:
    """(an invalid value, other variables that make it checked), or None: any text is a
    valid value of `variable`."""
    if variable.name in INVALID:
        return INVALID[variable.name]
    if variable.kind in (int, float, bool) or variable.spec.metadata.get("check"):
        return GENERIC_INVALID, {}
    return None
