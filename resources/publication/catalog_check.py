"""`catalog_current`: the table serves each partition's current publication, and only those."""

from __future__ import annotations

import time

from resources.catalog.base import CatalogError
from resources.catalog.target import PublicationTarget
from resources.check_outcome import CheckOutcome
from resources.ledger.ledger import Ledger
from resources.publication.check_support import check_outcome, published_partitions, where_of
from resources.publication.manifest import served_location

LAG_RECHECKS = 10
"""How many times a lag is judged again, a second apart, before it is reported: a publisher
records every partition of its run, then switches them in one call, so a check running beside
it sees its partitions behind the ledger for the seconds between."""
RECHECK_PAUSE_S = 1.0


def catalog_current(
    ledger: Ledger, target: PublicationTarget, table: str, pause_s: float = RECHECK_PAUSE_S
) -> CheckOutcome:
    """Ledger first, the target after (the publisher writes them in that order): a partition
    served ahead of that read is a publication recorded meanwhile, judged on a second ledger
    read. A partition's expected location is `served_location` of the target's format. A
    partition served behind the ledger (another publisher between its record and its switch)
    is judged again, `pause_s` apart, up to `LAG_RECHECKS` times: only a lag that stays is
    reported (a publisher that crashed there; the next run repairs it)."""
    outcome, lagging = _judged(ledger, target, table)
    for _ in range(LAG_RECHECKS):
        if not lagging:
            break
        time.sleep(pause_s)
        outcome, lagging = _judged(ledger, target, table)
    return outcome


def _judged(ledger: Ledger, target: PublicationTarget, table: str) -> tuple[CheckOutcome, bool]:
    """One judgement, and whether a partition was found served behind the ledger."""
    published = {tp.dt: p for tp, p in published_partitions(ledger, table)}
    problems: list[str] = []
    lagging = False
    try:
        definition = target.table(table)
        in_catalog = (
            {cp.dt: cp for cp in target.partitions(table)} if definition is not None else {}
        )
    except CatalogError as exc:
        failed = check_outcome("catalog_current", [f"{table}: {exc}"], 0, "partitions", "")
        return failed, False
    root = "" if definition is None else definition.location
    for dt in sorted(published.keys() | in_catalog.keys()):
        p, cp = published.get(dt), in_catalog.get(dt)
        if cp is not None and (p is None or cp.seq > p.seq):
            records = ledger.publications(table, dt)
            p = records[-1] if records else None
        where = where_of(table, dt)
        if p is None:
            what = "no publication record" if dt in published else "no publication"
            problems.append(f"{where}: in the catalog, but the ledger has {what}")
            continue
        lagging |= cp is None or cp.seq < p.seq
        if cp is None:
            problems.append(f"{where}: published (seq {p.seq}) but not in the catalog")
            continue
        expected = served_location(target.table_format, root, p.location)
        if (cp.location, cp.seq) != (expected, p.seq):
            problems.append(
                f"{where}: the catalog points at {cp.location} (seq {cp.seq}), the current "
                f"publication is {expected} (seq {p.seq})"
            )
    checked = len(published.keys() | in_catalog.keys())
    good = f"all {checked} catalog partitions point at their current publication"
    return check_outcome("catalog_current", problems, checked, "partitions", good), lagging
