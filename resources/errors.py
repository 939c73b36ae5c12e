"""The one error root: everything leasehold raises on purpose is a `LeaseholdError`.

The CLI prints any of them as one line (exit 2 for `ConfigError`, 1 for the rest); anything
else is a bug and keeps its traceback. Imports nothing of the project: every layer may use it.
"""

from __future__ import annotations


class LeaseholdError(Exception):
    """Root of every error leasehold raises on purpose."""


class ConfigError(LeaseholdError, ValueError):
    """Invalid configuration, detected before any work; `field` names the culprit."""

    def __init__(self, field: str, message: str, *, what: str = "configuration") -> None:
        super().__init__(f"invalid {what}: {field}: {message}")
        self.field = field
        self.reason = message
