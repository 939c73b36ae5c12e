"""A reverse proxy on 127.0.0.1 in front of the loopback AWS server: the part every such proxy
shares (server, thread, forwarding, answering); a subclass decides what a POST gets.

Faults AWS produces and moto does not (throttling, paging, partial batches) have to reach the
client over the wire, as real HTTP answers, so they are made here rather than by patching.
"""

from __future__ import annotations

import http.client
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Self
from urllib.parse import urlparse


class LoopbackProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = urlparse(upstream)
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                proxy.handle_post(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def handle_post(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        """Answer one POST (`body` already read) through `handler`."""
        raise NotImplementedError

    def forward(
        self, handler: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send the request upstream with `body` (perhaps rewritten): status, headers, data."""
        conn = http.client.HTTPConnection(self.upstream.hostname, self.upstream.port, timeout=30)
        try:
            headers = {
                k: v
                for k, v in handler.headers.items()
                if k.lower() not in ("host", "content-length")
            }
            headers["Content-Length"] = str(len(body))
            conn.request("POST", handler.path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, response.getheaders(), response.read()
        finally:
            conn.close()

    @staticmethod
    def answer(
        handler: BaseHTTPRequestHandler,
        status: int,
        data: bytes,
        headers: list[tuple[str, str]] | tuple[tuple[str, str], ...] = (),
    ) -> None:
        """Send `status`, `headers` and `data` (its Content-Length added) to the client."""
        handler.send_response(status)
        for key, value in headers:
            handler.send_header(key, value)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    @property
    def endpoint_url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> Self:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
