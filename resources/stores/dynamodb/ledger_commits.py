"""The DynamoDB ledger's ingestion commits (one transaction each: the id counters, the
small objects, the commit record and the lease), their records, closing and the small objects
read back."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from botocore.exceptions import ClientError

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.merge import CommitDue, commit_merge_due
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
from resources.stores.dynamodb.client import error_code
from resources.stores.dynamodb.ledger_access import LedgerAccess
from resources.stores.dynamodb.ledger_items import (
    commit_record_from,
    object_from,
    object_item,
    optional_int,
    partition_from,
    record_item,
)


class DynamoDbCommits(LedgerAccess):
    """Ingestion commits, commit records, closing, `ledger_objects`."""

    def _commit(
        self,
        token: LeaseToken,
        groups: dict[tuple[str, str], list[SmallObject]],
        lease_change: Transition,
        record: bool,
        merge_due: Mapping[str, CommitDue],
    ) -> tuple[CommitResult | None, LeaseItem | None]:
        """One `TransactWriteItems`: the id counters (conditional on the values just read —
        the counter and whether the partition was closed; the merge job's due time as
        `commit_merge_due` decides from the closed state read), the small objects, the commit
        record and the lease update (its guard as the condition). If another commit moved a
        counter or a close landed first, the transaction is cancelled whole: read the counters
        again and retry."""
        sid, key = token.source_identifier, token.partition_key
        for _ in range(self.retry.max_attempts * 2):
            dues: dict[tuple[str, str], int | None] = {}
            counters = self._read_counters(list(groups), dues)
            now = self.now_ms()
            registered = assign_ids(token, groups, counters, now)
            writes: list[dict[str, Any]] = []
            for (table, dt), group in groups.items():
                stored_due = dues.get((table, dt))
                closed = counters.get((table, dt), (None, None))[1] is not None
                wanted = merge_due.get(table)  # None: a table never merged, nothing to set
                due = None if wanted is None else commit_merge_due(stored_due, closed, wanted)
                writes.append(
                    {
                        "Update": self._counter_update(
                            table, dt, counters, len(group), due, earlier=due != stored_due
                        )
                    }
                )
            writes += [{"Put": self._object_put(o, now)} for o in registered]
            record_index = None
            if record:
                record_index = len(writes)
                writes.append({"Put": self._record_put(token, registered, now)})
            outcome = self._fenced_transact(token, lease_change, writes)
            if outcome.lost:
                return None, outcome.current
            if (reasons := outcome.reasons) is not None:
                if record_index is not None and reasons[record_index] == "ConditionalCheckFailed":
                    # the record's put failed its condition: the record exists
                    raise AlreadyCommittedError(self.commit_record(sid, key))  # type: ignore[arg-type]
                continue  # a counter moved under us: read it again and retry
            # the transaction just wrote the item: it is there to read
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
        merge_due_at_ms: int | None,
        earlier: bool = False,
    ) -> dict[str, Any]:
        """`merge_due_at_ms` as `commit_merge_due` decided from what was read: kept if one
        exists (later commits ride along: a merge commit may have moved it meanwhile, and
        `if_not_exists` sets it only if that merge cleared it), or, when `earlier`, moved
        forward to it — conditional on nothing having set it earlier since the read (else the
        transaction is cancelled and retried, like a moved counter)."""
        next_id, last_live = counters.get((table, dt), (None, None))
        update: dict[str, Any] = {
            "TableName": self.table_name,
            "Key": self._partition_key(table, dt),
            "UpdateExpression": "SET nextObjectId = :new",
            "ExpressionAttributeValues": {":new": codec.n((next_id or 1) + count)},
        }
        due_condition = ""
        if merge_due_at_ms is not None and earlier:
            update["UpdateExpression"] += ", mergeDueAt = :due"
            update["ExpressionAttributeValues"][":due"] = codec.n(merge_due_at_ms)
            due_condition = " AND (attribute_not_exists(mergeDueAt) OR mergeDueAt > :due)"
        elif merge_due_at_ms is not None:  # later commits ride along on the pending job
            update["UpdateExpression"] += ", mergeDueAt = if_not_exists(mergeDueAt, :due)"
            update["ExpressionAttributeValues"][":due"] = codec.n(merge_due_at_ms)
        if next_id is None:
            update["ConditionExpression"] = "attribute_not_exists(nextObjectId)"
            return update
        # Closing sets `lastLiveObjectId` and leaves the counter as it is: the ids' `delayed`
        # flags were decided on the partition as read, so the close must cancel this too.
        update["ExpressionAttributeValues"][":old"] = codec.n(next_id)
        if last_live is None:
            update["ConditionExpression"] = (
                "nextObjectId = :old AND attribute_not_exists(lastLiveObjectId)" + due_condition
            )
        else:
            update["ConditionExpression"] = (
                "nextObjectId = :old AND lastLiveObjectId = :last" + due_condition
            )
            update["ExpressionAttributeValues"][":last"] = codec.n(last_live)
        return update

    def _read_counters(
        self,
        partitions: list[tuple[str, str]],
        dues: dict[tuple[str, str], int | None] | None = None,
    ) -> dict[tuple[str, str], tuple[int, int | None]]:
        """(next id, last live id) of each partition that exists; its `mergeDueAt` into
        `dues` when given."""
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
            if dues is not None:
                dues[(table, raw[ATTR["key"]]["S"])] = optional_int(raw, "mergeDueAt")
            found[(table, raw[ATTR["key"]]["S"])] = (
                int(raw["nextObjectId"]["N"]),
                None if last is None else int(last["N"]),
            )
        return found

    def _object_put(self, o: RegisteredObject, now: int) -> dict[str, Any]:
        key = codec.key(self._objects_sid(o.table, o.dt), f"{o.object_id:019d}")
        return self._new_item_put(key, object_item(o, now))

    def _record_put(
        self, token: LeaseToken, registered: list[RegisteredObject], now: int
    ) -> dict[str, Any]:
        key = self._record_key(token.source_identifier, token.partition_key)
        return self._new_item_put(key, record_item(token, registered, now))

    def commit_record(self, source_identifier: str, partition_key: str) -> CommitRecord | None:
        raw = self._get_raw("commit_record", self._record_key(source_identifier, partition_key))
        if raw is None:
            return None
        return commit_record_from(source_identifier, partition_key, raw)

    def close_partition(self, table: str, dt: str) -> TablePartition | None:
        """One conditional `UpdateItem`: it fails, writing nothing, when the partition is
        absent or closed already, and then the stored item comes back in the same call."""
        request = {
            "TableName": self.table_name,
            "Key": self._partition_key(table, dt),
            "UpdateExpression": "SET lastLiveObjectId = nextObjectId - :one, mergeDueAt = :now",
            "ConditionExpression": (
                "attribute_exists(nextObjectId) AND attribute_not_exists(lastLiveObjectId)"
            ),
            "ExpressionAttributeValues": {":one": codec.n(1), ":now": codec.n(self.now_ms())},
        }
        try:
            out = self._call(
                "close_partition",
                lambda: self.client.update_item(
                    **request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
                ),
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            old = cast("dict[str, Any] | None", exc.response.get("Item"))
            if old is None:  # absent, or the server did not return the old item
                return self.table_partition(table, dt)
            return partition_from(table, old)
        return partition_from(table, out["Attributes"])

    def ledger_objects(
        self, table: str, dt: str | None = None, *, after: int = 0
    ) -> list[RegisteredObject]:
        dts = [dt] if dt is not None else [p.dt for p in self.table_partitions(table)]
        out = []
        above = f"{after:019d}" if after else None
        for day in dts:
            for raw in self._query_all(
                "ledger_objects", self._objects_sid(table, day), above=above
            ):
                out.append(object_from(table, day, raw))
        return sorted(out, key=lambda o: (o.dt, o.object_id))
