"""Iceberg schemas of leasehold tables: Hive column types <-> Iceberg types, and the table a
`TableDefinition` becomes (its columns, all optional, then `dt`; identity partition on `dt`).

`dt` is a DATE the data files do not hold: each file's partition value is set when it is added
(`resources.catalog.iceberg.files`), and readers get `dt` from the partition metadata. Files
are written without Iceberg field ids: the table's default name mapping
(`schema.name-mapping.default`) reads them by column name, and `UpdateSchema.add_column` keeps
that mapping in step as columns are added.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.name_mapping import create_mapping_from_schema
from pyiceberg.transforms import IdentityTransform
from pyiceberg.types import (
    BooleanType,
    DateType,
    DoubleType,
    IcebergType,
    IntegerType,
    LongType,
    NestedField,
    StringType,
    TimestampType,
    TimestamptzType,
)

from resources.catalog.base import PARTITION_KEY, CatalogError, Column

ICEBERG_TYPES: Mapping[str, IcebergType] = {
    "string": StringType(),
    "bigint": LongType(),
    "int": IntegerType(),
    "double": DoubleType(),
    "boolean": BooleanType(),
    # leasehold's objects hold timestamp[us, UTC] (INT64 TIMESTAMP_MICROS, adjusted to UTC)
    "timestamp": TimestamptzType(),
    "date": DateType(),
}
"""Hive column types (`resources.catalog.base.HIVE_TYPES` values) -> Iceberg types."""

_HIVE_TYPES: Mapping[IcebergType, str] = {
    **{v: k for k, v in ICEBERG_TYPES.items()},
    TimestampType(): "timestamp",  # a table another engine created without a zone
}

PARTITION_FIELD_ID = 1000
"""Iceberg's first partition field id."""

METADATA_VERSIONS_KEPT = 20
"""`write.metadata.previous-versions-max`: old `metadata.json` files kept after a commit (each
commit writes a new one; older ones are deleted). A reader opens the newest it was told of, so
a handful is enough; 20 keeps a minute of history at a commit every 3 seconds."""

TABLE_PROPERTIES: Mapping[str, str] = {
    "format-version": "2",
    # Another engine's snapshot expiry must never delete a data file: leasehold's GC does,
    # knowing the ledger (Java's ExpireSnapshots refuses to run at all with this false).
    "gc.enabled": "false",
    # Merge small manifests as a commit writes them (Java's default; pyiceberg's is off):
    # a snapshot lists at most `commit.manifest.min-count-to-merge` (100) small manifests.
    "commit.manifest-merge.enabled": "true",
    "write.metadata.delete-after-commit.enabled": "true",
    "write.metadata.previous-versions-max": str(METADATA_VERSIONS_KEPT),
}
"""Set when a table is created (with its name mapping, `table_properties`)."""


def iceberg_type(table: str, column: Column) -> IcebergType:
    """The Iceberg type of a Hive-typed column. Raises `CatalogError` for a type leasehold
    does not write."""
    found = ICEBERG_TYPES.get(column.type)
    if found is None:
        raise CatalogError(
            f"table {table!r}: column {column.name!r} has type {column.type!r}, which has no "
            f"Iceberg type here (known: {', '.join(ICEBERG_TYPES)})"
        )
    return found


def table_schema(table: str, columns: Sequence[Column]) -> Schema:
    """`columns` in order (all optional, ids from 1), then `dt` as a date. Raises
    `CatalogError` for a column named `dt` or of an unknown type."""
    if any(c.name == PARTITION_KEY for c in columns):
        raise CatalogError(f"table {table!r}: {PARTITION_KEY!r} is the partition key, not a column")
    fields = [
        NestedField(i, c.name, iceberg_type(table, c), required=False)
        for i, c in enumerate(columns, start=1)
    ]
    fields.append(NestedField(len(columns) + 1, PARTITION_KEY, DateType(), required=False))
    return Schema(*fields)


def partition_spec(schema: Schema) -> PartitionSpec:
    """Identity partitioning on `dt`."""
    source = schema.find_field(PARTITION_KEY)
    return PartitionSpec(
        PartitionField(source.field_id, PARTITION_FIELD_ID, IdentityTransform(), PARTITION_KEY)
    )


def table_properties(schema: Schema) -> dict[str, str]:
    """`TABLE_PROPERTIES` and the name mapping of `schema` (files are read by column name)."""
    mapping = create_mapping_from_schema(schema).model_dump_json()
    return {**TABLE_PROPERTIES, "schema.name-mapping.default": mapping}


def hive_columns(table: str, schema: Schema) -> tuple[Column, ...]:
    """The columns of an Iceberg schema in order, `dt` left out, as Hive-typed `Column`s.
    Raises `CatalogError` for a type leasehold does not write (another engine added it)."""
    out: list[Column] = []
    for f in schema.fields:
        if f.name == PARTITION_KEY:
            continue
        hive = _HIVE_TYPES.get(f.field_type)
        if hive is None:
            raise CatalogError(f"table {table!r}: column {f.name!r} has type {f.field_type}")
        out.append(Column(f.name, hive))
    return tuple(out)
