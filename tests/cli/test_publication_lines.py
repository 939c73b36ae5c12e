"""The run's publication lines, from the published table's asset metadata: a revision (a date
served again without keys that later records on other dates took) says so, and the stage's
line counts them."""

from __future__ import annotations

from typing import Any

from coordination_assets.run_report import MainJobReport, publication_line, publication_summary


def metadata(seq: int, revises: int = 0, switched_now: bool = False) -> dict[str, Any]:
    return {
        "outcome": "published", "kind": "merged", "switched_now": switched_now, "seq": seq,
        "files": 1, "rows": 10, "manifest": "file:///m/", "revises": revises,
    }  # fmt: skip


def test_revisions_are_named_and_counted() -> None:
    report = MainJobReport()
    report.record_publication("orders", "2026-03-03", metadata(4, switched_now=True))
    line = report.record_publication("orders", "2026-03-01", metadata(3, revises=2))
    assert line == (
        "orders dt=2026-03-01: published v3 (merged, a revision of v2): 1 file, 10 rows, "
        "manifest file:///m/"
    )
    assert publication_summary(report) == (
        "2 table partitions published (1 switched to merged files; 1 revised: keys taken by "
        "later records on other dates)"
    )
    plain = MainJobReport()
    plain.record_publication("orders", "2026-03-01", {**metadata(1), "revises": 0})
    assert publication_summary(plain) == "1 table partition published (0 switched to merged files)"
    assert "revision" not in publication_line(metadata(1))
