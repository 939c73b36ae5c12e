"""The DynamoDB store's object claims (`resources/coordination/object_claims.py`): one item per
claimed source object under `<source identifier>|claims`, key the object's key, with `unit`,
`size`, `etag` (absent when unknown, as on claims written before fingerprints) and no TTL
attribute (a claim must outlive the lease item's TTL, as a commit record
does). No `sourcePartitionStatus`, so no status index entry and no lease reader sees it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from resources.coordination.items import ATTR
from resources.coordination.object_claims import ObjectClaim
from resources.stores.dynamodb import codec

if TYPE_CHECKING:
    from resources.stores.dynamodb.client import DynamoDbClient


def claims_sid(source_identifier: str) -> str:
    return f"{source_identifier}|claims"


class DynamoDbClaims:
    """The claims half of `DynamoDbLeaseStore`, which provides `dynamodb`."""

    dynamodb: DynamoDbClient

    def claim_objects(self, source_identifier: str, claims: Sequence[ObjectClaim]) -> None:
        """`BatchWriteItem` puts, 25 a call."""
        sid = claims_sid(source_identifier)
        items = [
            {
                **codec.key(sid, c.key),
                "unit": codec.s(c.unit),
                "size": codec.n(c.size),
                **({"etag": codec.s(c.etag)} if c.etag else {}),
            }
            for c in claims
        ]
        self.dynamodb.batch_put("claim_objects", items)

    def object_claims(self, source_identifier: str, keys: Sequence[str]) -> dict[str, ObjectClaim]:
        """`BatchGetItem`, strongly consistent, 100 keys a call."""
        sid = claims_sid(source_identifier)
        unique = list(dict.fromkeys(keys))
        raws = self.dynamodb.batch_get("object_claims", [codec.key(sid, k) for k in unique])
        return {
            (key := raw[ATTR["key"]]["S"]): ObjectClaim(
                key, raw["unit"]["S"], int(raw["size"]["N"]), raw.get("etag", {}).get("S", "")
            )
            for raw in raws
        }
