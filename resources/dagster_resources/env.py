"""Dagster resources whose fields come from settings declarations, bound to `EnvVar`s.

`settings_resource(StoreSettings, TimingSettings)` is a `ConfigurableResource` base class with
one field per declared setting (same name, type, default; the setting's doc as description),
so a resource never spells a setting again. Its `from_env()` binds each set variable as an
`EnvVar` and validates the environment first, so a bad variable fails the code location at
load with a message naming the field; `validate_settings()` checks the resolved fields through
the same declarations at setup.

A resource built by `from_env()` holds unresolved `EnvVar`s until Dagster configures it for a
run: definitions-time code reads the settings with `SomeSettings.from_env()` instead.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, TypeVar

from dagster import ConfigurableResource, EnvVar
from pydantic import Field

from resources.settings import Settings, base_type, env_values, env_vars, field_doc, field_types

S = TypeVar("S", bound=Settings)
R = TypeVar("R", bound="SettingsResource")


# Not `ConfigurableResource[...]`: subscripting a pydantic model makes a new class at run time.
class SettingsResource(ConfigurableResource):  # type: ignore[type-arg]
    """Base of the resources `settings_resource` builds; `declarations` are its settings."""

    declarations: ClassVar[tuple[type[Settings], ...]] = ()

    @classmethod
    def from_env(cls: type[R]) -> R:
        """Each field whose variable is set is bound to it: `EnvVar` for text, `EnvVar.int`
        for integers, so the UI shows where the value comes from and secrets never land in run
        config. Booleans and numbers are bound as the value parsed here: Dagster has no float
        source, and its boolean parsing takes anything but false/0/none as true (`no` too).
        Every other field keeps its default."""
        kwargs: dict[str, Any] = {}
        for declaration in cls.declarations:
            parsed = env_values(declaration)
            declaration(**parsed).validate()  # raises the ConfigError naming the field
            variables = env_vars(declaration)
            types = field_types(declaration)
            for name, value in parsed.items():
                kind, _ = base_type(types[name])
                if kind is str:
                    kwargs[name] = EnvVar(variables[name])
                elif kind is int:
                    kwargs[name] = EnvVar.int(variables[name])
                else:
                    kwargs[name] = value
        return cls(**kwargs)

    def settings_of(self, declaration: type[S]) -> S:
        """This resource's fields as `declaration`'s settings (not validated). Only on a
        configured resource: an unresolved `EnvVar` field cannot be read."""
        values = {}
        for f in dataclasses.fields(declaration):
            value = getattr(self, f.name)
            if hasattr(value, "env_var_name"):  # an EnvVar or EnvVar.int
                raise RuntimeError(
                    f"{type(self).__name__}.{f.name} is bound to the environment variable "
                    f"{value.env_var_name} and resolves only in a run; outside one, read "
                    f"{declaration.__name__}.from_env()"
                )
            values[f.name] = value
        return declaration(**values)

    def validate_settings(self) -> None:
        for declaration in self.declarations:
            self.settings_of(declaration).validate()


def settings_resource(*declarations: type[Settings]) -> type[SettingsResource]:
    """A `SettingsResource` base class with one pydantic field per setting of `declarations`."""
    annotations: dict[str, Any] = {}
    namespace: dict[str, Any] = {}
    for declaration in declarations:
        types = field_types(declaration)
        for f in dataclasses.fields(declaration):
            if f.name in annotations:
                raise TypeError(f"setting {f.name!r} is declared twice")
            annotations[f.name] = types[f.name]
            namespace[f.name] = Field(default=f.default, description=field_doc(f) or None)
    name = "".join(d.__name__ for d in declarations) + "Resource"
    metaclass: Any = type(SettingsResource)  # pydantic's, which builds the fields
    built: type[SettingsResource] = metaclass(
        name,
        (SettingsResource,),
        {
            "__module__": __name__,
            "__qualname__": name,
            "__annotations__": annotations,
            "declarations": declarations,
            **namespace,
        },
    )
    return built
