"""A rollup published as a small table readers query: `<stream>_<rollup>`, beside the stream's.

Published the way the stream's table is (docs/architecture.md), through the same
`PublicationTarget` (the stream's `table_format`), so an engine reads it the same way: per date,
a manifest version — its own directory, never written again, holding the Parquet file of the
state (a row per key: the group_by columns, then the aggregates) and the two manifests — and a
`PartitionSwitch` of the partition to that one file. The partition's `seq` is the state's
position (the object id its batches reached, or the `served_position` of the publication a
recomputed state aggregates): the target refuses a lower one, so a writer holding an older
state (a zombie whose lease passed on) cannot move readers back.

The table's root is the stream table's URL with `_<rollup>` appended (`.../lake/events` ->
`.../lake/events_per_user`): beside it, never under it, so the stream table's garbage
collection, which deletes what its ledger does not name, never sees a rollup's files. A version
is deleted once its successor has been current for the safety delay (the stream table's rule):
a reader that resolved it before the switch has that long to read it.
"""

from __future__ import annotations

import io
import logging
import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from resources.aggregation.partials import decode_key
from resources.catalog.base import HIVE_TYPES, Column, TableDefinition
from resources.catalog.target import PartitionFile, PartitionSwitch, PublicationTarget
from resources.ledger.publication import DataFile
from resources.objects.base import ObjectStore
from resources.publication.manifest import write_version
from resources.rollup.aggregates import Function
from resources.rollup.cursor import rollup_id
from resources.rollup.spec import RollupSpec
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

VERSION = re.compile(r"^dt=(?P<dt>[^/]+)/v(?P<upto>\d{19})-[0-9a-f]{12}/")
DATA_NAME = "data/rollup.parquet"
SUMMARY_KEY = "leasehold.rollup_state"
"""The switch summary's key: the state position it makes current, `dt:upto`."""
ARROW_TYPES = {
    "long": pa.int64(),
    "int": pa.int32(),
    "double": pa.float64(),
    "string": pa.string(),
    "boolean": pa.bool_(),
}


def rollup_table_name(config: StreamConfig, spec: RollupSpec) -> str:
    return f"{config.name}_{spec.name}"


@dataclass(frozen=True)
class RollupColumn:
    """A rollup table column: a group_by column or an aggregate; its streams.yaml type."""

    name: str
    type: str
    """A streams.yaml column type (`HIVE_TYPES` keys)."""


def rollup_columns(config: StreamConfig, spec: RollupSpec) -> list[RollupColumn]:
    """The group_by columns with the stream's types (a timestamp or a date as its ISO text, as
    the key holds it), then each aggregate: a count is a long, a sum of integers a long and of
    doubles a double, a min or max its column's type."""
    schema = {c.name: c.type for c in config.columns}
    out = [
        RollupColumn(c, "string" if schema[c] in ("timestamp", "date") else schema[c])
        for c in spec.group_by
    ]
    for a in spec.aggregates:
        if a.function is Function.COUNT:
            kind = "long"
        elif a.function is Function.SUM:
            kind = "double" if schema[a.column or ""] == "double" else "long"
        else:
            kind = schema[a.column or ""]
        out.append(RollupColumn(a.name, kind))
    return out


def state_rows(
    store: CoordinationStore, table: str, spec: RollupSpec, dt: str
) -> list[dict[str, Any]]:
    """The rollup's state of `dt` as rows, by key: the group_by columns, then the aggregates
    (what its table holds, and what `leasehold rollup read` prints)."""
    rows = []
    for key, state in sorted(store.rollup_states(rollup_id(table, spec), dt).items()):
        row = dict(zip(spec.group_by, decode_key(key), strict=True))
        row.update(zip((a.name for a in spec.aggregates), state.value, strict=True))
        rows.append(row)
    return rows


class RollupTable:
    """A rollup's state published for readers as a small table of its own, per date, the way the
    stream's table is."""

    def __init__(
        self,
        config: StreamConfig,
        spec: RollupSpec,
        store: CoordinationStore,
        target: PublicationTarget,
        objects: ObjectStore,
        *,
        safety_delay_s: float,
        clock_ms: Callable[[], int],
    ) -> None:
        """`target`: the stream's (`config.table_format`); `objects`: the rollup table's root
        (`table_url`)."""
        self.config, self.spec, self.store, self.target = config, spec, store, target
        self.objects = objects
        self.name = rollup_table_name(config, spec)
        self.columns = rollup_columns(config, spec)
        self.safety_delay_ms = int(safety_delay_s * 1000)
        self.clock_ms = clock_ms

    @staticmethod
    def table_url(config: StreamConfig, spec: RollupSpec) -> str:
        return f"{config.table.rstrip('/')}_{spec.name}"

    def definition(self) -> TableDefinition:
        columns = tuple(Column(c.name, HIVE_TYPES[c.type]) for c in self.columns)
        return TableDefinition(self.name, columns, self.objects.root_url)

    def published_upto(self, dt: str) -> int:
        """The state position the target serves for `dt` (0: nothing published). Raises
        `CatalogError`."""
        if self.target.table(self.name) is None:
            return 0
        partition = self.target.partition(self.name, dt)
        return 0 if partition is None else partition.seq

    def publish(self, dt: str, position: int) -> bool:
        """Write the state of `dt` (as the store holds it now, at `position`) as a new
        version and switch the partition to its one file, as `seq` `position`; False when the
        target already serves `position` or later (the version written is then an orphan, deleted
        with the old versions). Raises `CatalogError`, `ObjectStoreError`, the store errors."""
        if self.published_upto(dt) >= position:
            return False
        data = self._state_table(dt)
        key = f"dt={dt}/v{position:019d}-{uuid.uuid4().hex[:12]}/"
        sink = io.BytesIO()
        pq.write_table(data, sink)
        url = self.objects.put_bytes(key + DATA_NAME, sink.getvalue())
        size = len(sink.getvalue())
        version = write_version(self.objects, key, [DataFile(url, size, data.num_rows)])
        self.target.ensure_table(self.definition())
        state = PartitionSwitch(dt, position, version, (PartitionFile(url, size, data.num_rows),))
        switched = self.target.switch(self.name, [state], summary={SUMMARY_KEY: f"{dt}:{position}"})
        self._forget_old_versions(dt)
        return dt in switched

    def _state_table(self, dt: str) -> pa.Table:
        rows = state_rows(self.store, self.config.name, self.spec, dt)
        return pa.table(
            {
                c.name: pa.array([r[c.name] for r in rows], ARROW_TYPES.get(c.type))
                for c in self.columns
            }
        )

    def _forget_old_versions(self, dt: str) -> None:
        """Delete each version whose successor has been current for the safety delay (the
        successor's own files are as old as the moment it became current, about); never one
        at or past the position the target serves (the current one: known by its position,
        the same under every table format, not by a location), nor one a retained snapshot of
        the target's history still references (`PublicationTarget.referenced_files`)."""
        files: dict[str, list[str]] = {}
        written: dict[str, int] = {}
        for info in self.objects.list_prefix(f"dt={dt}/"):
            match = VERSION.match(info.key)
            if match is None:
                continue
            version = match.group(0)
            files.setdefault(version, []).append(info.key)
            written[version] = max(written.get(version, 0), info.modified_ms)
        current = self.target.partition(self.name, dt)
        ordered = sorted(files)  # by upto: the names sort as the positions do
        now = self.clock_ms()
        served: set[str] | None = None
        for older, newer in zip(ordered, ordered[1:], strict=False):
            position = VERSION.match(older)
            if current is not None and position and int(position["upto"]) >= current.seq:
                break  # never the current one, nor anything after it
            if written[newer] + self.safety_delay_ms > now:
                continue
            if served is None:  # read once, and only when something may go
                served = self.target.referenced_files(self.name) or set()
            if any(self.objects.url(key) in served for key in files[older]):
                continue  # a retained snapshot (Iceberg) still serves it: time travel
            for key in files[older]:
                self.objects.delete(key)
