"""A reverse proxy on 127.0.0.1 in front of the loopback AWS server, for Glue: pages listings
and can answer the next N requests with an error.

AWS pages `GetPartitions` and `GetTables` (at most 1000 partitions a page), and a catalog that
ignored `NextToken` would lose partitions; moto's Glue answered them in one page (before 5.2)
or pages them by its own size (5.2 on). Either way the proxy reads every upstream page, then
cuts the listing into pages of `page_size` with an opaque `NextToken`, so a short listing meets
several pages here whatever moto does. Errors (throttling, 5xx) are sent over the
wire as the real HTTP answers, so the client meets them exactly as it would meet AWS's.

moto's Glue also ignores `UpdateTable`'s `VersionId` (it records every update as a new version
and `GetTable` returns the current one, but an update naming an older version lands anyway),
while AWS refuses it with `ConcurrentModificationException`. With `check_table_versions`, the
proxy does what AWS does: an `UpdateTable` naming a `VersionId` is checked against the table's
current one (read upstream) and forwarded only if they agree, updates passing the proxy one at a
time so that the check and the write are one step. Only writers going through the proxy are
ordered; the tests send every writer through it.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler

from tests.support.loopback_proxy import LoopbackProxy

LISTS = {"AWSGlue.GetPartitions": "Partitions", "AWSGlue.GetTables": "TableList"}
UPDATE_TABLE = "AWSGlue.UpdateTable"
GET_TABLE = "AWSGlue.GetTable"
JSON_TYPE = (("Content-Type", "application/x-amz-json-1.1"),)


class GlueProxy(LoopbackProxy):
    def __init__(
        self, upstream: str, *, page_size: int = 50, check_table_versions: bool = False
    ) -> None:
        super().__init__(upstream)
        self.page_size = page_size
        self.check_table_versions = check_table_versions
        self.stale_updates = 0
        """`UpdateTable`s refused for naming a version that was no longer current."""
        self._updates = threading.Lock()
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
        if target == UPDATE_TABLE and self.check_table_versions:
            with self._updates:
                self._update_table(handler, body)
            return
        paged = target in LISTS
        request = json.loads(body or b"{}")
        offset = int(request.pop("NextToken", None) or 0) if paged else 0
        limit = min(int(request.pop("MaxResults", self.page_size)), self.page_size)
        if paged:
            status, data = self._listing(handler, LISTS[target], request)
            if status == 200:
                data = self._page(LISTS[target], data, offset, limit)
        else:
            status, _, data = self.forward(handler, body)
        self.answer(handler, status, data, JSON_TYPE)

    def _listing(
        self, handler: BaseHTTPRequestHandler, key: str, request: dict[str, object]
    ) -> tuple[int, bytes]:
        """The whole upstream listing in one answer, every upstream page followed; an error
        answer as it came."""
        items: list[object] = []
        token: object = None
        while True:
            page = dict(request, NextToken=token) if token else request
            status, _, data = self.forward(handler, json.dumps(page).encode())
            if status != 200:
                return status, data
            answer = json.loads(data)
            items.extend(answer.get(key, []))
            token = answer.pop("NextToken", None)
            if not token:
                answer[key] = items
                return status, json.dumps(answer).encode()

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

    def _update_table(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """Forward an `UpdateTable` only if the `VersionId` it names is the table's current one
        (none named: forwarded, as AWS takes it unconditionally)."""
        request = json.loads(body or b"{}")
        named = request.get("VersionId")
        if named is not None:
            lookup = {
                "DatabaseName": request.get("DatabaseName"),
                "Name": (request.get("TableInput") or {}).get("Name"),
            }
            if "CatalogId" in request:
                lookup["CatalogId"] = request["CatalogId"]
            status, _, data = self.forward_as(handler, GET_TABLE, json.dumps(lookup).encode())
            current = json.loads(data).get("Table", {}).get("VersionId") if status == 200 else None
            if current is not None and current != named:
                with self._lock:
                    self.stale_updates += 1
                message = {
                    "__type": "ConcurrentModificationException",
                    "Message": f"table version {named} is not the current one ({current})",
                }
                self.answer(handler, 400, json.dumps(message).encode(), JSON_TYPE)
                return
        status, _, data = self.forward(handler, body)
        self.answer(handler, status, data, JSON_TYPE)

    def forward_as(
        self, handler: BaseHTTPRequestHandler, target: str, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Another Glue action sent upstream with the client's headers (the loopback server
        does not check signatures)."""
        original = handler.headers.get("X-Amz-Target", "")
        handler.headers.replace_header("X-Amz-Target", target)
        try:
            return self.forward(handler, body)
        finally:
            handler.headers.replace_header("X-Amz-Target", original)

    def fail(self, count: int, *, status: int = 400, code: str = "ThrottlingException") -> None:
        """Answer the next `count` requests with `status` and error `code`."""
        with self._lock:
            self.fail_next, self.fail_status, self.fail_code = count, status, code
