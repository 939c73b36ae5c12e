"""The DynamoDB store's ledger: commits and merge commits as one transaction each, closing,
commit records, ledger reads.

Part of `DynamoDbLeaseStore` (a mixin on its client). The ledger shares the lease table — new
item types under their own `sourceIdentifier`s, so nothing needs a scan:
- `[prefix|]table|tablePartition`, key dt: the id counter (`nextObjectId`), `lastLiveObjectId`,
  the manifest versions, `mergedUpper` and `mergeDueAt` (absent: no pending merge job), and the
  current publication (`switched`, `publishedUpper`, `publicationSeq`; absent: never published);
- `[prefix|]table|dt|smallObjects`, key the id (`%019d`): one committed small object (its
  `schemaVersion`: absent on items committed before the ledger kept it, read as 1);
- `[prefix|]table|dt|mergeRanges`, key the range's `lower` (`%019d`; `sentinel` for the
  sentinel), so rewriting the open range updates its item in place (its `schemaVersion`:
  absent on ranges recorded before the ledger kept it, read as 1);
- `[prefix|]table|dt|publications`, key the record's `seq` (`%019d`): one publication record,
  so the history is one Query in `seq` order and forgetting is a key range;
- `<source identifier>|commit`, key the source partition: the commit record;
- `[prefix|]rollup|dt|rollupKeys` (rollup = `table|name`), key the aggregate key: one key's
  rollup state (`txid`, and `value`/`prevValue` as JSON text).

DynamoDB evaluates a comparison with an attribute the item lacks (or with an item that does
not exist) as false, never as an error: `nextObjectId = :read` therefore also refuses to
create an absent partition, and "never merged" must be said as
`attribute_not_exists(mergedUpper)`, not `mergedUpper = 0`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from resources.coordination.errors import StoreUnavailableError
from resources.coordination.items import ATTR, LeaseItem, LeaseToken
from resources.coordination.transitions import Transition
from resources.errors import LeaseholdError
from resources.ledger.merge import (
    CommitDue,
    MergeChainError,
    MergeCommit,
    MergeCommitResult,
    MergedObject,
    MergeRange,
    check_merge,
    commit_merge_due,
)
from resources.ledger.model import (
    AlreadyCommittedError,
    CommitRecord,
    CommitResult,
    RegisteredObject,
    SmallObject,
    TablePartition,
    assign_ids,
)
from resources.ledger.publication import Publication
from resources.ledger.rollup_state import KeyWrite, RollupKeyMovedError, decode_value, encode_value
from resources.ledger.schema_versions import SchemaVersionTakenError
from resources.rollup.state import KeyState
from resources.schema.versions import SchemaVersion
from resources.stores.base import forget_bound, merge_writes, stamped_publication
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.client import cancellation_reasons, error_code

SENTINEL_KEY = "sentinel"
# Range attributes are DynamoDB reserved words: expressions name them through placeholders.
RANGE_NAMES = {"#lower": "lower", "#upper": "upper", "#url": "url", "#epoch": "epoch"}


class DynamoDbLedger:
    """The ledger half of `DynamoDbLeaseStore`, which provides `client`, `dynamodb` (the
    wrapping `DynamoDbClient`), `_call`, `table_name`, `retry`, `partition_prefix`, `get` and
    `now_ms`."""

    def _ledger_sid(self, kind: str, name: str) -> str:
        return "|".join([*([self.partition_prefix] if self.partition_prefix else []), name, kind])

    def _partition_key(self, table: str, dt: str) -> dict[str, dict[str, str]]:
        return codec.key(self._ledger_sid("tablePartition", table), dt)

    def _objects_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("smallObjects", f"{table}|{dt}")

    def _ranges_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("mergeRanges", f"{table}|{dt}")

    def _range_key(self, table: str, dt: str, lower: int | None) -> dict[str, dict[str, str]]:
        return codec.key(
            self._ranges_sid(table, dt), SENTINEL_KEY if lower is None else f"{lower:019d}"
        )

    def _publications_sid(self, table: str, dt: str) -> str:
        return self._ledger_sid("publications", f"{table}|{dt}")

    def _rollup_sid(self, rollup: str, dt: str) -> str:
        return self._ledger_sid("rollupKeys", f"{rollup}|{dt}")

    def _schema_sid(self, stream: str) -> str:
        return self._ledger_sid("schemaVersions", stream)

    def _record_key(self, sid: str, key: str) -> dict[str, dict[str, str]]:
        return codec.key(f"{sid}|commit", key)

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
            lease_index = len(writes)
            writes.append(
                {"Update": codec.conditional_update(self.table_name, sid, key, lease_change)}
            )
            reasons = self._transact(lease_change.action, writes)
            if reasons is not None:
                if reasons[lease_index] == "ConditionalCheckFailed":
                    return None, self.get(sid, key)
                if record_index is not None and reasons[record_index] == "ConditionalCheckFailed":
                    raise AlreadyCommittedError(self.commit_record(sid, key))  # type: ignore[arg-type]
                continue  # a counter moved under us: read it again and retry
            return CommitResult(self.get(sid, key), tuple(registered)), None  # type: ignore[arg-type]
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: {lease_change.action} kept losing the "
            "id-counter race"
        )

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
                dues[(table, raw[ATTR["key"]]["S"])] = _optional(raw, "mergeDueAt")
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
                "schemaVersion": codec.n(o.schema_version),
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

    def table_partitions(self, table: str) -> list[TablePartition]:
        raws = self._query_all("table_partitions", self._ledger_sid("tablePartition", table))
        return sorted((_partition(table, raw) for raw in raws), key=lambda p: p.dt)

    def table_partition(self, table: str, dt: str) -> TablePartition | None:
        raw = self._get_raw("table_partition", self._partition_key(table, dt))
        return None if raw is None else _partition(table, raw)

    def merge_ranges(self, table: str, dt: str) -> list[MergeRange]:
        raws = self._query_all("merge_ranges", self._ranges_sid(table, dt))
        return sorted((_range(table, dt, raw) for raw in raws), key=lambda r: r.upper)

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
            old = exc.response.get("Item")
            if old is None:  # absent, or the server did not return the old item
                return self.table_partition(table, dt)
            return _partition(table, old)
        return _partition(table, out["Attributes"])

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
            partition = None if raw is None else _partition(table, raw)
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
            lease_index = len(writes)
            writes.append(
                {"Update": codec.conditional_update(self.table_name, sid, key, lease_change)}
            )
            reasons = self._transact(lease_change.action, writes)
            if reasons is not None:
                if reasons[lease_index] == "ConditionalCheckFailed":
                    return None, self.get(sid, key)
                continue  # an ingestion commit (or the chain) moved: read again
            return w.result(), None
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: {lease_change.action} of {table} dt={dt} kept "
            "losing the race with ingestion commits"
        )

    def _range_put(self, r: MergeRange) -> dict[str, Any]:
        item: dict[str, Any] = {
            **self._range_key(r.table, r.dt, r.lower),
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
        return {
            "TableName": self.table_name,
            "Item": item,
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

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
                        # An item without it (not written by this version): unknown, not an error.
                        committed_at_ms=_optional(raw, "committedAt"),
                        # Committed before the ledger kept versions: written before versions.
                        schema_version=_number(raw, "schemaVersion", 1),
                    )
                )
        return sorted(out, key=lambda o: (o.dt, o.object_id))

    def record_publication(self, publication: Publication) -> Publication:
        """Read the partition (strongly consistent), `stamped_publication` on it, then one
        `TransactWriteItems`: the partition's current publication, conditional on the
        `publicationSeq` as read (so of two racing publishers only one can move it), and the
        history record, conditional on being new. A cancelled one means another publisher got
        there first: read again — the check refuses ours if the partition now has our version
        or a newer one, else the next attempt records it with the next `seq`."""
        table, dt = publication.table, publication.dt
        for _ in range(self.retry.max_attempts * 2):
            raw = self._get_raw("record_publication", self._partition_key(table, dt))
            stored = stamped_publication(
                None if raw is None else _partition(table, raw), publication, self.now_ms()
            )
            assert raw is not None  # stamped_publication refuses a missing partition
            writes = [
                {"Update": self._published_partition_update(raw, stored)},
                {"Put": self._publication_put(stored)},
            ]
            reasons = self._transact("record_publication", writes)
            if reasons is None:
                return stored
            if reasons[0] != "ConditionalCheckFailed" and reasons[1] == "ConditionalCheckFailed":
                # The row was as read, yet its next record exists: nothing else writes one.
                raise LeaseholdError(
                    f"{table} dt={dt}: publication record {stored.seq} exists although the "
                    f"partition's current one is {stored.seq - 1}; the ledger needs repair"
                )
        raise StoreUnavailableError(
            f"DynamoDB table {self.table_name!r}: record_publication of {table} dt={dt} kept "
            "losing the race with other publishers"
        )

    def _published_partition_update(
        self, raw: dict[str, Any], stored: Publication
    ) -> dict[str, Any]:
        """Only the publication's attributes: an ingestion or merge commit landing meanwhile
        neither cancels this nor is cancelled by it (what `check_publication` read of them —
        the committed ids and the chain's end — only ever grows)."""
        values = {
            ":cmv": codec.n(stored.manifest_version),
            ":switched": {"BOOL": stored.switched},
            ":upper": codec.n(stored.upper),
            ":seq": codec.n(stored.seq),
        }
        if "publicationSeq" in raw:
            condition = "publicationSeq = :read"
            values[":read"] = raw["publicationSeq"]
        else:
            condition = "attribute_exists(nextObjectId) AND attribute_not_exists(publicationSeq)"
        return {
            "TableName": self.table_name,
            "Key": {ATTR["sid"]: raw[ATTR["sid"]], ATTR["key"]: raw[ATTR["key"]]},
            "UpdateExpression": (
                "SET currentManifestVersion = :cmv, #switched = :switched, "
                "publishedUpper = :upper, publicationSeq = :seq"
            ),
            "ConditionExpression": condition,
            "ExpressionAttributeNames": {"#switched": "switched"},
            "ExpressionAttributeValues": values,
        }

    def _publication_put(self, p: Publication) -> dict[str, Any]:
        return {
            "TableName": self.table_name,
            "Item": {
                **codec.key(self._publications_sid(p.table, p.dt), f"{p.seq:019d}"),
                "switched": {"BOOL": p.switched},
                "upper": codec.n(p.upper),
                "location": codec.s(p.location),
                "files": codec.n(p.files),
                "rows": codec.n(p.rows),
                "bytes": codec.n(p.bytes),
                "publishedAt": codec.n(p.published_at_ms),
            },
            "ConditionExpression": "attribute_not_exists(#key)",
            "ExpressionAttributeNames": {"#key": ATTR["key"]},
        }

    def publications(self, table: str, dt: str) -> list[Publication]:
        """One Query of the partition's history items (their keys sort by `seq`)."""
        raws = self._query_all("publications", self._publications_sid(table, dt))
        return sorted((_publication(table, dt, raw) for raw in raws), key=lambda p: p.seq)

    def forget_publications(self, table: str, dt: str, before_seq: int) -> int:
        """The records below `forget_bound` (never the current one, as just read strongly
        consistent) found by one key-range Query, then deleted in batches. Only garbage
        collection forgets, and new records only get higher `seq`s, so nothing races it."""
        bound = forget_bound(self.table_partition(table, dt), before_seq)
        if bound <= 1:
            return 0
        sid = self._publications_sid(table, dt)

        def query() -> list[dict[str, Any]]:
            pages = self.client.get_paginator("query").paginate(
                TableName=self.table_name,
                KeyConditionExpression="#sid = :sid AND #key < :bound",
                ExpressionAttributeNames={"#sid": ATTR["sid"], "#key": ATTR["key"]},
                ExpressionAttributeValues={
                    ":sid": codec.s(sid),
                    ":bound": codec.s(f"{bound:019d}"),
                },
                ProjectionExpression="#sid, #key",
                ConsistentRead=True,
            )
            return [raw for page in pages for raw in page.get("Items", [])]

        keys = self._call("forget_publications", query)
        self.dynamodb.batch_delete("forget_publications", keys)
        return len(keys)

    # -- schema versions -------------------------------------------------------------------------

    def schema_versions(self, stream: str) -> list[SchemaVersion]:
        """One strongly consistent Query: the version items sort by their zero-padded number.
        An error no retry changes is `StoreRefusedError` (see `SchemaRegistry`)."""
        try:
            raws = self._query_all("schema_versions", self._schema_sid(stream))
        except (ClientError, BotoCoreError) as exc:
            raise self.dynamodb.refused("schema_versions", exc) from exc
        return [SchemaVersion.from_json(json.loads(raw["body"]["S"])) for raw in raws]

    def _put_schema_version(self, stream: str, version: SchemaVersion) -> None:
        """One `PutItem` conditional on the version's item not existing: the failed condition
        is `SchemaVersionTakenError`, any other error no retry changes `StoreRefusedError`."""
        item = {
            **codec.key(self._schema_sid(stream), f"{version.version:010d}"),
            "body": codec.s(json.dumps(version.to_json())),
        }
        try:
            self._call(
                "put_schema_version",
                lambda: self.client.put_item(
                    TableName=self.table_name,
                    Item=item,
                    ConditionExpression="attribute_not_exists(#sid)",
                    ExpressionAttributeNames={"#sid": ATTR["sid"]},
                ),
            )
        except (ClientError, BotoCoreError) as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise self.dynamodb.refused("put_schema_version", exc) from exc
            raise SchemaVersionTakenError(
                f"schema version {version.version} of {stream!r} is recorded already"
            ) from None

    # -- rollup state ----------------------------------------------------------------------------

    def rollup_states(
        self, rollup: str, dt: str, keys: Sequence[str] | None = None
    ) -> dict[str, KeyState]:
        sid = self._rollup_sid(rollup, dt)
        if keys is None:
            raws = self._query_all("rollup_states", sid)
        else:
            raws = self.dynamodb.batch_get("rollup_states", [codec.key(sid, k) for k in keys])
        return {
            raw[ATTR["key"]]["S"]: KeyState(
                int(raw["txid"]["N"]),
                decode_value(raw["value"]["S"]),  # type: ignore[arg-type]
                decode_value(raw["prevValue"]["S"]) if "prevValue" in raw else None,
            )
            for raw in raws
        }

    def _write_rollup_keys(
        self,
        token: LeaseToken,
        rollup: str,
        dt: str,
        writes: Sequence[KeyWrite],
        lease_change: Transition,
    ) -> tuple[bool, LeaseItem | None]:
        """One `TransactWriteItems`: a `Put` per key, conditional on the txid read (or on the
        key having no item), and the lease renewal with its guard."""
        sid = self._rollup_sid(rollup, dt)
        items: list[dict[str, Any]] = []
        for w in writes:
            put: dict[str, Any] = {
                "TableName": self.table_name,
                "Item": {
                    **codec.key(sid, w.key),
                    "txid": codec.n(w.state.txid),
                    "value": codec.s(encode_value(w.state.value)),  # type: ignore[arg-type]
                },
            }
            if w.state.prev_value is not None:
                put["Item"]["prevValue"] = codec.s(encode_value(w.state.prev_value))  # type: ignore[arg-type]
            if w.expected_txid is None:
                put["ConditionExpression"] = "attribute_not_exists(#sid)"
                put["ExpressionAttributeNames"] = {"#sid": ATTR["sid"]}
            else:
                put["ConditionExpression"] = "txid = :txid"
                put["ExpressionAttributeValues"] = {":txid": codec.n(w.expected_txid)}
            items.append({"Put": put})
        owner_sid, key = token.source_identifier, token.partition_key
        items.append(
            {"Update": codec.conditional_update(self.table_name, owner_sid, key, lease_change)}
        )
        reasons = self._transact(lease_change.action, items)
        if reasons is None:
            return True, None
        if reasons[-1] == "ConditionalCheckFailed":
            return False, self.get(owner_sid, key)
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


def _publication(table: str, dt: str, raw: dict[str, Any]) -> Publication:
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
    )


def _optional(raw: dict[str, Any], name: str) -> int | None:
    value = raw.get(name)
    return None if value is None else int(value["N"])


def _number(raw: dict[str, Any], name: str, default: int) -> int:
    value = raw.get(name)
    return default if value is None else int(value["N"])


def _partition(table: str, raw: dict[str, Any]) -> TablePartition:
    return TablePartition(
        table=table,
        dt=raw[ATTR["key"]]["S"],
        next_object_id=int(raw["nextObjectId"]["N"]),
        last_live_object_id=_optional(raw, "lastLiveObjectId"),
        current_manifest_version=_number(raw, "currentManifestVersion", -1),
        desired_manifest_version=_number(raw, "desiredManifestVersion", -1),
        switched=raw.get("switched", {"BOOL": False})["BOOL"],
        merged_upper=_number(raw, "mergedUpper", 0),
        merge_due_at_ms=_optional(raw, "mergeDueAt"),
        published_upper=_number(raw, "publishedUpper", 0),
        publication_seq=_number(raw, "publicationSeq", 0),
    )


def _range(table: str, dt: str, raw: dict[str, Any]) -> MergeRange:
    url = raw.get("url")
    return MergeRange(
        table=table,
        dt=dt,
        lower=_optional(raw, "lower"),
        upper=int(raw["upper"]["N"]),
        url=None if url is None else url["S"],
        content_length=int(raw["contentLength"]["N"]),
        row_count=int(raw["rowCount"]["N"]),
        epoch=int(raw["epoch"]["N"]),
        updated_at_ms=int(raw["updatedAt"]["N"]),
        schema_version=_number(raw, "schemaVersion", 1),  # absent: recorded before versions
    )
