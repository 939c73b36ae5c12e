"""A reverse proxy on 127.0.0.1 that throttles the first N requests, then forwards.

Throttling has to be tested over the wire like everything else: the client sees a real HTTP
400 with DynamoDB's throttling body, exactly as AWS sends it.
"""

from __future__ import annotations

import http.client
import threading
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
                self.send_response(response.status)
                for key, value in response.getheaders():
                    if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                        self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                conn.close()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

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
