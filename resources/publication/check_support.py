"""What every publication check shares: where a problem is, each published partition with its
record, and the outcome a check reports (its summary names the first problem, its metadata
lists up to `MAX_LISTED`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from resources.check_outcome import CheckOutcome
from resources.ledger.check_scope import CheckScope
from resources.ledger.ledger import Ledger
from resources.ledger.model import TablePartition
from resources.ledger.publication import Publication

MAX_LISTED = 20
"""Offenders listed in a check's metadata; the summary names the first and counts the rest."""


def first_listed(details: list[str]) -> str:
    more = len(details) - 1
    return f": {details[0]}" + (f" (and {more} more)" if more > 0 else "")


def check_metadata(checked: int, what: str, problems: list[str]) -> dict[str, Any]:
    return {
        what: checked,
        "problems": len(problems),
        "details": "\n".join(f"- {p}" for p in problems[:MAX_LISTED]) or "none",
    }


def check_outcome(
    name: str, problems: list[str], checked: int, what: str, good: str
) -> CheckOutcome:
    summary = (
        f"{len(problems)} problems in {checked} {what}{first_listed(problems)}"
        if problems
        else good
    )
    return CheckOutcome(
        name, not problems, "error", summary, check_metadata(checked, what, problems)
    )


def where_of(table: str, dt: str) -> str:
    return f"{table} dt={dt}"


def published_partitions(
    ledger: Ledger, table: str, scope: CheckScope | None = None
) -> Iterator[tuple[TablePartition, Publication | None]]:
    """Each published partition (of those `scope` says changed; all without one) with its
    current publication record (None: the record is missing, itself a problem)."""
    for tp in (scope or CheckScope.everything()).changed(ledger.table_partitions(table)):
        if tp.publication_seq > 0:
            records = ledger.publications(table, tp.dt)
            yield tp, (records[-1] if records else None)
