"""The one error root: everything leasehold raises on purpose is a `LeaseholdError`.

The CLI prints any of them as one line (exit 2 for `ConfigError`, 1 for the rest), also when
Dagster wrapped it; anything else is a bug and keeps its traceback. Imports nothing of the
project: every layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterator


class LeaseholdError(Exception):
    """Root of every error leasehold raises on purpose."""


class ConfigError(LeaseholdError, ValueError):
    """Invalid configuration, detected before any work; `field` names the culprit."""

    def __init__(self, field: str, message: str, *, what: str = "configuration") -> None:
        super().__init__(f"invalid {what}: {field}: {message}")
        self.field = field
        self.reason = message


class ComponentUnreachableError(LeaseholdError):
    """A component leasehold needs could not be used: it did not answer within bounded retries,
    kept throttling, or turned the call away (no credentials, access denied).

    The message names the component, the endpoint or resource and the cause, on one line;
    `component` says which, as a sentence begins ("the lease store", "an object store", "the
    catalog", "Spark", "Dagster's storage"), for the line that points at `leasehold doctor`. A
    subclass sets it.
    """

    component = "a component"


def causes(exc: BaseException) -> Iterator[BaseException]:
    """`exc`, then what caused it, and so on, each once: where a `LeaseholdError` is found
    when a library (Dagster) wrapped it in its own."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__
