"""A table partition's row and its merge chain read as of one moment, for the checks that
compare the two (compaction's chain check, publication's coverage check)."""

from __future__ import annotations

from resources.ledger.ledger import Ledger
from resources.ledger.merge import MergeRange
from resources.ledger.model import TablePartition


def partition_snapshot(
    ledger: Ledger, table: str, partition: TablePartition, attempts: int = 3
) -> tuple[TablePartition, list[MergeRange]]:
    """The partition row and its chain as of one moment: the row read between two equal reads
    of the chain (a chain only ever grows, so equal reads mean it did not move in between)."""
    ranges = ledger.merge_ranges(table, partition.dt)
    for _ in range(attempts):
        partition = ledger.table_partition(table, partition.dt) or partition
        again = ledger.merge_ranges(table, partition.dt)
        if again == ranges:
            break
        ranges = again
    return partition, ranges
