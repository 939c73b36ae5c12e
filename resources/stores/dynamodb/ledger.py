"""The DynamoDB store's ledger: commits as one transaction, commit records, ledger reads.

Part of `DynamoDbLeaseStore` (a mixin on its client). The ledger shares the lease table — new
item types under their own `sourceIdentifier`s, so nothing needs a scan.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import ClientError

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    assign_ids,
)
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.client import cancellation_reasons, error_code


class DynamoDbLedger:
    """The ledger half of `DynamoDbLeaseStore`, which provides `client`, `_call`, `table_name`,
    `retry`, `partition_prefix`, `get` and `now_ms`."""

    def _ledger_sid(self, kind: str, name: str) -> str:
        return "|".join([*([self.partition_prefix] if self.partition_prefix else []), name, kind])

    def _partition_key(self, table: str, dt: str) -> dict[str, dict[str, str]]:
        return codec.key(self._ledger_sid("tablePartition", table), dt)

    def _objects_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("smallObjects", f"{table}|{dt}")

    def _record_key(self, sid: str, key: str) -> dict[str, dict[str, str]]:
        return codec.key(f"{sid}|commit", key)

    def _commit(
        self,
        token: LeaseToken,
        groups: dict[tuple[str, str], list[SmallObject]],
        lease_change: Transition,
        record: bool,
    ) -> tuple[CommitResult | None, LeaseItem | None]:
        """One `TransactWriteItems`: the id counters (conditional on the values just read), the
        small objects, the commit record and the lease update (its guard as the condition). If
        another commit moved a counter first, the transaction is cancelled whole: read the
        counters again and retry."""
        sid, key = token.source_identifier, token.partition_key
        for _ in range(self.retry.max_attempts * 2):
            counters = self._read_counters(list(groups))
            now = self.now_ms()
            registered = assign_ids(token, groups, counters)
            writes: list[dict[str, Any]] = []
            for (table, dt), group in groups.items():
                writes.append({"Update": self._counter_update(table, dt, counters, len(group))})
            writes += [{"Put": self._object_put(o, now)} for o in registered]
            record_index = None
            if record:
                record_index = len(writes)
                writes.append({"Put": self._record_put(token, registered, now)})
            lease_index = len(writes)
            writes.append(
                {"Update": codec.conditional_update(self.table_name, sid, key, lease_change)}
            )
            try:
                self._call(
                    lease_change.action,
                    lambda writes=writes: self.client.transact_write_items(TransactItems=writes),
                )
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if error_code(exc) != "TransactionCanceledException" or not reasons:
                    raise
                if reasons[lease_index] == "ConditionalCheckFailed":
                    return None, self.get(sid, key)
                if record_index is not None and reasons[record_index] == "ConditionalCheckFailed":
                    raise AlreadyCommittedError(self.commit_record(sid, key)) from None  # type: ignore[arg-type]
                continue  # a counter moved under us: read it again and retry
            return CommitResult(self.get(sid, key), tuple(registered)), None  # type: ignore[arg-type]
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: {lease_change.action} kept losing the "
            "id-counter race"
        )

    def _counter_update(
        self,
        table: str,
        dt: str,
        counters: dict[tuple[str, str], tuple[int, int | None]],
        count: int,
    ) -> dict[str, Any]:
        next_id = counters.get((table, dt), (None, None))[0]
        update: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._partition_key(table, dt),
            "UpdateExpression": "SET nextObjectId = :new",
            "ExpressionAttributeValues": {":new": codec.n((next_id or 1) + count)},
        }
        if next_id is None:
            update["ConditionExpression"] = "attribute_not_exists(nextObjectId)"
        else:
            update["ConditionExpression"] = "nextObjectId = :old"
            update["ExpressionAttributeValues"][":old"] = codec.n(next_id)
        return update

    def _read_counters(
        self, partitions: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, int | None]]:
        if not partitions:
            return {}
        keys = [self._partition_key(t, d) for t, d in partitions]
        out = self._call(
            "commit",
            lambda: self.client.batch_get_item(
                RequestItems={self.table_name: {"Keys": keys, "ConsistentRead": True}}
            ),
        )
        found: dict[tuple[str, str], tuple[int, int | None]] = {}
        for raw in out.get("Responses", {}).get(self.table_name, []):
            table = raw[ATTR["sid"]]["S"].rsplit("|", 1)[0]
            if self.partition_prefix:
                table = table.split("|", 1)[1]
            last = raw.get("lastLiveObjectId")
            found[(table, raw[ATTR["key"]]["S"])] = (
                int(raw["nextObjectId"]["N"]),
                None if last is None else int(last["N"]),
            )
        return found

    def _object_put(self, o: RegisteredObject, now: int) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": {
                **codec.key(self._objects_sid(o.table, o.dt), f"{o.object_id:019d}"),
                "url": codec.s(o.url),
                "contentLength": codec.n(o.content_length),
                "rowCount": codec.n(o.row_count),
                "sourceOfObject": codec.s(o.source_identifier),
                "sourceObjectPartitionKey": codec.s(o.source_partition_key),
                "epoch": codec.n(o.epoch),
                "delayed": {"BOOL": o.delayed},
                "committedAt": codec.n(now),
            },
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def _record_put(
        self, token: LeaseToken, registered: list[RegisteredObject], now: int
    ) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": {
                **self._record_key(token.source_identifier, token.partition_key),
                "epoch": codec.n(token.epoch),
                "objectIds": {
                    "L": [
                        {"L": [codec.s(o.table), codec.s(o.dt), codec.n(o.object_id)]}
                        for o in registered
                    ]
                },
                "committedAt": codec.n(now),
            },
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        raw = self._get_raw("commit_record", self._record_key(source_identifier, partition_key))
        if raw is None:
            return None
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

    def _get_raw(self, action: str, key: dict[str, dict[str, str]]) -> dict[str, Any] | None:
        """One strongly consistent read: the raw item, or None."""
        out = self._call(
            action,
            lambda: self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True),
        )
        return out.get("Item")

    def _query_all(self, action: str, sid: str) -> list[dict[str, Any]]:
        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#sid = :sid",
                ExpressionAttributeNames={"#sid": ATTR["sid"]},
                ExpressionAttributeValues={":sid": codec.s(sid)},
                ConsistentRead=True,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        return self._call(action, query)

    def table_partitions(self, table: str) -> list[TablePartition]:
        out = []
        for raw in self._query_all("table_partitions", self._ledger_sid("tablePartition", table)):
            last = raw.get("lastLiveObjectId")
            out.append(
                TablePartition(
                    table=table,
                    dt=raw[ATTR["key"]]["S"],
                    next_object_id=int(raw["nextObjectId"]["N"]),
                    last_live_object_id=None if last is None else int(last["N"]),
                    current_manifest_version=int(
                        raw.get("currentManifestVersion", {"N": "-1"})["N"]
                    ),
                    desired_manifest_version=int(
                        raw.get("desiredManifestVersion", {"N": "-1"})["N"]
                    ),
                    switched=raw.get("switched", {"BOOL": False})["BOOL"],
                )
            )
        return sorted(out, key=lambda p: p.dt)

    def ledger_objects(self, table: str, dt: str | None = None) -> list[RegisteredObject]:
        dts = [dt] if dt is not None else [p.dt for p in self.table_partitions(table)]
        out = []
        for day in dts:
            for raw in self._query_all("ledger_objects", self._objects_sid(table, day)):
                out.append(
                    RegisteredObject(
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
                    )
                )
        return sorted(out, key=lambda o: (o.dt, o.object_id))
