"""SQLite-only: the queries a sensor tick and an acquisition make stay index range reads."""

from __future__ import annotations

from pathlib import Path

import pytest

from resources.stores import build_store
from resources.stores.settings import StoreSettings
from resources.stores.sqlite.schema import AVAILABLE, DUE_FOR_RETRY


@pytest.mark.parametrize("query", [AVAILABLE, DUE_FOR_RETRY], ids=["acquire_next", "retries"])
def test_status_queries_read_index_ranges_not_the_whole_source(tmp_path: Path, query: str) -> None:
    """Done items pile up (COMPLETED stays): a look for work must not read them all, every tick."""
    store = build_store(StoreSettings(sqlite_path=str(tmp_path / "c.db")))
    params = {"sid": "s", "now_prio": "1", "waited_prio": "0", "limit": 20}
    plan = [row[3] for row in store._connection().execute(f"EXPLAIN QUERY PLAN {query}", params)]
    reads = [step for step in plan if "lease_items" in step]
    assert len(reads) == 3, plan
    assert all(step.startswith("SEARCH lease_items USING INDEX source_status") for step in reads)
