"""The DynamoDB ledger's rollup state: one item per aggregate key, written with the lease in
one transaction, read and forgotten."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.rollup_state import KeyWrite, RollupKeyMovedError
from resources.rollup.state import KeyState
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.ledger_access import LedgerAccess
from resources.stores.dynamodb.ledger_items import rollup_item, rollup_state_from


class DynamoDbRollups(LedgerAccess):
    """Rollup key states."""

    def rollup_states(
        self, rollup: str, dt: str, keys: Sequence[str] | None = None
    ) -> dict[str, KeyState]:
        sid = self._rollup_sid(rollup, dt)
        if keys is None:
            raws = self._query_all("rollup_states", sid)
        else:
            raws = self.dynamodb.batch_get("rollup_states", [codec.key(sid, k) for k in keys])
        return {raw[ATTR["key"]]["S"]: rollup_state_from(raw) for raw in raws}

    def _write_rollup_keys(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        writes: Sequence[KeyWrite],
        lease_change: Transition,
    ) -> tuple[bool, LeaseItem | None]:
        """One `TransactWriteItems`: a `Put` (a `Delete` for a `REMOVAL`) per key,
        conditional on the txid read (or on the key having no item), and the lease renewal
        with its guard."""
        sid = self._rollup_sid(rollup, dt)
        items: list[dict[str, Any]] = []
        for w in writes:
            action: dict[str, Any] = {"TableName": self.table_name}
            if isinstance(w.state, KeyState):
                action["Item"] = {**codec.key(sid, w.key), **rollup_item(w.state)}
            else:
                action["Key"] = codec.key(sid, w.key)
            if w.expected_txid is None:
                action["ConditionExpression"] = "attribute_not_exists(#sid)"
                action["ExpressionAttributeNames"] = {"#sid": ATTR["sid"]}
            else:
                action["ConditionExpression"] = "txid = :txid"
                action["ExpressionAttributeValues"] = {":txid": codec.n(w.expected_txid)}
            items.append({"Put" if isinstance(w.state, KeyState) else "Delete": action})
        outcome = self._fenced_transact(token, lease_change, items)
        if (reasons := outcome.reasons) is None:
            return True, None
        if outcome.lost:
            return False, outcome.current
        # A key's txid moved, or DynamoDB cancelled for a conflicting transaction on an item.
        raise RollupKeyMovedError(f"rollup {rollup} dt={dt}: {sorted(set(reasons) - {'None'})}")

    def forget_rollup(self, rollup: str, dt: str) -> int:
        sid = self._rollup_sid(rollup, dt)
        keys = [
            {ATTR["sid"]: raw[ATTR["sid"]], ATTR["key"]: raw[ATTR["key"]]}
            for raw in self._query_all("forget_rollup", sid, [ATTR["sid"], ATTR["key"]])
        ]
        self.dynamodb.batch_delete("forget_rollup", keys)
        return len(keys)
