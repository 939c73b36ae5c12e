"""A forward HTTP proxy for one machine's S3 traffic, with a gate for a rendezvous.

It listens on `host`: 127.0.0.1 unless given, the bridge's address for a worker on a host of
its own (tests/support/netns.py). A cluster worker started with `HTTP_PROXY` pointing here
(tests/support/spark_cluster.py's `worker_env`) sends its executors' S3 requests through it
(boto3 honours the variable; Spark's own traffic is not HTTP). Everything is forwarded as it
comes, until the gate is `arm`ed with a table prefix and a source prefix: then, once the
machine has PUT an object under the table prefix, its next GET under the source prefix is
held — `holding` is set — until `release`. A task that reads several parts writes each part's
table object before it fetches the next part's sources, so the held GET is a task that has
written, and not yet returned, on that machine: a task attempt with files of its own that no
commit may name if the machine dies now.
"""

from __future__ import annotations

import http.client
import socketserver
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

HOLD_S = 120.0
"""How long a held GET waits for `release` (a dead client's request is released at the end)."""
HOP_BY_HOP = ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "te")


@dataclass
class Gate:
    table_prefix: str = ""
    source_prefix: str = ""
    written: list[str] = field(default_factory=list)
    """Paths (unquoted: `/bucket/key`) the machine PUT under the table prefix since `arm`."""
    holding: threading.Event = field(default_factory=threading.Event)
    released: threading.Event = field(default_factory=threading.Event)


class _Server(ThreadingHTTPServer):
    def server_bind(self) -> None:
        """Bind, and no more: `HTTPServer.server_bind` also looks its address up in DNS
        (`socket.getfqdn`), a query off the test's network for an address not in /etc/hosts."""
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)


class GateProxy:
    def __init__(self, host: str = "127.0.0.1") -> None:
        self.gate: Gate | None = None
        self.requests = 0
        self._lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                proxy.relay(self)

            do_PUT = do_POST = do_HEAD = do_DELETE = do_GET  # noqa: N815

        self.server = _Server((host, 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def arm(self, table_prefix: str, source_prefix: str) -> Gate:
        """Hold the machine's first source GET after its first table PUT from now on."""
        with self._lock:
            self.gate = Gate(table_prefix, source_prefix)
            return self.gate

    def release(self) -> None:
        with self._lock:
            gate, self.gate = self.gate, None
        if gate is not None:
            gate.released.set()

    def _held(self, method: str, path: str) -> Gate | None:
        """The gate to wait at, for this request, if it is to be held."""
        with self._lock:
            self.requests += 1
            gate = self.gate
            if gate is None:
                return None
            if method == "PUT" and path.startswith(gate.table_prefix):
                gate.written.append(path)
            elif (
                method == "GET"
                and gate.written
                and path.startswith(gate.source_prefix)
                and not gate.holding.is_set()
            ):
                gate.holding.set()
                return gate
            return None

    def relay(self, handler: BaseHTTPRequestHandler) -> None:
        target = urlsplit(handler.path)
        path = target.path + (f"?{target.query}" if target.query else "")
        body = _body(handler)
        gate = self._held(handler.command, unquote(target.path))
        if gate is not None:
            gate.released.wait(HOLD_S)
        conn = http.client.HTTPConnection(target.hostname or "127.0.0.1", target.port, timeout=60)
        try:
            headers = {
                k: v for k, v in handler.headers.items() if k.lower() not in HOP_BY_HOP + ("host",)
            }
            if body or handler.command in ("PUT", "POST"):
                headers["Content-Length"] = str(len(body))
            conn.request(handler.command, path, body=body or None, headers=headers)
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
            handler.close_connection = True  # the client died meanwhile (a killed machine)
        finally:
            conn.close()

    def __enter__(self) -> GateProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
        self.server.shutdown()
        self.server.server_close()


def _body(handler: BaseHTTPRequestHandler) -> bytes:
    """The request's body: by its Content-Length, or its chunks."""
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        chunks: list[bytes] = []
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                while handler.rfile.readline() not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return b"".join(chunks)
            chunks.append(handler.rfile.read(size))
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length", 0)))
