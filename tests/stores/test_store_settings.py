"""Invalid configuration fails before any work, with one message naming the field."""

from __future__ import annotations

import pytest

from resources.cli.main import main
from resources.coordination.errors import StoreConfigError
from resources.errors import ConfigError
from resources.settings import parse_iso_duration
from resources.stores import build_store
from resources.stores.settings import StoreSettings, settings_from_env


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("P7D", 604800), ("PT12H", 43200), ("P1DT30M", 88200), ("P2W", 1209600), ("PT0.5S", 0.5)],
)
def test_iso_durations(text: str, seconds: float) -> None:
    assert parse_iso_duration(text, "ttl") == seconds


@pytest.mark.parametrize("text", ["7 days", "P", "PT", "P1M", "P1Y", "7D", "", "PT0S", "-P1D"])
def test_malformed_durations(text: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_iso_duration(text, "ttl")
    assert err.value.field == "ttl"


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        (StoreSettings(backend="redis"), "backend"),
        (StoreSettings(backend="dynamodb", table_name=""), "table_name"),
        (StoreSettings(backend="dynamodb", table_name="   "), "table_name"),
        (StoreSettings(backend="dynamodb", table_name="bad name!"), "table_name"),
        (StoreSettings(ttl="7 days"), "ttl"),
        (StoreSettings(backend="dynamodb", ttl="P1M"), "ttl"),
        (StoreSettings(backend="dynamodb", region=""), "region"),
        (
            StoreSettings(backend="dynamodb", provisioned_read_capacity_units=0),
            "provisioned_read_capacity_units",
        ),
        (StoreSettings(backend="dynamodb", billing_mode="FREE"), "billing_mode"),
        (StoreSettings(backend="dynamodb", endpoint_url="localhost:4566"), "endpoint_url"),
        (StoreSettings(partition_prefix="a|b"), "partition_prefix"),
    ],
)
def test_invalid_settings_name_the_field_before_any_work(
    settings: StoreSettings, field: str, tmp_path
) -> None:
    # An endpoint nobody listens on: if validation let anything through, the store would try
    # to reach it (and time out) instead of failing at once.
    with pytest.raises(StoreConfigError) as err:
        build_store(settings)
    assert err.value.field == field
    assert field in str(err.value)


def test_env_configuration() -> None:
    env = {
        "LEASEHOLD_STORE_BACKEND": "dynamodb",
        "LEASEHOLD_DYNAMODB_TABLE": "coord",
        "LEASEHOLD_SKIP_TABLE_CREATION": "true",
        "LEASEHOLD_DYNAMODB_READ_CAPACITY": "25",
        "LEASEHOLD_TTL": "P7D",
    }
    s = settings_from_env(env)
    assert (s.backend, s.table_name, s.skip_table_creation) == ("dynamodb", "coord", True)
    assert s.provisioned_read_capacity_units == 25 and s.ttl_seconds == 604800
    with pytest.raises(StoreConfigError) as err:
        settings_from_env({"LEASEHOLD_DYNAMODB_WRITE_CAPACITY": "ten"})
    assert err.value.field == "provisioned_write_capacity_units"


def test_cli_reports_bad_configuration_in_one_line(monkeypatch, capsys) -> None:
    monkeypatch.setenv("LEASEHOLD_STORE_BACKEND", "cassandra")
    assert main(["status"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "backend" in err[0] and "cassandra" in err[0]
