"""`leasehold config`: every declared setting, where its value came from, all of it validated.

A deployment is configured by a few dozen variables spread over six declarations; when a run
behaves unexpectedly the first question is which values it actually saw. This answers it from
the same declarations the resources and the other commands read (`resources.settings`), and
validates them the same way, so a value that would fail the code location at load fails here,
with the same one-line message naming the field (exit 2).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from resources.catalog.settings import CatalogSettings
from resources.coordination.lease import TimingSettings
from resources.publication.settings import PublicationSettings
from resources.settings import Settings, declared, default_data_dir, env_values, field_doc
from resources.spark.session import SparkSettings
from resources.stores.settings import StoreSettings
from resources.streams import LakeSettings

DECLARATIONS: tuple[type[Settings], ...] = (
    StoreSettings,
    TimingSettings,
    LakeSettings,
    SparkSettings,
    CatalogSettings,
    PublicationSettings,
)
"""Every settings declaration of the project. A test checks that the Dagster resources
declare exactly these, so a new declaration cannot be left out of this command."""

FROM_ENV, FROM_DEFAULT = "environment", "default"


@dataclass(frozen=True)
class Setting:
    """A declared setting as `leasehold config` shows it: its value and where that came from."""

    declaration: str
    field: str
    variable: str | None
    value: Any
    source: str
    doc: str

    def as_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Configuration:
    """Everything `leasehold config` prints: every setting, the streams, the data directory."""

    settings: list[Setting]
    streams: list[str]
    data_dir: str

    def as_json(self) -> dict[str, Any]:
        return {
            "settings": [s.as_json() for s in self.settings],
            "streams": self.streams,
            "dataDir": self.data_dir,
        }


def effective_configuration(environ: Mapping[str, str] | None = None) -> Configuration:
    """Each declaration's settings as the environment gives them, validated (a
    `ConfigError` naming the field), and the streams file loaded and validated too: the
    checks the code location makes at load, so nothing passes here that fails there."""
    settings: list[Setting] = []
    for declaration in DECLARATIONS:
        given = env_values(declaration, environ)
        values = declaration(**given).validate()
        settings += [
            Setting(
                declaration=declaration.__name__,
                field=f.name,
                variable=f.metadata.get("env"),
                value=getattr(values, f.name),
                source=FROM_ENV if f.name in given else FROM_DEFAULT,
                doc=field_doc(f),
            )
            for f in declared(declaration)
        ]
    streams = sorted(LakeSettings.from_env(environ).streams())
    return Configuration(settings, streams, str(default_data_dir()))


def _shown(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def configuration_text(config: Configuration) -> str:
    rows = [("setting", "variable", "value", "source")] + [
        (f"{s.declaration}.{s.field}", s.variable or "—", _shown(s.value), s.source)
        for s in config.settings
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in rows
    ]
    lines += [
        "",
        "unset (-) means the documented default: docs/reference.md's configuration tables;",
        "a setting without a variable (—) is set in code or in a run's resource config.",
        f"data directory: {config.data_dir} (LEASEHOLD_DATA_DIR)",
        f"streams: {', '.join(config.streams)}",
    ]
    return "\n".join(lines)


def cmd_config(args: argparse.Namespace) -> int:
    config = effective_configuration()
    if args.json:
        print(json.dumps(config.as_json(), indent=2))
    else:
        print(configuration_text(config))
    return 0


def add_config_parser(add: Callable[..., argparse.ArgumentParser]) -> None:
    """Register the command with `parser.build_parser`'s `add(name, help)`."""
    config = add(
        "config",
        help="every setting: its variable, value and whether the environment set it; "
        "validates them all",
    )
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(fn=cmd_config)
