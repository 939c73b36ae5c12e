"""A `CheckOutcome` as Dagster's `AssetCheckResult` or `AssetCheckEvaluation`.

The asset checks run the checks `leasehold check` runs; converting their outcomes in one place
keeps what the UI shows (a "warn" check as WARN, anything else as ERROR) the same for all,
whether a check step or the asset's own step evaluated them.
"""

from collections.abc import Callable, Iterable

from dagster import (
    AssetCheckEvaluation,
    AssetCheckKey,
    AssetCheckResult,
    AssetCheckSeverity,
    AssetExecutionContext,
)

from resources.check_outcome import CheckOutcome


def asset_check_result(outcome: CheckOutcome) -> AssetCheckResult:
    return AssetCheckResult(
        passed=outcome.passed,
        severity=_severity(outcome),
        description=outcome.summary,
        metadata=outcome.metadata,
    )


def _severity(outcome: CheckOutcome) -> AssetCheckSeverity:
    return AssetCheckSeverity.ERROR if outcome.severity == "error" else AssetCheckSeverity.WARN


def evaluate_planned_checks(
    context: AssetExecutionContext, names: Iterable[str], run_check: Callable[[str], CheckOutcome]
) -> None:
    """Evaluate, in the asset's own step, those of its checks (`names`) that its run planned,
    and log their evaluations (issue 23).

    leasehold's assets yield one materialization per partition, not their output, so Dagster
    skips the check steps it planned beside them ("skipped dependencies"): a Materialize from
    the UI, which plans an asset's checks by default, would leave them SKIPPED. Evaluated here,
    the run records their results instead. Sensor runs plan none (their requests carry
    `asset_check_keys=[]`, the checks sensor runs them after), nor do `leasehold run`'s (its
    jobs hold no checks). What the run planned: its check selection, or without one (a job
    not subset by checks) every check its job holds."""
    planned = context.run.asset_check_selection
    if planned is None:
        planned = context.job_def.asset_layer.asset_graph.asset_check_keys
    for name in names:
        if AssetCheckKey(context.asset_key, name) not in planned:
            continue
        outcome = run_check(name)
        context.log_event(
            AssetCheckEvaluation(
                asset_key=context.asset_key,
                check_name=name,
                passed=outcome.passed,
                severity=_severity(outcome),
                description=outcome.summary,
                metadata=outcome.metadata,
            )
        )
