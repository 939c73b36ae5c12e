"""The rollup check: each rollup's state equals a full recomputation from the published table.

For a table partition the rollup has brought to object id `upto`, the reference is every row of
ids up to `upto`, aggregated from scratch: the rows of the partition's published files (read
through the stream's `PublicationTarget`, as an engine does; they hold exactly the ids up to the
publication's `published_upper`) and, above those, the rows of the committed small objects up to
`upto` (never collected: garbage collection keeps every small object above what is
published). A partition whose state is behind what is published, or whose batch is being
written, cannot be compared yet: that is reported (a warning), not judged; so is a rollup
recomputed per publication (`latest`, `replace`) that is not at the partition's current one.

Judged per partition changed since the check last passed — a partition's row or a rollup's
cursor moved — like the other checks (`resources.ledger.check_scope`): the cost of a pass is
what changed, not the table's history.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from typing import TypedDict, cast

import pyarrow as pa

from resources.aggregation.partials import ArrowPartials, column_specs, read_files
from resources.aggregation.runner import cursors
from resources.catalog.target import PublicationTarget
from resources.check_outcome import CheckOutcome
from resources.key_settings import published_rows_leave
from resources.ledger.check_scope import CheckScope, partition_state, with_memory
from resources.ledger.model import TablePartition
from resources.objects.base import ObjectStore
from resources.publication.reader import read_partition
from resources.rollup.aggregates import Value
from resources.rollup.cursor import RollupCursor, rollup_id
from resources.schema.arrow import read_by_name
from resources.schema.columns import ColumnSpec
from resources.stores.base import CoordinationStore
from resources.stores.stream_schema import latest_columns
from resources.streams import StreamConfig

CHECKS: dict[str, str] = {
    "rollups_exact": "Per table partition changed since the last pass, every rollup's state "
    "equals a from-scratch aggregation of the rows it covers, read from the published table "
    "(and the committed small objects above what is published).",
}


def differences(state: Mapping[str, Value], reference: Mapping[str, Value]) -> list[str]:
    """The keys whose values differ (sums of floats compared with a relative tolerance: their
    result depends on the order rows were added in)."""
    out = []
    for key in sorted(state.keys() | reference.keys()):
        got, want = state.get(key), reference.get(key)
        if got is None or want is None or not all(map(_same, got, want)):
            out.append(f"{key}: state {got}, recomputed {want}")
    return out


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        if x is None or y is None:
            return False
        # A float beside another number (a value of another kind fails isclose, as it should).
        return math.isclose(cast(float, x), cast(float, y), rel_tol=1e-9, abs_tol=1e-9)
    return x == y


class S3Access(TypedDict):
    """Where the published files are read from: `read_partition`'s S3 arguments."""

    s3_endpoint_url: str | None
    region: str | None


def reference_rows(
    store: CoordinationStore,
    objects: ObjectStore,
    target: PublicationTarget,
    table: str,
    tp: TablePartition,
    upto: int,
    wanted: Sequence[ColumnSpec],
    s3: S3Access,
) -> pa.Table:
    """Every row of ids up to `upto`: the published files, then the small objects above,
    each file read by name as `wanted` (a column a file of an older schema version lacks is
    null: no value to the aggregates). Raises `PublishedReadError`, `RetypedColumnError`,
    `ObjectStoreError` when a file cannot be read as `wanted`."""
    parts = []
    if tp.published_upper > 0:
        parts.append(read_partition(target, table, tp.dt, columns=wanted, **s3))
    for o in store.ledger_objects(table, tp.dt, after=tp.published_upper):
        if o.object_id <= upto:
            data = io.BytesIO(objects.get_bytes(objects.key_of(o.url)))
            parts.append(read_by_name(data, wanted))
    if not parts:
        return read_files([], wanted)
    return pa.concat_tables(parts)


def rollups_exact(
    store: CoordinationStore,
    objects: ObjectStore,
    target: PublicationTarget,
    config: StreamConfig,
    table: str,
    scope: CheckScope,
    s3: S3Access,
) -> CheckOutcome:
    name = "rollups_exact"
    schema = latest_columns(store, config)
    by_rollup = {spec.name: cursors(store, table, spec) for spec in config.rollups}
    served = published_rows_leave(config.dedupe, config.on_change)
    judged, waiting, wrong = 0, [], []
    for tp in store.table_partitions(table):
        state = [
            *partition_state(tp),
            *(c.get(tp.dt, RollupCursor()).position for c in by_rollup.values()),
        ]
        if not scope.full and scope.remembered.get(tp.dt) == state:
            scope.skipped += 1
            continue
        comparable = True
        for spec in config.rollups:
            cursor = by_rollup[spec.name].get(tp.dt, RollupCursor())
            where = f"{spec.name} dt={tp.dt}"
            if cursor.pending is not None:
                waiting.append(f"{where}: batch {cursor.pending[1]} is being written")
                comparable = False
                continue
            if served and cursor.seq != tp.publication_seq:
                waiting.append(
                    f"{where}: state of publication {cursor.seq}, behind the current "
                    f"{tp.publication_seq}"
                )
                comparable = False
                continue
            if cursor.upto < tp.published_upper:
                waiting.append(
                    f"{where}: state at id {cursor.upto}, behind the published id "
                    f"{tp.published_upper}"
                )
                comparable = False
                continue
            judged += 1
            wanted = column_specs(spec, schema)
            rows = reference_rows(store, objects, target, table, tp, cursor.upto, wanted, s3)
            reference = ArrowPartials.of_table(spec, rows)
            state_values = {
                k: s.value for k, s in store.rollup_states(rollup_id(table, spec), tp.dt).items()
            }
            wrong += [f"{where}: {d}" for d in differences(state_values, reference)]
        if comparable:  # one not comparable yet is looked at again by the next pass
            scope.evaluated[tp.dt] = state
    return _verdict(name, judged, waiting, wrong)


def _verdict(name: str, judged: int, waiting: list[str], wrong: list[str]) -> CheckOutcome:
    """Wrong keys fail the check, partitions not comparable yet warn, else it passes."""
    metadata = {"judged": judged, "waiting": len(waiting), "wrong_keys": len(wrong)}
    if wrong:
        return CheckOutcome(
            name,
            False,
            "error",
            f"{len(wrong)} keys differ from a full recomputation; first: {wrong[0]}",
            metadata,
        )
    if waiting:
        return CheckOutcome(
            name,
            False,
            "warn",
            f"{len(waiting)} rollups of partitions not comparable yet "
            f"(the next rollup run brings them up); first: {waiting[0]}",
            metadata,
        )
    return CheckOutcome(
        name,
        True,
        "error",
        f"{judged} rollups of partitions equal a full recomputation",
        metadata,
    )


def run_all(
    config: StreamConfig,
    store: CoordinationStore,
    objects: ObjectStore,
    target: PublicationTarget,
    full: bool = False,
    *,
    s3_endpoint_url: str | None = None,
    region: str | None = None,
) -> list[CheckOutcome]:
    """The rollup checks of a stream (none when it declares no rollup); the S3 endpoint and
    region are those the published files are read with."""
    s3: S3Access = {"s3_endpoint_url": s3_endpoint_url, "region": region}
    if not config.rollups:
        return []
    return [
        with_memory(
            store,
            config.name,
            config.name,
            "rollups_exact",
            lambda scope: rollups_exact(store, objects, target, config, config.name, scope, s3),
            full,
        )
    ]
