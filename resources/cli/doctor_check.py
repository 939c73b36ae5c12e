"""What every `leasehold doctor` check shares: its verdict (`Check`), how an error is said in
it, the retry policy of its calls and the names of the scratch data it writes and deletes."""

from __future__ import annotations

from dataclasses import dataclass

from resources.retry import RetryPolicy

SCRATCH_SID = "leasehold-doctor"
SCRATCH_PREFIX = "_leasehold_doctor"
# A doctor reports; it does not wait out an outage: two quick attempts per call.
DOCTOR_RETRY = RetryPolicy(max_attempts=2, base_delay_s=0.05, max_delay_s=0.2)


@dataclass(frozen=True)
class Check:
    """One check's verdict: PASS or FAIL, what it found and, on FAIL, what to change."""

    name: str
    ok: bool
    detail: str
    fix: str = ""

    def text(self) -> str:
        line = f"{'PASS' if self.ok else 'FAIL'}  {self.name}: {self.detail}"
        return line if self.ok or not self.fix else f"{line}\n      fix: {self.fix}"


def error_text(exc: BaseException) -> str:
    """The error on one line, at most 400 characters (a check's detail)."""
    return " ".join(str(exc).split())[:400] or type(exc).__name__
