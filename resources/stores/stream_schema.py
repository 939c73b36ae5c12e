"""A stream's schema as every consumer follows it: the store's latest version, not the file.

`streams.yaml`'s `schema` is version 1; a column added to it by hand becomes a new version the
first time a run of the stream meets it (`followed_config`). From then on the store decides:
the reader, the merges, the catalog and the checks take their columns from the latest version,
so a column a run added (`schema_evolution: add`) reaches them without a change to the file, and
a column removed from the file or declared there with another type is not dropped or retyped
(it is logged, once per process and stream).
"""

from __future__ import annotations

import logging

from resources.schema.columns import ColumnSpec
from resources.schema.modes import RESCUE, RESCUED
from resources.schema.versions import CONFIG_ORIGIN, SchemaVersion, conflicts
from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

log = logging.getLogger(__name__)

_warned: set[tuple[str, str]] = set()


def declared_columns(config: StreamConfig) -> list[ColumnSpec]:
    """The columns the file declares, with `_rescued` appended for a `rescue` stream."""
    columns = list(config.columns)
    if config.schema_evolution == RESCUE and RESCUED not in config.column_names:
        columns.append(ColumnSpec(RESCUED, "string"))
    return columns


def followed_config(store: CoordinationStore, config: StreamConfig) -> StreamConfig:
    """`config` with the columns of the stream's latest schema version, after recording what
    the file declares that no version holds yet (version 1 on a stream's first run).
    Raises `LeaseStoreError` when the store cannot be read or written."""
    declared = declared_columns(config)
    history = store.schema_versions(config.name)
    if not history or not history[-1].holds(declared):
        store.record_schema(config.name, declared, CONFIG_ORIGIN)
        history = store.schema_versions(config.name)
    latest = history[-1]
    _warn_once(config, history, declared)
    return config.following(latest)


def latest_columns(store: CoordinationStore, config: StreamConfig) -> list[ColumnSpec]:
    """The columns a reader of the stream's table reads its objects as, without writing
    anything: the latest recorded version's, then the ones the file declares that no version
    holds yet (no object holds those: they read as nulls); the declared ones when no version
    is recorded. For read-only consumers (the checks); writers follow (`followed_config`).
    Raises `LeaseStoreError` when the store cannot be read."""
    history = store.schema_versions(config.name)
    held = list(history[-1].columns) if history else []
    names = {c.name for c in held}
    return held + [c for c in declared_columns(config) if c.name not in names]


def _warn_once(
    config: StreamConfig, history: list[SchemaVersion], declared: list[ColumnSpec]
) -> None:
    """Say once what of the file the store does not follow: a column the file once declared
    and no longer does (kept), a column declared with another type than its version's."""
    latest = history[-1]
    names = {c.name for c in declared}
    from_file = {n for v in history if v.origin.config for n in v.added}
    kept = [c.name for c in latest.columns if c.name in from_file and c.name not in names]
    retyped = conflicts(latest, declared)
    for kind, detail in (
        (
            "kept",
            kept
            and f"columns {kept} of schema version {latest.version} are not in "
            "streams.yaml; they stay (a column is never dropped)",
        ),
        (
            "retyped",
            retyped
            and "streams.yaml declares "
            + ", ".join(f"{n} as {asked}" for n, _, asked in retyped)
            + f"; schema version {latest.version} keeps "
            + ", ".join(f"{n} {held}" for n, held, _ in retyped)
            + " (a column is never retyped: values that do not fit are quarantined)",
        ),
    ):
        if detail and (config.name, kind) not in _warned:
            _warned.add((config.name, kind))
            log.warning("%s: %s", config.name, detail)
