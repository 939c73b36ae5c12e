"""A reverse proxy on 127.0.0.1 that throttles the first N requests, then forwards.

Throttling has to be tested over the wire like everything else: the client sees a real HTTP
400 with DynamoDB's throttling body, exactly as AWS sends it. It can also answer the next N
`BatchGetItem` calls in part, the rest of their keys as `UnprocessedKeys` — what a throttled
AWS does to a batch read, and no local server does.
"""

from __future__ import annotations

import http.client
import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlparse

THROTTLED = (
    b'{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException",'
    b'"message":"The level of configured provisioned throughput for the table was exceeded."}'
)


class ThrottlingProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlparse(upstream)
        self.throttle_next = 0
        self.throttled = 0
        self.defer_batch_gets = 0
        """The next N BatchGetItem answers leave half their keys (at least one) unprocessed."""
        self.deferred_keys = 0
        self.forwarded = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with proxy._lock:
                    throttle = proxy.throttle_next > 0
                    if throttle:
                        proxy.throttle_next -= 1
                        proxy.throttled += 1
                    else:
                        proxy.forwarded += 1
                if throttle:
                    self.send_response(400)
                    self.send_header("Content-Type", "application/x-amz-json-1.0")
                    self.send_header("Content-Length", str(len(THROTTLED)))
                    self.end_headers()
                    self.wfile.write(THROTTLED)
                    return
                conn = http.client.HTTPConnection(
                    proxy.upstream.hostname, proxy.upstream.port, timeout=30
                )
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                conn.request("POST", self.path, body=body, headers=headers)
                response = conn.getresponse()
                data = response.read()
                if self.headers.get("X-Amz-Target", "").endswith(".BatchGetItem"):
                    data = proxy._defer_some(body, data)
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in (
                        "content-length",
                        "transfer-encoding",
                        "connection",
                        "x-amz-crc32",
                    ):
                        self.send_header(key, value)
                self.send_header("x-amz-crc32", str(zlib.crc32(data)))
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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

    @property
    def endpoint_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> ThrottlingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
