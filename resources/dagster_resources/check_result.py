"""A `CheckOutcome` as Dagster's `AssetCheckResult`.

The ingestion and merge asset checks both run the checks `leasehold check` runs; converting
their outcomes in one place keeps what the UI shows (a "warn" check as WARN, anything else as
ERROR) the same for both.
"""

from dagster import AssetCheckResult, AssetCheckSeverity

from resources.check_outcome import CheckOutcome


def asset_check_result(outcome: CheckOutcome) -> AssetCheckResult:
    return AssetCheckResult(
        passed=outcome.passed,
        severity=AssetCheckSeverity.ERROR
        if outcome.severity == "error"
        else AssetCheckSeverity.WARN,
        description=outcome.summary,
        metadata=outcome.metadata,
    )
