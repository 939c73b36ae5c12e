"""The DynamoDB ledger's merge chain: its ranges read, and a merge commit as one transaction
(the range, the sentinel, the partition and the lease)."""

from __future__ import annotations

from typing import Any

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.ledger.merge import (
    MergeChainError,
    MergeCommit,
    MergeCommitResult,
    MergedObject,
    MergeRange,
    check_merge,
)
from resources.stores.base import merge_writes
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.ledger_access import LedgerAccess
from resources.stores.dynamodb.ledger_items import (
    RANGE_NAMES,
    partition_from,
    range_from,
    range_item,
)


class DynamoDbMerges(LedgerAccess):
    """`merge_ranges` and merge commits."""

    def merge_ranges(self, table: str, dt: str) -> list[MergeRange]:
        raws = self._query_all("merge_ranges", self._ranges_sid(table, dt))
        return sorted((range_from(table, dt, raw) for raw in raws), key=lambda r: r.upper)

    def _commit_merge(
        self, token: LeaseToken, merge: MergeCommit, lease_change: Transition
    ) -> tuple[MergeCommitResult | None, LeaseItem | None]:
        """Read the partition and the chain (strongly consistent), `check_merge`, then one
        `TransactWriteItems`: the range, the sentinel on the first merge, the partition
        (conditional on `mergedUpper` as read, and on `nextObjectId` when it read everything
        merged) and the lease's give-up (its guard as the condition). An ingestion commit
        landing meanwhile cancels a merge that would clear the job: read again and retry, so
        the due time always sees every committed id. One that leaves the job due is not
        cancelled by it — more unmerged objects change nothing it writes — so a partition under
        steady ingestion cannot starve its merge. A chain that moved fails `check_merge` on
        the re-read."""
        sid, key = token.source_identifier, token.partition_key
        table, dt = merge.table, merge.dt
        for _ in range(self.retry.max_attempts * 2):
            raw = self._get_raw("commit_merge", self._partition_key(table, dt))
            partition = None if raw is None else partition_from(table, raw)
            ranges = self.merge_ranges(table, dt)
            next_id = 1 if partition is None else partition.next_object_id
            try:
                rewritten = check_merge(ranges, merge, next_id)
            except MergeChainError:
                current = self.get(sid, key)
                if not lease_change.guard.holds(current):
                    return None, current  # fenced first: a zombie is told it lost its lease
                raise
            w = merge_writes(merge, partition, ranges, token.epoch, self.now_ms())
            writes: list[dict[str, Any]] = []
            if w.written is not None:
                if rewritten is None:
                    writes.append({"Put": self._range_put(w.written)})
                else:
                    writes.append({"Update": self._range_rewrite(w.written, rewritten.upper)})
            if w.sentinel is not None:
                writes.append({"Put": self._range_put(w.sentinel)})
            if raw is not None:
                writes.append(
                    {"Update": self._merged_partition_update(raw, merge.merged, w.due_at_ms)}
                )
            outcome = self._fenced_transact(token, lease_change, writes)
            if outcome.lost:
                return None, outcome.current
            if outcome.reasons is not None:
                continue  # an ingestion commit (or the chain) moved: read again
            return w.result(), None
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: {lease_change.action} of {table} dt={dt} kept "
            "losing the race with ingestion commits"
        )

    def _range_put(self, r: MergeRange) -> dict[str, Any]:
        return self._new_item_put(self._range_key(r.table, r.dt, r.lower), range_item(r))

    def _range_rewrite(self, r: MergeRange, old_upper: int) -> dict[str, Any]:
        """The open range, extended in place: same key (its `lower`), conditional on the
        `upper` the merge read."""
        return {
            "TableName": self.table_name,
            "Key": self._range_key(r.table, r.dt, r.lower),
            "UpdateExpression": (
                "SET #upper = :upper, #url = :url, contentLength = :length, rowCount = :rows, "
                "#epoch = :epoch, updatedAt = :at, schemaVersion = :version"
            ),
            "ConditionExpression": "#upper = :old_upper",
            "ExpressionAttributeNames": {k: RANGE_NAMES[k] for k in ("#upper", "#url", "#epoch")},
            "ExpressionAttributeValues": {
                ":upper": codec.n(r.upper),
                ":url": codec.s(r.url or ""),
                ":length": codec.n(r.content_length),
                ":rows": codec.n(r.row_count),
                ":epoch": codec.n(r.epoch),
                ":at": codec.n(r.updated_at_ms),
                ":version": codec.n(r.schema_version),
                ":old_upper": codec.n(old_upper),
            },
        }

    def _merged_partition_update(
        self, raw: dict[str, Any], merged: MergedObject | None, due: int | None
    ) -> dict[str, Any]:
        """The partition as the merge leaves it, conditional on the merged bound it read, and,
        when it clears the job (`due` None: everything merged as read), on the counter too: a
        commit that landed since would leave its object without a job. A `due` computed with
        objects left stays right however many more land."""
        values: dict[str, Any] = {}
        sets = []
        if merged is not None:
            sets += ["mergedUpper = :upper", "desiredManifestVersion = :upper"]
            values[":upper"] = codec.n(merged.upper)
        if due is None:
            expression = ("SET " + ", ".join(sets) + " " if sets else "") + "REMOVE mergeDueAt"
        else:
            expression = "SET " + ", ".join([*sets, "mergeDueAt = :due"])
            values[":due"] = codec.n(due)
        condition = ""
        if due is None:
            condition = "nextObjectId = :read AND "
            values[":read"] = raw["nextObjectId"]
        if "mergedUpper" in raw:
            condition += "mergedUpper = :merged_read"
            values[":merged_read"] = raw["mergedUpper"]
        else:
            condition += "attribute_not_exists(mergedUpper)"
        return {
            "TableName": self.table_name,
            "Key": {ATTR["sid"]: raw[ATTR["sid"]], ATTR["key"]: raw[ATTR["key"]]},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeValues": values,
        }
