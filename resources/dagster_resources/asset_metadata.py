"""The metadata Dagster itself reads off an asset: its table schema and a materialization's rows.

Dagster gives two keys a meaning of their own: `dagster/column_schema` (the asset page's
"Columns" tab, column search in the catalog) and `dagster/row_count` (the row-count plot of
the asset's "Insights" and the number shown beside each materialization). Anything else is just
a labelled value, so the counts leasehold already records (`rows_written`, `rows`) would not
show there. Built here, in one place, for the assets and for the sensors that record
materializations Dagster missed, so both carry them the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dagster import MetadataValue, TableColumn, TableColumnConstraints, TableSchema

from resources.stores.base import CoordinationStore
from resources.streams import StreamConfig

ROW_COUNT = "dagster/row_count"
COLUMN_SCHEMA = "dagster/column_schema"


def with_row_count(metadata: Mapping[str, Any], rows: int) -> dict[str, Any]:
    """`metadata` plus the row count Dagster plots: ingestion, the rows a commit wrote; the
    merged and published assets, the rows of the table partition."""
    return {**metadata, ROW_COUNT: MetadataValue.int(int(rows))}


def column_schema(config: StreamConfig) -> TableSchema:
    """The stream's columns as its table objects hold them (`config`'s: streams.yaml's schema,
    or a schema version's, in order). The event-time column and the record id are never null
    in the table: a record without one is quarantined, not written."""
    required = {config.event_time, *([config.record_id] if config.record_id else [])}
    notes = {
        config.event_time: f"event time: decides the table partition dt (in {config.timezone})",
    }
    if config.record_id:
        notes[config.record_id] = "record id: checked for duplicates per table partition"
    return TableSchema(
        columns=[
            TableColumn(
                name=c.name,
                type=c.type,
                description=notes.get(c.name),
                constraints=TableColumnConstraints(nullable=c.name not in required),
            )
            for c in config.columns
        ]
    )


class VersionColumns:
    """The column schema of each schema version a run's materializations name, read from the
    store once per version (a run meets one or two)."""

    def __init__(self, store: CoordinationStore, config: StreamConfig) -> None:
        self.store, self.config = store, config
        self._schemas: dict[int, TableSchema] = {}

    def schema(self, version: int) -> TableSchema:
        if version not in self._schemas:
            for v in self.store.schema_versions(self.config.name):
                self._schemas[v.version] = column_schema(self.config.following(v))
        return self._schemas.get(version) or column_schema(self.config)
