"""A reverse proxy on 127.0.0.1 that throttles the first N requests, then forwards.

Throttling has to be tested over the wire like everything else: the client sees a real HTTP
400 with DynamoDB's throttling body, exactly as AWS sends it. It can also answer the next N
`BatchGetItem` calls in part, the rest of their keys as `UnprocessedKeys` — what a throttled
AWS does to a batch read, and no local server does.
"""

from __future__ import annotations

import json
import zlib
from http.server import BaseHTTPRequestHandler

from tests.support.loopback_proxy import LoopbackProxy

THROTTLED = (
    b'{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",'
    b'"message":"The level of configured provisioned throughput for the table was exceeded."}'
)
DROPPED = ("content-length", "transfer-encoding", "connection", "x-amz-crc32")
"""Upstream headers not passed on: the proxy sends the body whole, with its own length and
checksum (the body may be rewritten)."""


class ThrottlingProxy(LoopbackProxy):
    def __init__(self, upstream: str) -> None:
        super().__init__(upstream)
        self.throttle_next = 0
        self.throttled = 0
        self.defer_batch_gets = 0
        """The next N BatchGetItem answers leave half their keys (at least one) unprocessed."""
        self.deferred_keys = 0
        self.forwarded = 0

    def handle_post(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            throttle = self.throttle_next > 0
            if throttle:
                self.throttle_next -= 1
                self.throttled += 1
            else:
                self.forwarded += 1
        if throttle:
            self.answer(handler, 400, THROTTLED, (("Content-Type", "application/x-amz-json-1.0"),))
            return
        status, headers, data = self.forward(handler, body)
        if handler.headers.get("X-Amz-Target", "").endswith(".BatchGetItem"):
            data = self._defer_some(body, data)
        kept = [(k, v) for k, v in headers if k.lower() not in DROPPED]
        self.answer(handler, status, data, [*kept, ("x-amz-crc32", str(zlib.crc32(data)))])

    def _defer_some(self, request: bytes, response: bytes) -> bytes:
        """Move the second half of each table's requested keys from the answer to
        `UnprocessedKeys`, as DynamoDB does when it runs out of capacity mid-batch."""
        with self._lock:
            if self.defer_batch_gets <= 0:
                return response
            self.defer_batch_gets -= 1
        asked, answer = json.loads(request), json.loads(response)
        for table, spec in asked["RequestItems"].items():
            keys = spec["Keys"]
            deferred = keys[len(keys) // 2 :]
            # A key attribute the projection left out matches (one batch, one hash key here).
            answer["Responses"][table] = [
                item
                for item in answer["Responses"].get(table, [])
                if not any(all(item.get(a, v) == v for a, v in k.items()) for k in deferred)
            ]
            answer.setdefault("UnprocessedKeys", {})[table] = {**spec, "Keys": deferred}
            self.deferred_keys += len(deferred)
        return json.dumps(answer).encode()
