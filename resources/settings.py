"""Settings shared by every layer: how a setting is declared, ISO-8601 durations and the data
directory.

Every setting is declared once, as a field of a frozen dataclass built with `setting(...)`:
its type (the annotation), default, environment variable, documentation and check. From that
one declaration come the Dagster resource's field (`resources.dagster_resources.env`), the
variable and its parsing (`env_vars`, `from_env`) and the validation (`check_settings`), so
none of them can drift from another. Imports only `resources.errors`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, ClassVar, TypeVar, Union

from resources.errors import ConfigError

S = TypeVar("S", bound="Settings")

# A check returns what is wrong with a value, or None; it is never given None.
Check = Callable[[Any], str | None]


def setting(
    default: Any, *, env: str | None = None, doc: str = "", check: Check | None = None
) -> Any:
    """One setting of a `Settings` dataclass: its default, the environment variable that sets
    it (None: set only in code or run config), what it is for, and its check."""
    return dataclasses.field(default=default, metadata={"env": env, "doc": doc, "check": check})


class Settings:
    """Base of a frozen settings dataclass whose fields are declared with `setting(...)`.

    `config_error` is the `ConfigError` subclass, taking (field, message), that a bad value
    raises. Subclasses add cross-field rules by overriding `validate`, calling super first.
    """

    config_error: ClassVar[type[ConfigError]] = ConfigError
    # Set on each subclass by `@dataclass`: what `dataclasses.fields` reads.
    __dataclass_fields__: ClassVar[dict[str, dataclasses.Field[Any]]]

    def validate(self: S) -> S:
        check_settings(self)
        return self

    @classmethod
    def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
        return from_env(cls, environ)


def declared(cls: type[Settings]) -> tuple[dataclasses.Field[Any], ...]:
    found = _DECLARED.get(cls)
    if found is None:
        found = _DECLARED[cls] = dataclasses.fields(cls)
    return found


def field_types(cls: type[Settings]) -> Mapping[str, Any]:
    """Each field's type, resolved (the modules use postponed annotations)."""
    found = _FIELD_TYPES.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = types.MappingProxyType({f.name: hints[f.name] for f in declared(cls)})
        _FIELD_TYPES[cls] = found
    return found


# Both cached per class, in plain dicts: `functools.cache` takes only what mypy sees as
# hashable, and it does not see a class as such when its instances are not.
_DECLARED: dict[type[Settings], tuple[dataclasses.Field[Any], ...]] = {}
_FIELD_TYPES: dict[type[Settings], Mapping[str, Any]] = {}


def field_doc(f: dataclasses.Field[Any]) -> str:
    doc: str = f.metadata.get("doc", "")
    return doc


def env_vars(cls: type[Settings]) -> dict[str, str]:
    """Field name -> environment variable, for the fields that have one."""
    return {f.name: f.metadata["env"] for f in declared(cls) if f.metadata.get("env")}


def base_type(annotation: Any) -> tuple[Any, bool]:
    """`int | None` -> (int, True); `str` -> (str, False)."""
    if typing.get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0], True
        raise TypeError(f"unsupported setting type {annotation!r}")
    return annotation, False


_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def parse_value(cls: type[Settings], name: str, raw: str, var: str | None = None) -> Any:
    """A field's value given as text (an environment variable), parsed by its declared type;
    a `cls.config_error` naming the field if it is not one."""
    kind, _ = base_type(field_types(cls)[name])
    source = f" (from {var})" if var else ""
    if kind is bool:
        lowered = raw.strip().lower()
        if lowered not in _TRUE + _FALSE:
            raise cls.config_error(name, f"{raw!r}{source} is not a boolean (true/false)")
        return lowered in _TRUE
    if kind is int:
        try:
            return int(raw)
        except ValueError:
            raise cls.config_error(name, f"{raw!r}{source} is not an integer") from None
    if kind is float:
        try:
            return float(raw)
        except ValueError:
            raise cls.config_error(name, f"{raw!r}{source} is not a number") from None
    if kind is str:
        return raw
    raise TypeError(f"{cls.__name__}.{name}: unsupported setting type {kind!r}")


def env_values(cls: type[Settings], environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The fields whose variable is set (and not empty), parsed by their declared type."""
    env = os.environ if environ is None else environ
    return {
        name: parse_value(cls, name, env[var], var)
        for name, var in env_vars(cls).items()
        if env.get(var)
    }


def from_env(cls: type[S], environ: Mapping[str, str] | None = None) -> S:
    """The settings the environment gives, validated: unset variables keep their default."""
    return cls(**env_values(cls, environ)).validate()


def _type_problem(kind: Any, value: Any) -> str | None:
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return None
    if kind in (int, float) and isinstance(value, bool):
        return f"{value!r} is not {'an integer' if kind is int else 'a number'}"
    if isinstance(value, kind):
        return None
    names = {str: "a string", int: "an integer", float: "a number", bool: "a boolean"}
    return f"{value!r} is not {names.get(kind, kind.__name__)}"


def check_settings(settings: Settings) -> None:
    """Each field's type and its declared check, in declaration order; the first problem is
    raised as `config_error` naming the field."""
    cls = type(settings)
    types_ = field_types(cls)
    for f in declared(cls):
        value = getattr(settings, f.name)
        kind, optional = base_type(types_[f.name])
        if value is None:
            if optional:
                continue
            raise cls.config_error(f.name, "must be set")
        problem = _type_problem(kind, value)
        if problem is None and f.metadata.get("check") is not None:
            problem = f.metadata["check"](value)
        if problem is not None:
            raise cls.config_error(f.name, problem)


# -- checks -------------------------------------------------------------------------------------


def one_of(*choices: str) -> Check:
    return lambda v: (
        None if v in choices else f"{v!r} is unknown; choose one of {', '.join(choices)}"
    )


def at_least(low: float) -> Check:
    return lambda v: None if v >= low else f"{v!r} must be at least {low:g}"


def positive(v: float) -> str | None:
    return None if v > 0 else f"{v!r} must be positive"


def http_url(v: str) -> str | None:
    return None if re.match(r"^https?://", v) else f"{v!r} is not an http(s) URL"


_DURATION = re.compile(
    r"^P(?!$)(?:(?P<weeks>\d+(?:\.\d+)?)W)?(?:(?P<days>\d+(?:\.\d+)?)D)?"
    r"(?:T(?=\d)(?:(?P<hours>\d+(?:\.\d+)?)H)?(?:(?P<minutes>\d+(?:\.\d+)?)M)?"
    r"(?:(?P<seconds>\d+(?:\.\d+)?)S)?)?$"
)


def parse_iso_duration(
    text: str, field: str, error: Callable[[str, str], ConfigError] = ConfigError
) -> float:
    """ISO-8601 duration to seconds (`P7D`, `PT12H`, `P1DT30M`, `P2W`).

    Years and months are refused: they have no fixed length, and a TTL that silently means
    something else than the operator thought is how live items get deleted.
    """
    problem = iso_duration_problem(text)
    if problem is not None:
        raise error(field, problem)
    return _duration_seconds(text)


def iso_duration_problem(text: Any) -> str | None:
    """What is wrong with `text` as an ISO-8601 duration longer than zero, or None."""
    match = _DURATION.match(text.strip().upper()) if isinstance(text, str) else None
    if match is None:
        return (
            f"{text!r} is not an ISO-8601 duration such as 'P7D' or 'PT12H' "
            "(weeks, days, hours, minutes, seconds)"
        )
    if _duration_seconds(text) <= 0:
        return f"{text!r} must be longer than zero"
    return None


def _duration_seconds(text: str) -> float:
    match = _DURATION.match(text.strip().upper())
    assert match is not None
    parts = {k: float(v) for k, v in match.groupdict().items() if v}
    return (
        parts.get("weeks", 0) * 604800
        + parts.get("days", 0) * 86400
        + parts.get("hours", 0) * 3600
        + parts.get("minutes", 0) * 60
        + parts.get("seconds", 0)
    )


DATA_DIR_ENV = "LEASEHOLD_DATA_DIR"


def default_data_dir() -> Path:
    return Path(os.environ.get(DATA_DIR_ENV, "data")).resolve()
