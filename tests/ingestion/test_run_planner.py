"""Run planning: new partitions in contiguous ranges; work left behind in as few as possible."""

from __future__ import annotations

import pytest

from resources.errors import ConfigError
from resources.ingestion.run_planner import plan_retry_runs, plan_runs

ORDER = [f"k{i:03d}" for i in range(100)]


def spans(plans) -> list[tuple[str, str, int]]:
    return [(p.first, p.last, p.count) for p in plans]


def test_new_partitions_are_cut_into_ranges_of_the_run_size() -> None:
    assert spans(plan_runs("s", ORDER[:25], 10)) == [
        ("k000", "k009", 10),
        ("k010", "k019", 10),
        ("k020", "k024", 5),
    ]
    with pytest.raises(ConfigError):
        plan_runs("s", ORDER, 0)


def test_scattered_work_is_covered_by_few_windows_ending_at_the_last_due_key() -> None:
    due = ["k003", "k010", "k011", "k040", "k041", "k090"]
    plans = plan_retry_runs("s", ORDER, due, max_partitions_per_run=50, max_runs=5)
    # one window from k003 spans up to k052 but ends at its last due key, k041
    assert spans(plans) == [("k003", "k041", 39), ("k090", "k090", 1)]


def test_a_window_never_crosses_a_partition_without_a_lease_item() -> None:
    due = ["k003", "k010", "k011"]
    plans = plan_retry_runs(
        "s", ORDER, due, max_partitions_per_run=50, max_runs=5, unleased={"k005"}
    )
    assert spans(plans) == [("k003", "k003", 1), ("k010", "k011", 2)]


def test_bounded_runs_per_tick_and_unknown_keys_ignored() -> None:
    due = [f"k{i:03d}" for i in range(0, 100, 10)] + ["not-a-partition"]
    plans = plan_retry_runs("s", ORDER, due, max_partitions_per_run=5, max_runs=3)
    assert spans(plans) == [("k000", "k000", 1), ("k010", "k010", 1), ("k020", "k020", 1)]


def test_run_keys_change_with_the_work_not_with_its_order() -> None:
    a = plan_retry_runs(
        "s", ORDER, ["k001", "k002"], max_partitions_per_run=9, max_runs=1, fingerprint="x"
    )
    b = plan_retry_runs(
        "s", ORDER, ["k002", "k001"], max_partitions_per_run=9, max_runs=1, fingerprint="x"
    )
    c = plan_retry_runs(
        "s", ORDER, ["k001", "k002"], max_partitions_per_run=9, max_runs=1, fingerprint="y"
    )
    assert a[0].run_key == b[0].run_key != c[0].run_key
    assert a[0].run_key.startswith("s:retry:")
