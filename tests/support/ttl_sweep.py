"""Stand-in for DynamoDB's TTL sweeper, which deletes items whose TTL attribute has passed.

moto's server keeps expired items; AWS deletes them (within days). Tests call this to be in the
world after the sweep. For SQLite the store's own `purge_expired` is the sweeper.
"""

from __future__ import annotations

from resources.coordination.items import ATTR
from resources.coordination.lease_store import LeaseStore


def sweep_expired(store: LeaseStore) -> int:
    now_s = store.now_ms() // 1000
    if store.backend == "sqlite":
        return store.purge_expired()  # type: ignore[attr-defined]
    client, table = store.client, store.table_name  # type: ignore[attr-defined]
    deleted = 0
    for page in client.get_paginator("scan").paginate(TableName=table):
        for item in page["Items"]:
            exp = item.get(ATTR["expiration"])
            if exp is not None and int(exp["N"]) < now_s:
                key = {ATTR["sid"]: item[ATTR["sid"]], ATTR["key"]: item[ATTR["key"]]}
                client.delete_item(TableName=table, Key=key)
                deleted += 1
    return deleted
