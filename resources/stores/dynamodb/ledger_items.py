"""The DynamoDB ledger's items: each record of the ledger as the attributes of its item and
back (the layout is in `ledger.py`), as `codec.py` does for lease items. No I/O: the keys are
the caller's (`ledger_keys.py`)."""

from __future__ import annotations

import json
from typing import Any

from resources.coordination.items import ATTR, LeaseToken
from resources.ledger.merge import MergeRange
from resources.ledger.model import CommitRecord, RegisteredObject, TablePartition
from resources.ledger.provenance import sources_json, sources_of
from resources.ledger.publication import Publication
from resources.ledger.rollup_state import decode_value, encode_value
from resources.rollup.state import KeyState
from resources.schema.versions import SchemaVersion
from resources.stores.dynamodb import codec

SENTINEL_KEY = "sentinel"
# Range attributes are DynamoDB reserved words: expressions name them through placeholders.
RANGE_NAMES = {"#lower": "lower", "#upper": "upper", "#url": "url", "#epoch": "epoch"}


def object_item(o: RegisteredObject, now: int) -> dict[str, Any]:
    """A committed small object's attributes (without its key)."""
    return {
        "url": codec.s(o.url),
        "contentLength": codec.n(o.content_length),
        "rowCount": codec.n(o.row_count),
        "sourceOfObject": codec.s(o.source_identifier),
        "sourceObjectPartitionKey": codec.s(o.source_partition_key),
        "epoch": codec.n(o.epoch),
        "delayed": {"BOOL": o.delayed},
        "committedAt": codec.n(now),
        "schemaVersion": codec.n(o.schema_version),
        **({"sources": codec.s(sources_json(o.sources))} if o.sources else {}),
    }


def object_from(table: str, day: str, raw: dict[str, Any]) -> RegisteredObject:
    return RegisteredObject(
        table=table,
        dt=day,
        object_id=int(raw[ATTR["key"]]["S"]),
        url=raw["url"]["S"],
        content_length=int(raw["contentLength"]["N"]),
        row_count=int(raw["rowCount"]["N"]),
        source_identifier=raw["sourceOfObject"]["S"],
        source_partition_key=raw["sourceObjectPartitionKey"]["S"],
        epoch=int(raw["epoch"]["N"]),
        delayed=raw["delayed"]["BOOL"],
        # An item without it (not written by this version): unknown, not an error.
        committed_at_ms=optional_int(raw, "committedAt"),
        # Committed before the ledger kept versions: written before versions.
        schema_version=int_or(raw, "schemaVersion", 1),
        sources=sources_of(raw.get("sources", {}).get("S")),
    )


def record_item(token: LeaseToken, registered: list[RegisteredObject], now: int) -> dict[str, Any]:
    """A commit record's attributes (without its key)."""
    return {
        "epoch": codec.n(token.epoch),
        "objectIds": {
            "L": [
                {"L": [codec.s(o.table), codec.s(o.dt), codec.n(o.object_id)]} for o in registered
            ]
        },
        "committedAt": codec.n(now),
    }


def commit_record_from(
    source_identifier: str, partition_key: str, raw: dict[str, Any]
) -> CommitRecord:
    ids = tuple(
        (x["L"][0]["S"], x["L"][1]["S"], int(x["L"][2]["N"])) for x in raw["objectIds"]["L"]
    )
    return CommitRecord(
        source_identifier,
        partition_key,
        int(raw["epoch"]["N"]),
        ids,
        int(raw["committedAt"]["N"]),
    )


def range_item(r: MergeRange) -> dict[str, Any]:
    """A merge range's attributes (without its key)."""
    item: dict[str, Any] = {
        "upper": codec.n(r.upper),
        "contentLength": codec.n(r.content_length),
        "rowCount": codec.n(r.row_count),
        "epoch": codec.n(r.epoch),
        "updatedAt": codec.n(r.updated_at_ms),
        "schemaVersion": codec.n(r.schema_version),
    }
    if r.lower is not None:
        item["lower"] = codec.n(r.lower)
    if r.url is not None:
        item["url"] = codec.s(r.url)
    return item


def publication_item(p: Publication) -> dict[str, Any]:
    """A publication record's attributes (without its key)."""
    return {
        "switched": {"BOOL": p.switched},
        "upper": codec.n(p.upper),
        "location": codec.s(p.location),
        "files": codec.n(p.files),
        "rows": codec.n(p.rows),
        "bytes": codec.n(p.bytes),
        "publishedAt": codec.n(p.published_at_ms),
        **({"revises": codec.n(p.revises)} if p.revises else {}),
    }


def rollup_item(state: KeyState) -> dict[str, Any]:
    """One key's rollup state's attributes (without its key)."""
    item = {
        "txid": codec.n(state.txid),
        "value": codec.s(encode_value(state.value)),
    }
    if state.prev_value is not None:
        item["prevValue"] = codec.s(encode_value(state.prev_value))
    return item


def rollup_state_from(raw: dict[str, Any]) -> KeyState:
    return KeyState(
        int(raw["txid"]["N"]),
        decode_value(raw["value"]["S"]),
        decode_value(raw["prevValue"]["S"]) if "prevValue" in raw else None,
    )


def schema_version_item(version: SchemaVersion) -> dict[str, Any]:
    """A schema version's attributes (without its key)."""
    return {"body": codec.s(json.dumps(version.to_json()))}


def schema_version_from(raw: dict[str, Any]) -> SchemaVersion:
    return SchemaVersion.from_json(json.loads(raw["body"]["S"]))


def publication_from(table: str, dt: str, raw: dict[str, Any]) -> Publication:
    return Publication(
        table=table,
        dt=dt,
        seq=int(raw[ATTR["key"]]["S"]),
        switched=raw["switched"]["BOOL"],
        upper=int(raw["upper"]["N"]),
        location=raw["location"]["S"],
        files=int(raw["files"]["N"]),
        rows=int(raw["rows"]["N"]),
        bytes=int(raw["bytes"]["N"]),
        published_at_ms=int(raw["publishedAt"]["N"]),
        revises=int_or(raw, "revises", 0),
    )


def partition_from(table: str, raw: dict[str, Any]) -> TablePartition:
    return TablePartition(
        table=table,
        dt=raw[ATTR["key"]]["S"],
        next_object_id=int(raw["nextObjectId"]["N"]),
        last_live_object_id=optional_int(raw, "lastLiveObjectId"),
        current_manifest_version=int_or(raw, "currentManifestVersion", -1),
        desired_manifest_version=int_or(raw, "desiredManifestVersion", -1),
        switched=raw.get("switched", {"BOOL": False})["BOOL"],
        merged_upper=int_or(raw, "mergedUpper", 0),
        merge_due_at_ms=optional_int(raw, "mergeDueAt"),
        published_upper=int_or(raw, "publishedUpper", 0),
        publication_seq=int_or(raw, "publicationSeq", 0),
    )


def range_from(table: str, dt: str, raw: dict[str, Any]) -> MergeRange:
    url = raw.get("url")
    return MergeRange(
        table=table,
        dt=dt,
        lower=optional_int(raw, "lower"),
        upper=int(raw["upper"]["N"]),
        url=None if url is None else url["S"],
        content_length=int(raw["contentLength"]["N"]),
        row_count=int(raw["rowCount"]["N"]),
        epoch=int(raw["epoch"]["N"]),
        updated_at_ms=int(raw["updatedAt"]["N"]),
        schema_version=int_or(raw, "schemaVersion", 1),  # absent: recorded before versions
    )


def optional_int(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name)
    return None if value is None else int(value["N"])


def int_or(raw: dict[str, Any], name: str, default: int) -> int:
    value = raw.get(name)
    return default if value is None else int(value["N"])
