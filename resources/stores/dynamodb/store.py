"""DynamoDB store: the multi-node backend, Data Prepper's table layout.

Every lease transition is one `UpdateItem` whose condition is the transition's guard
(`codec.conditional_update`); a refused one returns the old item in the same call
(`ReturnValuesOnConditionCheckFailure`), so telling "not found" from "not owned" costs nothing
extra. The `source-status` GSI only *proposes* candidates for `acquire_next` — it lags the
table — and the conditional write decides. The ledger's half is in `ledger.py`, the client and
its retry rules in `client.py`, table setup in `table.py`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from functools import partial
from typing import Any, cast

from botocore.exceptions import BotoCoreError, ClientError

from resources.coordination.errors import StoreRefusedError
from resources.coordination.items import (
    ATTR,
    Clock,
    LeaseItem,
    PartitionStatus,
    priority_at,
    status_key,
    to_millis,
)
from resources.coordination.transitions import Transition
from resources.retry import RetryPolicy
from resources.stores.base import CoordinationStore
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.changes import DynamoDbChanges
from resources.stores.dynamodb.claims import DynamoDbClaims
from resources.stores.dynamodb.client import DynamoDbClient, cancellation_reasons, error_code
from resources.stores.dynamodb.ledger import DynamoDbLedger
from resources.stores.dynamodb.table import GSI, check_table, create_table, require_table
from resources.stores.opening import Opening
from resources.stores.settings import StoreSettings

METRICS_SID = "__leasehold__|metrics"


class DynamoDbLeaseStore(DynamoDbLedger, DynamoDbClaims, DynamoDbChanges, CoordinationStore):
    """The coordination store on one DynamoDB table: leases, ledger, rollup state and schema
    versions."""

    backend = "dynamodb"

    def __init__(
        self,
        settings: StoreSettings,
        *,
        clock: Clock = time.time,
        retry: RetryPolicy | None = None,
        sleep: Callable[[float], None] = time.sleep,
        opening: Opening = Opening.CREATE,
    ) -> None:
        """Without `Opening.CREATE` the table must exist: DescribeTable, never CreateTable
        (DynamoDB has no read-only client: `READ_ONLY` is the caller's promise)."""
        settings.validate()
        super().__init__(
            partition_prefix=settings.partition_prefix,
            ttl_seconds=settings.ttl_seconds,
            clock=clock,
        )
        self.settings = settings
        self.table_name = settings.table_name
        self.dynamodb = DynamoDbClient(settings, retry=retry, sleep=sleep)
        self.client = self.dynamodb.client
        self._call = self.dynamodb.call
        try:
            if opening is not Opening.CREATE:
                require_table(self.dynamodb, settings)
            elif settings.skip_table_creation:
                check_table(self.dynamodb, settings)
            else:
                create_table(self.dynamodb, settings)
        except (ClientError, BotoCoreError) as exc:
            # What no retry changes — no credentials, access denied — said as the store's
            # error, naming the table and where it is, like an endpoint that never answered.
            raise StoreRefusedError(f"{settings.location()}: {exc}") from exc

    @property
    def retry(self) -> RetryPolicy:
        return self.dynamodb.retry

    # -- what LeaseStore needs -------------------------------------------------------------------

    def _insert_absent(self, items: Sequence[LeaseItem]) -> int:
        created = 0
        for start in range(0, len(items), 100):
            created += self._put_absent([codec.item_to(i) for i in items[start : start + 100]])
        return created

    def _put_absent(self, items: list[dict[str, Any]]) -> int:
        """Put items that do not exist yet, in one transaction; drop existing ones and retry."""
        while items:
            try:
                self._call(
                    "create",
                    partial(
                        self.client.transact_write_items,
                        TransactItems=[
                            {
                                "Put": {
                                    "TableName": self.table_name,
                                    "Item": item,
                                    "ConditionExpression": "attribute_not_exists(#key)",
                                    "ExpressionAttributeNames": {"#key": ATTR["key"]},
                                }
                            }
                            for item in items
                        ],
                    ),
                )
                return len(items)
            except ClientError as exc:
                reasons = cancellation_reasons(exc)
                if error_code(exc) != "TransactionCanceledException" or len(reasons) != len(items):
                    raise
                items = [
                    i for i, r in zip(items, reasons, strict=True) if r != "ConditionalCheckFailed"
                ]
        return 0

    def _apply(
        self, source_identifier: str, partition_key: str, transition: Transition
    ) -> tuple[LeaseItem | None, LeaseItem | None]:
        request = codec.conditional_update(
            self.table_name, source_identifier, partition_key, transition
        )
        try:
            out = self._call(
                transition.action,
                lambda: self.client.update_item(
                    **request, ReturnValues="ALL_NEW", ReturnValuesOnConditionCheckFailure="ALL_OLD"
                ),
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            old = cast("dict[str, Any] | None", exc.response.get("Item"))
            if old is None:  # the server did not return the old item
                return None, self.get(source_identifier, partition_key)
            return None, codec.item_from(old)
        return codec.item_from(out["Attributes"]), None

    def _by_status(
        self,
        sid: str,
        status: PartitionStatus,
        op: str,
        bound: str | tuple[str, str],
        limit: int = 25,
    ) -> list[LeaseItem]:
        """Items of `status` from the GSI, by priority, optionally `op` bound, or BETWEEN a
        (low, high) bound, both included (GSI: may lag). Up to `limit`, following the query's
        pages: a page stops at 1 MB, about 25 items of work units of 1,000 objects, so one
        page short of `limit` does not mean there are no more."""
        values = {":sk": codec.s(status_key(sid, status))}
        if op == "BETWEEN":
            assert not isinstance(bound, str)  # BETWEEN takes (low, high)
            low, high = bound
            condition = "#status_key = :sk AND #priority BETWEEN :p AND :q"
            values.update({":p": codec.s(low), ":q": codec.s(high)})
        else:
            condition = "#status_key = :sk" + (f" AND #priority {op} :p" if op else "")
            if op:
                values[":p"] = codec.s(str(bound))
        items: list[LeaseItem] = []
        start: dict[str, Any] | None = None
        while len(items) < limit:
            query: dict[str, Any] = {
                "TableName": self.table_name,
                "IndexName": GSI,
                "KeyConditionExpression": condition,
                "ExpressionAttributeNames": codec.names(condition),
                "ExpressionAttributeValues": values,
                "ScanIndexForward": True,
                "Limit": limit - len(items),
            }
            if start is not None:
                query["ExclusiveStartKey"] = start
            out = self._call("query_status", partial(self.client.query, **query))
            items += [codec.item_from(raw) for raw in out.get("Items", [])]
            start = out.get("LastEvaluatedKey")
            if start is None:
                break
        return items

    def _available(self, source_identifier: str, now_ms: int) -> Iterator[LeaseItem]:
        now_prio = priority_at(now_ms)
        for status, op in (
            (PartitionStatus.ASSIGNED, "<"),
            (PartitionStatus.CLOSED, "<="),
            (PartitionStatus.UNASSIGNED, ""),
        ):
            yield from self._by_status(source_identifier, status, op, now_prio)

    def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None:
        raw = self._get_raw("get", codec.key(source_identifier, partition_key))
        return None if raw is None or ATTR["status"] not in raw else codec.item_from(raw)

    def due_for_retry(
        self, source_identifier: str, limit: int, unassigned_for_s: float | None = None
    ) -> list[LeaseItem]:
        now = self.now_ms()
        sid, now_prio = source_identifier, priority_at(now)
        items = self._by_status(sid, PartitionStatus.ASSIGNED, "<", now_prio, limit)
        items += self._by_status(sid, PartitionStatus.CLOSED, "<=", now_prio, limit)
        if unassigned_for_s is not None:
            waited = priority_at(now - to_millis(unassigned_for_s))
            items += self._by_status(sid, PartitionStatus.UNASSIGNED, "<", waited, limit)
        return sorted(items, key=lambda i: i.priority)[:limit]

    def pending_partitions(self, source_identifier: str, limit: int) -> list[LeaseItem]:
        """One `source-status` GSI query per status with `Limit`, skipped once `limit` items
        are found: a stream with nothing UNASSIGNED costs two or three small queries."""
        items: list[LeaseItem] = []
        for status in (
            PartitionStatus.UNASSIGNED,
            PartitionStatus.ASSIGNED,
            PartitionStatus.CLOSED,
        ):
            if len(items) >= limit:
                break
            items += self._by_status(source_identifier, status, "", "", limit - len(items))
        return items[:limit]

    def missing_keys(self, source_identifier: str, partition_keys: Sequence[str]) -> list[str]:
        keys = list(dict.fromkeys(partition_keys))
        # The key and the status only: an item without a status is no lease item (as in `get`).
        found = {
            raw[ATTR["key"]]["S"]
            for raw in self.dynamodb.batch_get(
                "missing_keys",
                [codec.key(source_identifier, key) for key in keys],
                attributes=(ATTR["key"], ATTR["status"]),
            )
            if ATTR["status"] in raw
        }
        return [key for key in keys if key not in found]

    def completed_between(
        self, source_identifier: str, after: str | None, before_ms: int, limit: int
    ) -> list[LeaseItem]:
        before = priority_at(before_ms)
        status = PartitionStatus.COMPLETED
        if after is None:
            items = self._by_status(source_identifier, status, "<", before, limit)
        else:  # one bound per key condition: after it, then drop what is not before `before`
            items = self._by_status(source_identifier, status, ">", after, limit)
        return [i for i in items if i.priority < before]

    def items_between(
        self, source_identifier: str, after: str | None, upto: str
    ) -> Iterator[LeaseItem]:
        # A key condition can't exclude its lower bound: BETWEEN, then drop `after` itself.
        condition = "#sid = :sid AND " + (
            "#key BETWEEN :after AND :upto" if after is not None else "#key <= :upto"
        )
        values = {":sid": codec.s(source_identifier), ":upto": codec.s(upto)}
        if after is not None:
            values[":after"] = codec.s(after)
        if after is not None and after > upto:
            return

        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression=condition,
                ExpressionAttributeNames={"#sid": ATTR["sid"], "#key": ATTR["key"]},
                ExpressionAttributeValues=values,
                ScanIndexForward=True,
                ConsistentRead=True,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        for raw in self._call("items_between", query):
            if ATTR["status"] in raw and raw[ATTR["key"]]["S"] != after:
                yield codec.item_from(raw)

    def iter_items(
        self, source_identifier: str | None = None, *, progress: bool = True
    ) -> Iterator[LeaseItem]:
        # Without progress: every attribute but it (DynamoDB still charges reads by item size,
        # but the bytes never cross the network or get decoded).
        names = [] if progress else [a for c, a in ATTR.items() if c != "progress"]
        projection: dict[str, Any] = {
            "ProjectionExpression": ", ".join(f"#p{i}" for i in range(len(names))),
            "ExpressionAttributeNames": {f"#p{i}": name for i, name in enumerate(names)},
        }
        if source_identifier is None:

            def scan() -> list[dict[str, Any]]:
                pages = self.client.get_paginator("scan").paginate(
                    TableName=self.table_name, **(projection if names else {})
                )
                return [raw for page in pages for raw in page.get("Items", [])]

            raws = self._call("iter_items", scan)
        else:
            raws = self._query_all("iter_items", source_identifier, names)
        items = [codec.item_from(raw) for raw in raws if ATTR["status"] in raw]
        yield from sorted(items, key=lambda i: (i.source_identifier, i.priority))

    def source_identifiers(self) -> list[str]:
        return sorted({item.source_identifier for item in self.iter_items()})

    # -- metrics -------------------------------------------------------------------------------

    def _add_metrics(self, deltas: dict[str, dict[str, int]]) -> None:
        for sid, metrics in deltas.items():
            names = {f"#m{i}": name for i, name in enumerate(metrics)}
            values = {f":m{i}": codec.n(v) for i, v in enumerate(metrics.values())}
            self._call(
                "flush_metrics",
                partial(
                    self.client.update_item,
                    TableName=self.table_name,
                    Key=codec.key(METRICS_SID, sid),
                    UpdateExpression="ADD " + ", ".join(f"{n} :{n[1:]}" for n in names),
                    ExpressionAttributeNames=names,
                    ExpressionAttributeValues=values,
                ),
            )

    def read_metrics(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for raw in self._query_all("read_metrics", METRICS_SID):
            sid = raw[ATTR["key"]]["S"]
            out[sid] = {
                k: int(v["N"]) for k, v in raw.items() if k not in (ATTR["sid"], ATTR["key"])
            }
        return out

    def close_store(self) -> None:
        self.flush_metrics()
