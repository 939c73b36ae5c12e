"""Store calls and wall time per partition lifecycle: leasehold's store vs Data Prepper's way.

    .venv/bin/python bench/lease_store.py [--partitions N]

Lifecycle: create -> acquire -> renew -> complete, for N partitions, on SQLite and on DynamoDB
(a moto server on 127.0.0.1 started here) in one run. The baseline, written below against the
same table, does what Data Prepper does: one conditional put per created item; acquisition by
querying ASSIGNED, UNASSIGNED and CLOSED, then a conditional put of the whole item; renewal by
a conditional put; completion by get + put.

Calls are counted where they leave the process: for DynamoDB every HTTP API call (a botocore
`before-call` hook on the client); for SQLite every statement the implementation issues
(leasehold: one per `BEGIN IMMEDIATE` transaction or read; baseline: every SELECT and UPDATE).
"""

from __future__ import annotations

import argparse
import sqlite3
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from resources.coordination.items import ATTR, PartitionStatus, priority_at, status_key  # noqa: E402
from resources.coordination.lease_store import LeaseStore  # noqa: E402
from resources.stores import build_store  # noqa: E402
from resources.stores.settings import StoreSettings  # noqa: E402
from tests.support.aws_server import AWS_TEST_ENV, LocalAwsServer  # noqa: E402

PHASES = ("create", "acquire", "renew", "complete")
OWNER = "bench-owner"
TIMEOUT_S = 60.0


@dataclass
class Measure:
    calls: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PHASES, 0))
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))


class Counter:
    def __init__(self) -> None:
        self.n = 0

    def hit(self, *_: Any, **__: Any) -> None:
        self.n += 1


def timed(measure: Measure, phase: str, counter: Counter, fn: Callable[[], Any]) -> Any:
    before, started = counter.n, time.perf_counter()
    out = fn()
    measure.seconds[phase] += time.perf_counter() - started
    measure.calls[phase] += counter.n - before
    return out


# -- leasehold ---------------------------------------------------------------------------------


def count_store_calls(store: LeaseStore) -> Counter:
    counter = Counter()
    if store.backend == "dynamodb":
        store.client.meta.events.register("before-call.dynamodb", counter.hit)  # type: ignore[attr-defined]
    else:
        run, get = store._run, store.get  # type: ignore[attr-defined]
        store._run = lambda *a, **k: (counter.hit(), run(*a, **k))[1]  # type: ignore[attr-defined]
        store.get = lambda *a, **k: (counter.hit(), get(*a, **k))[1]  # type: ignore[method-assign]
    return counter


def bench_leasehold(store: LeaseStore, keys: list[str]) -> Measure:
    counter = count_store_calls(store)
    m = Measure()
    sid = store.source_identifier(f"bench-{uuid.uuid4().hex[:6]}")
    timed(m, "create", counter, lambda: store.create_partitions(sid, keys))
    for key in keys:
        item = timed(m, "acquire", counter, lambda k=key: store.acquire(sid, k, OWNER, TIMEOUT_S))
        timed(m, "renew", counter, lambda i=item: store.renew(i.token, TIMEOUT_S, '{"o": 1}'))
        timed(m, "complete", counter, lambda i=item: store.complete(i.token))
    return m


# -- baseline: Data Prepper's access pattern, same table -----------------------------------------


class DynamoBaseline:
    def __init__(self, store: LeaseStore) -> None:
        self.client = store.client  # type: ignore[attr-defined]
        self.table = store.table_name  # type: ignore[attr-defined]
        self.counter = Counter()
        self.client.meta.events.register("before-call.dynamodb", self.counter.hit)

    def item(self, sid: str, key: str, status: PartitionStatus, version: int, **extra: Any) -> dict:
        now = int(time.time() * 1000)
        item = {
            ATTR["sid"]: {"S": sid},
            ATTR["key"]: {"S": key},
            ATTR["status"]: {"S": status.value},
            ATTR["status_key"]: {"S": status_key(sid, status)},
            ATTR["priority"]: {"S": priority_at(now)},
            ATTR["version"]: {"N": str(version)},
            ATTR["closed_count"]: {"N": "0"},
            ATTR["epoch"]: {"N": "0"},
        }
        item.update({ATTR[k]: v for k, v in extra.items()})
        return item

    def put(self, item: dict, version: int | None) -> None:
        if version is None:
            cond, values = "attribute_not_exists(#k)", {}
        else:
            cond, values = "#v = :v", {":v": {"N": str(version)}}
        names = {"#k": ATTR["key"]} if version is None else {"#v": ATTR["version"]}
        kwargs: dict[str, Any] = dict(
            TableName=self.table,
            Item=item,
            ConditionExpression=cond,
            ExpressionAttributeNames=names,
        )
        if values:
            kwargs["ExpressionAttributeValues"] = values
        self.client.put_item(**kwargs)

    def query(self, sid: str, status: PartitionStatus) -> list[dict]:
        return self.client.query(
            TableName=self.table,
            IndexName="source-status",
            KeyConditionExpression="#sk = :sk",
            ExpressionAttributeNames={"#sk": ATTR["status_key"]},
            ExpressionAttributeValues={":sk": {"S": status_key(sid, status)}},
            Limit=1,
        )["Items"]

    def run(self, keys: list[str]) -> Measure:
        m, c = Measure(), self.counter
        sid = f"baseline-{uuid.uuid4().hex[:6]}|partition"
        deadline = {"N": str(int((time.time() + TIMEOUT_S) * 1000))}
        for key in keys:
            timed(
                m,
                "create",
                c,
                lambda k=key: self.put(self.item(sid, k, PartitionStatus.UNASSIGNED, 1), None),
            )
        for _ in keys:

            def acquire() -> tuple[str, int]:
                self.query(sid, PartitionStatus.ASSIGNED)
                found = self.query(sid, PartitionStatus.UNASSIGNED)
                self.query(sid, PartitionStatus.CLOSED)
                key, version = found[0][ATTR["key"]]["S"], int(found[0][ATTR["version"]]["N"])
                self.put(
                    self.item(
                        sid,
                        key,
                        PartitionStatus.ASSIGNED,
                        version + 1,
                        owner={"S": OWNER},
                        ownership_timeout=deadline,
                    ),
                    version,
                )
                return key, version + 1

            key, version = timed(m, "acquire", c, acquire)
            timed(
                m,
                "renew",
                c,
                lambda k=key, v=version: self.put(
                    self.item(
                        sid,
                        k,
                        PartitionStatus.ASSIGNED,
                        v + 1,
                        owner={"S": OWNER},
                        ownership_timeout=deadline,
                        progress={"S": '{"o": 1}'},
                    ),
                    v,
                ),
            )

            def complete(k: str = key, v: int = version + 1) -> None:
                self.client.get_item(
                    TableName=self.table,
                    Key={ATTR["sid"]: {"S": sid}, ATTR["key"]: {"S": k}},
                    ConsistentRead=True,
                )
                self.put(self.item(sid, k, PartitionStatus.COMPLETED, v + 1), v)

            timed(m, "complete", c, complete)
        return m


class SqliteBaseline:
    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None, timeout=10)
        self.counter = Counter()

    def execute(self, sql: str, args: tuple = ()) -> sqlite3.Cursor:
        self.counter.hit()
        return self.db.execute(sql, args)

    def run(self, keys: list[str]) -> Measure:
        m, c = Measure(), self.counter
        sid = f"baseline-{uuid.uuid4().hex[:6]}|partition"
        s, k, st, v, p, o = (
            ATTR[a] for a in ("sid", "key", "status", "version", "priority", "owner")
        )
        for i, key in enumerate(keys):
            timed(
                m,
                "create",
                c,
                lambda key=key, i=i: self.execute(
                    f"INSERT OR IGNORE INTO lease_items ({s}, {k}, {st}, {v}, {ATTR['epoch']}, "
                    f"{p}) VALUES (?, ?, 'UNASSIGNED', 1, 0, ?)",
                    (sid, key, priority_at(0, i)),
                ),
            )
        for _ in keys:

            def acquire() -> tuple[str, int]:
                found = None
                for status in ("ASSIGNED", "UNASSIGNED", "CLOSED"):
                    row = self.execute(
                        f"SELECT {k}, {v} FROM lease_items WHERE {s} = ? AND {st} = ? "
                        f"ORDER BY {p} LIMIT 1",
                        (sid, status),
                    ).fetchone()
                    if status == "UNASSIGNED":
                        found = row
                key, version = found
                self.execute(
                    f"UPDATE lease_items SET {st} = 'ASSIGNED', {o} = ?, {v} = ? "
                    f"WHERE {s} = ? AND {k} = ? AND {v} = ?",
                    (OWNER, version + 1, sid, key, version),
                )
                return key, version + 1

            key, version = timed(m, "acquire", c, acquire)
            timed(
                m,
                "renew",
                c,
                lambda key=key, version=version: self.execute(
                    f"UPDATE lease_items SET {v} = ?, {ATTR['progress']} = '{{\"o\": 1}}' "
                    f"WHERE {s} = ? AND {k} = ? AND {v} = ?",
                    (version + 1, sid, key, version),
                ),
            )

            def complete(key: str = key, version: int = version + 1) -> None:
                self.execute(f"SELECT * FROM lease_items WHERE {s} = ? AND {k} = ?", (sid, key))
                self.execute(
                    f"UPDATE lease_items SET {st} = 'COMPLETED', {v} = ? "
                    f"WHERE {s} = ? AND {k} = ? AND {v} = ?",
                    (version + 1, sid, key, version),
                )

            timed(m, "complete", c, complete)
        return m


# -- report ------------------------------------------------------------------------------------


def row(backend: str, name: str, m: Measure, n: int) -> tuple[float, float, float]:
    """Print one table row; return (lifecycle calls, creation calls, ms) per partition."""
    per_call = " | ".join(f"{m.calls[p] / n:.3f}" for p in PHASES)
    total_calls = sum(m.calls.values()) / n
    ms = sum(m.seconds.values()) / n * 1000
    print(f"| {backend} | {name} | {per_call} | {total_calls:.3f} | {ms:.2f} |")
    return total_calls - m.calls["create"] / n, m.calls["create"] / n, ms


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--partitions", type=int, default=300)
    n = parser.parse_args().partitions
    import os

    os.environ.update(AWS_TEST_ENV)
    keys = [f"bucket|2026/01/01/object-{i:06d}.json" for i in range(n)]
    server = LocalAwsServer().start()
    verdicts = []
    try:
        print(f"{n} partitions per implementation; calls and ms are per partition.\n")
        print("| backend | implementation | create | acquire | renew | complete | calls | ms |")
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        with tempfile.TemporaryDirectory() as tmp:
            for backend in ("sqlite", "dynamodb"):
                if backend == "sqlite":
                    settings = StoreSettings(sqlite_path=str(Path(tmp) / "bench.db"))
                else:
                    settings = StoreSettings(
                        backend="dynamodb",
                        table_name=f"bench-{uuid.uuid4().hex[:8]}",
                        endpoint_url=server.endpoint_url,
                        billing_mode="PAY_PER_REQUEST",
                    )
                store = build_store(settings)
                baseline = (
                    SqliteBaseline(Path(settings.sqlite_path))  # type: ignore[arg-type]
                    if backend == "sqlite"
                    else DynamoBaseline(store)
                )
                base = row(backend, "baseline (Data Prepper)", baseline.run(keys), n)
                ours = row(backend, "leasehold", bench_leasehold(store, keys), n)
                verdicts.append((backend, ours, base))
        print()
        for backend, (calls, create, ms), (base_calls, base_create, base_ms) in verdicts:
            ok = "meets" if calls <= 3 and create <= 0.01 else "MISSES"
            print(
                f"{backend}: {calls:.2f} calls per acquire+renew+complete plus {create:.3f} "
                f"amortized per creation ({ok} the target: <= 3, creation batched); baseline "
                f"{base_calls:.2f} + {base_create:.2f}; "
                f"{(calls + create) / (base_calls + base_create):.2f}x its calls, "
                f"{ms / base_ms:.2f}x its time"
            )
    finally:
        server.stop()
    return 0 if all(v[1][0] <= 3 and v[1][1] <= 0.01 for v in verdicts) else 1


if __name__ == "__main__":
    sys.exit(main())
