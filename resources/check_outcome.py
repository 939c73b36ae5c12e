"""`CheckOutcome`: what every check of the project returns, Dagster or not.

Shared by the ingestion and compaction check registries (siblings that may not import each
other), the Dagster asset checks that turn an outcome into a result, and `leasehold check`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warn"]


@dataclass(frozen=True)
class CheckOutcome:
    """The verdict of one check: passed or not, how much a failure matters, what it found."""

    name: str
    passed: bool
    severity: Severity
    """How much a failure matters: "error" fails CI; "warn" (say, a dead letter: a human
    must look, but nothing is wrong with what was ingested) is reported and does not."""
    summary: str
    """One line: what was found, with the first offender when there is one."""
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def verdict(self) -> str:
        """PASS, WARN (failed, severity "warn") or FAIL."""
        if self.passed:
            return "PASS"
        return "WARN" if self.severity == "warn" else "FAIL"

    @property
    def failed(self) -> bool:
        return self.verdict == "FAIL"
