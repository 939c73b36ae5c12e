"""How the DynamoDB ledger's parts reach the table: one item, every item of a
`sourceIdentifier`, a new item's `Put`, one transaction, and one transaction fenced by a lease
(the writes and the lease's update together, the lease's guard as its condition); and the
partition reads every part makes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from botocore.exceptions import ClientError

from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.model import TablePartition
from resources.retry import RetryPolicy
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.client import DynamoDbClient, cancellation_reasons, error_code
from resources.stores.dynamodb.ledger_items import partition_from
from resources.stores.dynamodb.ledger_keys import LedgerKeys

T = TypeVar("T")


@dataclass(frozen=True)
class Fenced:
    """How a fenced transaction ended: `reasons` None when it went through, else the reason
    each write gave (in order, the lease's update last); `lost` when the lease's guard failed,
    and then `current` is the lease item read again."""

    reasons: list[str] | None
    lost: bool = False
    current: LeaseItem | None = None


class _Call(Protocol):
    def __call__(self, action: str, fn: Callable[[], T], /) -> T: ...


class LedgerAccess(LedgerKeys):
    """The table access of the ledger mixins; the store provides `client`, `table_name`,
    `_call` and `get`."""

    if TYPE_CHECKING:  # provided by DynamoDbLeaseStore (resources/stores/dynamodb/store.py)
        client: Any
        dynamodb: DynamoDbClient
        table_name: str
        _call: _Call

        @property
        def retry(self) -> RetryPolicy: ...
        def get(self, source_identifier: str, partition_key: str) -> LeaseItem | None: ...
        def now_ms(self) -> int: ...

    def _get_raw(self, action: str, key: dict[str, dict[str, str]]) -> dict[str, Any] | None:
        """One strongly consistent read: the raw item, or None."""
        out = self._call(
            action,
            lambda: self.client.get_item(TableName=self.table_name, Key=key, ConsistentRead=True),
        )
        item: dict[str, Any] | None = out.get("Item")
        return item

    def _query_all(
        self, action: str, sid: str, attributes: Sequence[str] = (), above: str | None = None
    ) -> list[dict[str, Any]]:
        """Every item of `sid` (whose key sorts after `above`, when given); only `attributes`
        of each when given."""
        names = {"#sid": ATTR["sid"], **{f"#p{i}": a for i, a in enumerate(attributes)}}
        condition, values = "#sid = :sid", {":sid": codec.s(sid)}
        if above is not None:
            names["#key"] = ATTR["key"]
            condition += " AND #key > :above"
            values[":above"] = codec.s(above)
        projection = (
            {"ProjectionExpression": ", ".join(f"#p{i}" for i in range(len(attributes)))}
            if attributes
            else {}
        )

        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
                ConsistentRead=True,
                **projection,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        return self._call(action, query)

    def _new_item_put(self, key: dict[str, dict[str, str]], item: dict[str, Any]) -> dict[str, Any]:
        """A `Put` of an item that must not exist yet."""
        return {
            "TableName": self.table_name,
            "Item": {**key, **item},
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def _transact(self, action: str, writes: list[dict[str, Any]]) -> list[str] | None:
        """`writes` as one `TransactWriteItems`: None when it went through, else the reason
        each item gave when the transaction was cancelled (in the order of `writes`); any other
        error is raised."""
        try:
            self._call(action, lambda: self.client.transact_write_items(TransactItems=writes))
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if error_code(exc) != "TransactionCanceledException" or not reasons:
                raise
            return reasons
        return None

    def _fenced_transact(
        self, token: LeaseToken, lease_change: Transition, writes: list[dict[str, Any]]
    ) -> Fenced:
        """`writes` and the lease's update (its guard as the condition, last) as one
        `_transact`; a lease whose guard failed is read again."""
        sid, key = token.source_identifier, token.partition_key
        lease_update = codec.conditional_update(self.table_name, sid, key, lease_change)
        reasons = self._transact(lease_change.action, [*writes, {"Update": lease_update}])
        if reasons is not None and reasons[-1] == "ConditionalCheckFailed":
            return Fenced(reasons, lost=True, current=self.get(sid, key))
        return Fenced(reasons)

    def table_partitions(self, table: str) -> list[TablePartition]:
        raws = self._query_all("table_partitions", self._ledger_sid("tablePartition", table))
        return sorted((partition_from(table, raw) for raw in raws), key=lambda p: p.dt)

    def table_partition(self, table: str, dt: str) -> TablePartition | None:
        raw = self._get_raw("table_partition", self._partition_key(table, dt))
        return None if raw is None else partition_from(table, raw)
