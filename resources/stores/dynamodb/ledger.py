"""The DynamoDB store's ledger: commits and merge commits as one transaction each, closing,
commit records, ledger reads.

Its parts, each a mixin this class joins: `ledger_commits` (ingestion commits, commit records,
closing), `ledger_merges` (the chain and merge commits), `ledger_publications`,
`ledger_rollups`, and here the schema versions; under them `ledger_access` (reads, transactions,
the lease-fenced transaction all three commits end with), `ledger_keys` (key naming) and
`ledger_items` (each item encoded and decoded, as `codec` does for lease items).

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

from botocore.exceptions import BotoCoreError, ClientError

from resources.coordination.items import ATTR
from resources.ledger.schema_versions import SchemaVersionTakenError
from resources.schema.versions import SchemaVersion
from resources.stores.dynamodb import codec
from resources.stores.dynamodb.client import error_code
from resources.stores.dynamodb.ledger_commits import DynamoDbCommits
from resources.stores.dynamodb.ledger_items import schema_version_from, schema_version_item
from resources.stores.dynamodb.ledger_merges import DynamoDbMerges
from resources.stores.dynamodb.ledger_publications import DynamoDbPublications
from resources.stores.dynamodb.ledger_rollups import DynamoDbRollups


class DynamoDbLedger(DynamoDbCommits, DynamoDbMerges, DynamoDbPublications, DynamoDbRollups):
    """The ledger half of `DynamoDbLeaseStore`, which provides `client`, `dynamodb` (the
    wrapping `DynamoDbClient`), `_call`, `table_name`, `retry`, `partition_prefix`, `get` and
    `now_ms`."""

    # -- schema versions -------------------------------------------------------------------------

    def schema_versions(self, stream: str) -> list[SchemaVersion]:
        """One strongly consistent Query: the version items sort by their zero-padded number.
        An error no retry changes is `StoreRefusedError` (see `SchemaRegistry`)."""
        try:
            raws = self._query_all("schema_versions", self._schema_sid(stream))
        except (ClientError, BotoCoreError) as exc:
            raise self.dynamodb.refused("schema_versions", exc) from exc
        return [schema_version_from(raw) for raw in raws]

    def _put_schema_version(self, stream: str, version: SchemaVersion) -> None:
        """One `PutItem` conditional on the version's item not existing: the failed condition
        is `SchemaVersionTakenError`, any other error no retry changes `StoreRefusedError`."""
        item = {
            **codec.key(self._schema_sid(stream), f"{version.version:010d}"),
            **schema_version_item(version),
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
