"""A reverse proxy on 127.0.0.1 in front of the loopback AWS server, for Glue: pages listings
and can answer the next N requests with an error.

moto's Glue answers `GetPartitions` and `GetTables` in one page whatever `MaxResults` says,
while AWS pages them (at most 1000 partitions a page): a catalog that ignored `NextToken` would
pass against moto and lose partitions against AWS. Here every listing is cut into pages of
`page_size` with an opaque `NextToken`, as AWS does. Errors (throttling, 5xx) are sent over the
wire as the real HTTP answers, so the client meets them exactly as it would meet AWS's.
"""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

LISTS = {"AWSGlue.GetPartitions": "Partitions", "AWSGlue.GetTables": "TableList"}


class GlueProxy:
    def __init__(self, upstream: str, *, page_size: int = 50) -> None:
        self.upstream = urlparse(upstream)
        self.page_size = page_size
        self.fail_next = 0
        self.fail_status = 400
        self.fail_code = "ThrottlingException"
        self.failed = 0
        self.pages_served = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    fail = proxy.fail_next > 0
                    if fail:
                        proxy.fail_next -= 1
                        proxy.failed += 1
                    status, code = proxy.fail_status, proxy.fail_code
                if fail:
                    message = json.dumps({"__type": code, "Message": "Rate exceeded"}).encode()
                    self._answer(status, message)
                    return
                target = self.headers.get("X-Amz-Target", "")
                paged = target in LISTS
                request = json.loads(body or b"{}")
                offset = int(request.pop("NextToken", None) or 0) if paged else 0
                limit = min(int(request.pop("MaxResults", proxy.page_size)), proxy.page_size)
                if paged:
                    body = json.dumps(request).encode()
                status, data = proxy._forward(self, body)
                if paged and status == 200:
                    data = proxy._page(LISTS[target], data, offset, limit)
                self._answer(status, data)

            def _answer(self, status: int, data: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/x-amz-json-1.1")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() != "host"}
            headers["Content-Length"] = str(len(body))
            conn.request("POST", handler.path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

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

    @property
    def endpoint_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> GlueProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
