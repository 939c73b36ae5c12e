"""A reverse proxy on 127.0.0.1 in front of the loopback AWS server, for Glue: pages listings
and can answer the next N requests with an error.

moto's Glue answers `GetPartitions` and `GetTables` in one page whatever `MaxResults` says,
while AWS pages them (at most 1000 partitions a page): a catalog that ignored `NextToken` would
pass against moto and lose partitions against AWS. Here every listing is cut into pages of
`page_size` with an opaque `NextToken`, as AWS does. Errors (throttling, 5xx) are sent over the
wire as the real HTTP answers, so the client meets them exactly as it would meet AWS's.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler

from tests.support.loopback_proxy import LoopbackProxy

LISTS = {"AWSGlue.GetPartitions": "Partitions", "AWSGlue.GetTables": "TableList"}
JSON_TYPE = (("Content-Type", "application/x-amz-json-1.1"),)


class GlueProxy(LoopbackProxy):
    def __init__(self, upstream: str, *, page_size: int = 50) -> None:
        super().__init__(upstream)
        self.page_size = page_size
        self.fail_next = 0
        self.fail_status = 400
        self.fail_code = "ThrottlingException"
        self.failed = 0
        self.pages_served = 0

    def handle_post(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            fail = self.fail_next > 0
            if fail:
                self.fail_next -= 1
                self.failed += 1
            status, code = self.fail_status, self.fail_code
        if fail:
            message = json.dumps({"__type": code, "Message": "Rate exceeded"}).encode()
            self.answer(handler, status, message, JSON_TYPE)
            return
        target = handler.headers.get("X-Amz-Target", "")
        paged = target in LISTS
        request = json.loads(body or b"{}")
        offset = int(request.pop("NextToken", None) or 0) if paged else 0
        limit = min(int(request.pop("MaxResults", self.page_size)), self.page_size)
        if paged:
            body = json.dumps(request).encode()
        status, _, data = self.forward(handler, body)
        if paged and status == 200:
            data = self._page(LISTS[target], data, offset, limit)
        self.answer(handler, status, data, JSON_TYPE)

    def _page(self, key: str, data: bytes, offset: int, limit: int) -> bytes:
        answer = json.loads(data)
        items = answer.get(key, [])
        answer[key] = items[offset : offset + limit]
        answer.pop("NextToken", None)
        if offset + limit < len(items):
            answer["NextToken"] = str(offset + limit)
        with self._lock:
            self.pages_served += 1
        return json.dumps(answer).encode()

    def fail(self, count: int, *, status: int = 400, code: str = "ThrottlingException") -> None:
        """Answer the next `count` requests with `status` and error `code`."""
        with self._lock:
            self.fail_next, self.fail_status, self.fail_code = count, status, code
