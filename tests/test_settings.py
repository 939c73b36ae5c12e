"""Settings declared once: parsing a variable by the field's type, checks naming the field."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from resources.cli.config import DECLARATIONS
from resources.errors import ConfigError
from resources.settings import Settings, at_least, env_vars, from_env, setting

ROOT = Path(__file__).resolve().parents[1]
# DECLARATIONS: every settings declaration of the project, as `leasehold config` lists them
# (tests/dagster checks the resources declare exactly these).


class ExampleError(ConfigError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(field, message, what="example configuration")


@dataclass(frozen=True)
class Example(Settings):
    config_error = ExampleError

    name: str = setting("x", env="EX_NAME")
    path: str | None = setting(None, env="EX_PATH")
    count: int = setting(3, env="EX_COUNT", check=at_least(1))
    limit: int | None = setting(None, env="EX_LIMIT")
    ratio: float = setting(0.5, env="EX_RATIO")
    enabled: bool = setting(False, env="EX_ENABLED")
    internal: int = setting(7)  # no variable: set in code only


def test_env_vars_are_the_declared_ones() -> None:
    assert env_vars(Example) == {
        "name": "EX_NAME",
        "path": "EX_PATH",
        "count": "EX_COUNT",
        "limit": "EX_LIMIT",
        "ratio": "EX_RATIO",
        "enabled": "EX_ENABLED",
    }


def test_each_set_variable_is_parsed_by_its_fields_type() -> None:
    env = {
        "EX_NAME": "n",
        "EX_PATH": "/p",
        "EX_COUNT": "12",
        "EX_LIMIT": "4",
        "EX_RATIO": "2.5",
        "EX_ENABLED": "Yes",
        "EX_UNRELATED": "1",
    }
    assert from_env(Example, env) == Example("n", "/p", 12, 4, 2.5, True)
    assert Example.from_env({"EX_ENABLED": "false", "EX_PATH": ""}) == Example()  # empty: unset


@pytest.mark.parametrize(
    ("var", "raw", "field", "message"),
    [
        ("EX_COUNT", "three", "count", "not an integer"),
        ("EX_LIMIT", "1.5", "limit", "not an integer"),
        ("EX_RATIO", "half", "ratio", "not a number"),
        ("EX_ENABLED", "maybe", "enabled", "not a boolean"),
        ("EX_COUNT", "0", "count", "must be at least 1"),  # parsed, then checked
    ],
)
def test_a_bad_variable_names_its_field(var: str, raw: str, field: str, message: str) -> None:
    with pytest.raises(ExampleError) as err:
        from_env(Example, {var: raw})
    assert err.value.field == field
    assert message in str(err.value) and "example configuration" in str(err.value)


@pytest.mark.parametrize(
    ("values", "field"),
    [
        ({"name": None}, "name"),
        ({"count": "3"}, "count"),
        ({"count": True}, "count"),
        ({"ratio": "0.5"}, "ratio"),
        ({"enabled": "yes"}, "enabled"),
        ({"internal": 0.5}, "internal"),
    ],
)
def test_validate_checks_each_fields_type(values: dict, field: str) -> None:
    with pytest.raises(ExampleError) as err:
        Example(**values).validate()
    assert err.value.field == field


def test_numbers_given_as_integers_are_numbers() -> None:
    assert Example(ratio=2).validate().ratio == 2


def configuration_rows() -> list[str]:
    """The table rows of the reference's configuration section (docs/reference.md)."""
    text = (ROOT / "docs" / "reference.md").read_text(encoding="utf-8")
    start = text.index("\n## Configuration\n")
    end = text.index("\n## ", start + 1)
    return [line for line in text[start:end].splitlines() if line.startswith("| ")]


def shown(default: object) -> str:
    if isinstance(default, bool):
        return str(default).lower()
    return f"{default:g}" if isinstance(default, float) else str(default)


@pytest.mark.parametrize("declaration", DECLARATIONS, ids=lambda d: d.__name__)
def test_every_setting_is_in_the_readmes_configuration_tables(declaration: type) -> None:
    """One row per setting: its variable (or none), its field and its default."""
    rows = configuration_rows()
    for f in dataclasses.fields(declaration):
        variable = f"`{f.metadata['env']}`" if f.metadata.get("env") else "—"
        row = [r for r in rows if r.startswith(f"| {variable} | `{f.name}` |")]
        assert len(row) == 1, f"docs/reference.md has no row '| {variable} | `{f.name}` | ...'"
        if f.default is not None:
            assert f"`{shown(f.default)}`" in row[0], f"docs/reference.md: default of {f.name}"


def test_the_readmes_configuration_tables_name_no_undeclared_variable() -> None:
    declared = {v for d in DECLARATIONS for v in env_vars(d).values()}
    named = {v for r in configuration_rows() for v in re.findall(r"`(LEASEHOLD_[A-Z0-9_]+)`", r)}
    assert named - {"LEASEHOLD_DATA_DIR"} <= declared
