"""Glue's names, tables and partitions to and from the catalog's model (`resources.catalog.base`):
what `glue.py` writes and reads, apart from how it calls Glue."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from resources.catalog.base import (
    OUTPUT_FORMAT,
    PARQUET_SERDE,
    PARTITION_KEY,
    SYMLINK_INPUT_FORMAT,
    CatalogError,
    CatalogPartition,
    Column,
    TableDefinition,
)

# glue.py's logger: what the Glue catalog logs is found under one name, as before the split.
log = logging.getLogger("resources.catalog.glue")

MANAGED = "leasehold.managed"
SEQ = "leasehold.publication_seq"
TABLE_PARAMETERS = {"classification": "parquet", "EXTERNAL": "TRUE", MANAGED: "true"}

_TABLE_NAME = re.compile(r"[a-z0-9_]{1,255}")
_DATABASE_NAME = re.compile(r"[a-z0-9_][a-z0-9_-]{0,254}")


def name_problem(name: str, what: str) -> str | None:
    """What keeps Glue (and Athena) from holding `name`, lowercased, as a `what` name."""
    pattern = _DATABASE_NAME if what == "database" else _TABLE_NAME
    if pattern.fullmatch(name.lower()):
        return None
    allowed = "letters, digits, '_' and '-'" if what == "database" else "letters, digits, '_'"
    return f"Glue cannot hold {what} name {name!r}: use 1-255 {allowed}"


def glue_name(name: str, what: str) -> str:
    """`name` as Glue holds it (lowercase); CatalogError if it cannot."""
    problem = name_problem(name, what)
    if problem is not None:
        raise CatalogError(problem)
    return name.lower()


def managed(table: dict[str, Any]) -> bool:
    return bool(table.get("Parameters", {}).get(MANAGED) == "true")


def glue_columns(columns: Sequence[Column]) -> tuple[Column, ...]:
    """`columns` as Glue holds them: names lowercased (CatalogError for one it cannot hold)."""
    return tuple(Column(glue_name(c.name, "column"), c.type) for c in columns)


def table_input(name: str, columns: Sequence[Column], location: str) -> dict[str, Any]:
    """The TableInput of a leasehold table: `columns` (Glue names), partitioned by `dt`, read
    through symlink manifests."""
    return {
        "Name": name,
        "TableType": "EXTERNAL_TABLE",
        "Parameters": dict(TABLE_PARAMETERS),
        "PartitionKeys": [{"Name": PARTITION_KEY, "Type": "string"}],
        "StorageDescriptor": {
            "Columns": [{"Name": c.name, "Type": c.type} for c in columns],
            "Location": location,
            "InputFormat": SYMLINK_INPUT_FORMAT,
            "OutputFormat": OUTPUT_FORMAT,
            "SerdeInfo": {"SerializationLibrary": PARQUET_SERDE, "Parameters": {}},
        },
    }


def comparable(table: dict[str, Any]) -> tuple[Any, ...]:
    """What `ensure_table` sets, from a TableInput or a Glue table: equal means no update."""
    sd = table.get("StorageDescriptor", {})
    params = table.get("Parameters", {})
    return (
        table.get("TableType"),
        tuple((k["Name"], k["Type"]) for k in table.get("PartitionKeys", [])),
        tuple((c["Name"], c["Type"]) for c in sd.get("Columns", [])),
        sd.get("Location"),
        sd.get("InputFormat"),
        sd.get("OutputFormat"),
        sd.get("SerdeInfo", {}).get("SerializationLibrary"),
        tuple(params.get(k) for k in sorted(TABLE_PARAMETERS)),
    )


def definition(table: dict[str, Any]) -> TableDefinition:
    sd = table["StorageDescriptor"]
    return TableDefinition(
        name=table["Name"],
        columns=tuple(Column(c["Name"], c["Type"]) for c in sd.get("Columns", [])),
        location=sd.get("Location", ""),
    )


def publication_seq(partition: dict[str, Any], what: str) -> int:
    """The publication seq a partition was set from; one without it (made by hand or by a
    crawler) counts as older than any publication, so publishing replaces it."""
    raw = partition.get("Parameters", {}).get(SEQ)
    try:
        return int(raw)
    except (TypeError, ValueError):
        log.warning(
            "Glue partition %s has no valid %s (%r): treating it as unpublished", what, SEQ, raw
        )
        return -1


def partition_from(name: str, partition: dict[str, Any]) -> CatalogPartition:
    what = f"{name}/{PARTITION_KEY}={partition['Values'][0]}"
    return CatalogPartition(
        table=name,
        dt=partition["Values"][0],
        location=partition.get("StorageDescriptor", {}).get("Location", ""),
        seq=publication_seq(partition, what),
    )
