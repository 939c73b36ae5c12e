"""A reverse proxy on 127.0.0.1 in front of the local AWS server that holds one chosen request.

Given as a command's S3 endpoint, it forwards every request as it comes, except the `nth`
request `matches` picks: that one is held — `holding` is set — until `release` (or the end),
so a test can SIGKILL the command at that exact point of its work (e.g. source clean-up after
its first unit's objects went, before the second unit's delete). A request still held when
the proxy stops is dropped, never forwarded: its client was killed before it was sent.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

from tests.support.gate_proxy import HOLD_S, HOP_BY_HOP, _body

Match = Callable[[str, str, str], bool]
"""(method, path, query) -> whether the request counts."""


def is_batch_delete(method: str, path: str, query: str) -> bool:
    """S3 DeleteObjects: `POST /bucket?delete`."""
    return method == "POST" and query.split("=")[0] == "delete"


class HoldingProxy:
    def __init__(self, upstream: str, matches: Match, nth: int) -> None:
        self.upstream = urlsplit(upstream)
        self.matches, self.nth, self.seen = matches, nth, 0
        self.holding = threading.Event()
        self.released = threading.Event()
        self.stopped = threading.Event()
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                proxy.relay(self)

            do_PUT = do_POST = do_HEAD = do_DELETE = do_GET  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def _hold(self, method: str, path: str, query: str) -> bool:
        with self._lock:
            if not self.matches(method, path, query):
                return False
            self.seen += 1
            return self.seen == self.nth

    def relay(self, handler: BaseHTTPRequestHandler) -> None:
        target = urlsplit(handler.path)
        body = _body(handler)
        if self._hold(handler.command, target.path, target.query):
            self.holding.set()
            self.released.wait(HOLD_S)
            if self.stopped.is_set():
                handler.close_connection = True
                return
        conn = http.client.HTTPConnection(
            self.upstream.hostname or "127.0.0.1", self.upstream.port, timeout=60
        )
        try:
            headers = {k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP}
            if body or handler.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            response = conn.getresponse()
            data = response.read()
            handler.send_response(response.status)
            for key, value in response.getheaders():
                if key.lower() not in HOP_BY_HOP + ("content-length",):
                    handler.send_header(key, value)
            length = response.getheader("Content-Length")
            head = handler.command == "HEAD"
            handler.send_header("Content-Length", length if head and length else str(len(data)))
            handler.end_headers()
            if not head:
                handler.wfile.write(data)
        except OSError:
            handler.close_connection = True  # the client was killed meanwhile
        finally:
            conn.close()

    def __enter__(self) -> HoldingProxy:
        self.thread.start()
        return self

    def release(self) -> None:
        """Forward the held request now."""
        self.released.set()

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.released.set()
        self.server.shutdown()
        self.server.server_close()
