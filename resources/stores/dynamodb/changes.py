"""The DynamoDB store's source changes (`resources/coordination/source_changes.py`): one item
per stream, key and new fingerprint under `<source identifier>|changes`, range key
`<key>|<etag>` (a fingerprint holds no `|`), no TTL attribute and no `sourcePartitionStatus`,
so no lease reader sees it. Recorded by a `PutItem` conditional on its absence."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from resources.coordination.items import ATTR
from resources.coordination.source_changes import SourceChange
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.client import error_code
from resources.stores.dynamodb.ledger_access import LedgerAccess


def changes_sid(source_identifier: str) -> str:
    return f"{source_identifier}|changes"


def _range_key(change: SourceChange) -> str:
    return f"{change.key}|{change.etag}"


def _attributes(c: SourceChange) -> dict[str, Any]:
    return {
        "objectKey": codec.s(c.key),
        "etag": codec.s(c.etag),
        "size": codec.n(c.size),
        "wasEtag": codec.s(c.was_etag),
        "wasSize": codec.n(c.was_size),
        "unit": codec.s(c.unit),
        "seenMs": codec.n(c.seen_ms),
        "changeState": codec.s(c.state),
    }


def _change(raw: dict[str, Any]) -> SourceChange:
    return SourceChange(
        raw["objectKey"]["S"],
        raw["etag"]["S"],
        int(raw["size"]["N"]),
        raw["wasEtag"]["S"],
        int(raw["wasSize"]["N"]),
        raw["unit"]["S"],
        int(raw["seenMs"]["N"]),
        raw["changeState"]["S"],
    )


class DynamoDbChanges(LedgerAccess):
    """The source-changes half of `DynamoDbLeaseStore` (its `client`, `table_name`, `_call`)."""

    def record_changes(
        self, source_identifier: str, changes: Sequence[SourceChange]
    ) -> list[SourceChange]:
        """A conditional `PutItem` each; one whose record exists is read back (consistent)."""
        sid = changes_sid(source_identifier)
        stored = []
        for change in changes:
            key = codec.key(sid, _range_key(change))
            try:
                self._call(
                    "record_changes",
                    partial(
                        self.client.put_item,
                        TableName=self.table_name,
                        Item={**key, **_attributes(change)},
                        ConditionExpression="attribute_not_exists(#key)",
                        ExpressionAttributeNames={"#key": ATTR["key"]},
                    ),
                )
                stored.append(change)
            except (ClientError, BotoCoreError) as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise self.dynamodb.refused("record_changes", exc) from exc
                raw = self._get_raw("record_changes", key)
                stored.append(change if raw is None else _change(raw))
        return stored

    def source_changes(self, source_identifier: str, key: str | None = None) -> list[SourceChange]:
        """One paginated `Query` of the stream's changes (filtered to `key` when given)."""
        raws = self._query_all("source_changes", changes_sid(source_identifier))
        found = [_change(raw) for raw in raws]
        if key is not None:
            found = [c for c in found if c.key == key]
        return sorted(found, key=lambda c: (c.key, c.seen_ms))

    def set_change_state(self, source_identifier: str, change: SourceChange, state: str) -> bool:
        """One `UpdateItem` conditional on the record existing."""
        change.with_state(state)  # refuses an unknown state
        key = codec.key(changes_sid(source_identifier), _range_key(change))
        try:
            self._call(
                "set_change_state",
                lambda: self.client.update_item(
                    TableName=self.table_name,
                    Key=key,
                    UpdateExpression="SET changeState = :state",
                    ConditionExpression="attribute_exists(#key)",
                    ExpressionAttributeNames={"#key": ATTR["key"]},
                    ExpressionAttributeValues={":state": codec.s(state)},
                ),
            )
        except (ClientError, BotoCoreError) as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise self.dynamodb.refused("set_change_state", exc) from exc
            return False
        return True
