"""What one `switch` commits, decided on the table as it is now: per date, the files to delete
and to add, the dates' new `seq` (table properties `leasehold.seq.<dt>`), the snapshot summary,
and the snapshots that expire in the same commit.

A date's `seq` lives in the table's properties, set in the commit that switches it: a switch
at or below it is skipped, so a publisher killed after its commit and before recording it
commits nothing the second time, and two publishers switching the same date make one snapshot
(the second re-plans on the new head and finds nothing to do).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pyiceberg.expressions import In, Reference
from pyiceberg.expressions.literals import literal
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table
from pyiceberg.table.metadata import TableMetadata

from resources.catalog.base import PARTITION_KEY
from resources.catalog.iceberg.files import data_files, partition_dt
from resources.catalog.target import PartitionSwitch

SEQ_PREFIX = "leasehold.seq."
"""Table property (and snapshot summary key) `leasehold.seq.<dt>`: the date's current seq."""
VERSION_PREFIX = "leasehold.version."
"""Table property `leasehold.version.<dt>`: the manifest version directory of the date's
current publication (leasehold's own record of it; not in snapshot summaries)."""


def seqs(properties: Mapping[str, str]) -> dict[str, int]:
    """dt -> seq of the `leasehold.seq.<dt>` keys of table properties or a snapshot summary."""
    return {k[len(SEQ_PREFIX) :]: int(v) for k, v in properties.items() if k.startswith(SEQ_PREFIX)}


def versions(properties: Mapping[str, str]) -> dict[str, str]:
    """dt -> manifest version URL of the `leasehold.version.<dt>` table properties."""
    return {
        k[len(VERSION_PREFIX) :]: v for k, v in properties.items() if k.startswith(VERSION_PREFIX)
    }


@dataclass
class SwitchPlan:
    """One commit: the properties to set, the files to delete and add, the summary."""

    dts: list[str]
    properties: dict[str, str]
    deleted: list[DataFile] = field(default_factory=list)
    added: list[DataFile] = field(default_factory=list)
    summary: dict[str, str] = field(default_factory=dict)


def applicable(
    current: Mapping[str, int], switches: Sequence[PartitionSwitch]
) -> dict[str, PartitionSwitch]:
    """dt -> the switch to apply: the highest `seq` of the call per date, where it is above
    the date's current one."""
    best: dict[str, PartitionSwitch] = {}
    for s in switches:
        if s.seq > current.get(s.dt, -1) and (s.dt not in best or s.seq > best[s.dt].seq):
            best[s.dt] = s
    return best


def plan_switch(
    table: Table, switches: Sequence[PartitionSwitch], summary: Mapping[str, str]
) -> SwitchPlan | None:
    """The commit that makes each applicable switch's files the whole of its date on `table`
    (as loaded now), None when none applies. Raises `CatalogError` when a file to add cannot
    be read or does not fit the table."""
    todo = applicable(seqs(table.metadata.properties), switches)
    if not todo:
        return None
    dts = sorted(todo)
    marks = {f"{SEQ_PREFIX}{dt}": str(todo[dt].seq) for dt in dts}
    named = {f"{VERSION_PREFIX}{dt}": todo[dt].version_url for dt in dts}
    plan = SwitchPlan(dts, {**marks, **named}, summary={**summary, **marks})
    current = _current_files(table, dts)
    for dt in dts:
        wanted = {f.url for f in todo[dt].files}
        held = current.get(dt, {})
        plan.deleted += [f for url, f in held.items() if url not in wanted]
        new = [f for f in dict.fromkeys(todo[dt].files) if f.url not in held]
        plan.added += data_files(table.io, table.metadata, dt, new)
    return plan


def _current_files(table: Table, dts: Sequence[str]) -> dict[str, dict[str, DataFile]]:
    """dt -> url -> entry of the current snapshot's files of `dts`."""
    out: dict[str, dict[str, DataFile]] = {}
    if table.metadata.current_snapshot() is None:
        return out
    of_dts = In(term=Reference(PARTITION_KEY), values={literal(dt) for dt in dts})
    scan = table.scan(row_filter=of_dts)
    for task in scan.plan_files():
        dt = partition_dt(task.file.partition[0])
        out.setdefault(dt, {})[task.file.file_path] = task.file
    return out


def expired_snapshots(
    metadata: TableMetadata, now_ms: int, retention_ms: int, max_snapshots: int
) -> list[int]:
    """Ids of the snapshots to expire with the next commit: those older than `retention_ms`,
    and the oldest beyond `max_snapshots - 1` (the commit adds one), never one a branch or
    tag points at."""
    protected = {ref.snapshot_id for ref in metadata.refs.values()}
    ordered = sorted(metadata.snapshots, key=lambda s: (s.timestamp_ms, s.sequence_number or 0))
    keep_from = max(0, len(ordered) - (max_snapshots - 1))
    return [
        s.snapshot_id
        for i, s in enumerate(ordered)
        if s.snapshot_id not in protected
        and (i < keep_from or s.timestamp_ms < now_ms - retention_ms)
    ]
