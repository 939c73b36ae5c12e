"""Rows the ledger registered in a table between a mark and now: what `leasehold run` says it
committed, counted where the commits are rather than from what its runs managed to report.

A run's reports miss commits: a unit some of whose objects could not be read commits the
others and is CLOSED (no materialization), a large object's chunks are committed before one
that fails, a run crashes between a commit and its report. Counting the ledger instead, every
row committed after the mark is this invocation's, and only rows committed before it are
earlier runs'.
"""

from __future__ import annotations

from collections.abc import Sequence

from resources.ledger.ledger import Ledger

CommitMarks = dict[tuple[str, str], int]
"""(table, dt) -> the table partition's `next_object_id` at the mark: ids from it on were
registered after."""


def commit_marks(ledger: Ledger, tables: Sequence[str]) -> CommitMarks:
    """Each table partition's id counter now. One `table_partitions` read per table: O(dates),
    whatever the partitions hold."""
    return {
        (table, partition.dt): partition.next_object_id
        for table in tables
        for partition in ledger.table_partitions(table)
    }


def rows_committed_since(
    ledger: Ledger, marks: CommitMarks, tables: Sequence[str]
) -> dict[str, int]:
    """Table -> rows of the objects registered in it after `marks` (ids above each partition's
    mark; every id of a partition that had none). Costs one `table_partitions` read per table
    and one `ledger_objects` range per table partition that gained objects: O(dates + objects
    committed since), never the history. Counts any writer's commits: a run on another host
    committing to the same stream meanwhile is counted too."""
    rows = dict.fromkeys(tables, 0)
    for table in tables:
        for partition in ledger.table_partitions(table):
            mark = marks.get((table, partition.dt), 1)
            if partition.next_object_id > mark:
                new = ledger.ledger_objects(table, partition.dt, after=mark - 1)
                rows[table] += sum(o.row_count for o in new)
    return rows
