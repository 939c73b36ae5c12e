"""A TCP relay: connections to `listen_host:port` are joined to `target_host:target_port`.

tests/chaos/test_cluster_hosts.py runs one on the bridge's address so that processes in the
test's network namespaces, which have no route to this machine's loopback, reach the loopback
AWS server (tests/support/netns.py). Bytes are passed on as they come, both ways; a side that
closes closes the other. A context manager: leaving closes the listener and every connection
and waits (bounded) for its threads.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

CONNECT_TIMEOUT_S = 10.0
JOIN_TIMEOUT_S = 5.0
CHUNK = 1 << 16


@dataclass
class TcpRelay:
    listen_host: str
    target_port: int
    target_host: str = "127.0.0.1"
    connections: int = 0
    _sockets: set[socket.socket] = field(default_factory=set)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _closed: bool = False

    def __post_init__(self) -> None:
        self.listener = socket.create_server((self.listen_host, 0))

    @property
    def port(self) -> int:
        return int(self.listener.getsockname()[1])

    @property
    def url(self) -> str:
        return f"http://{self.listen_host}:{self.port}"

    def __enter__(self) -> TcpRelay:
        self._spawn(self._accept)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._lock:
            self._closed = True
            sockets = list(self._sockets)
        _shut(self.listener)
        for sock in sockets:
            _shut(sock)
        for thread in self._threads:
            thread.join(JOIN_TIMEOUT_S)

    def _spawn(self, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()

    def _keep(self, sock: socket.socket) -> bool:
        with self._lock:
            if self._closed:
                return False
            self._sockets.add(sock)
            return True

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            try:
                upstream = socket.create_connection(
                    (self.target_host, self.target_port), timeout=CONNECT_TIMEOUT_S
                )
            except OSError:
                client.close()
                continue
            upstream.settimeout(None)
            if not (self._keep(client) and self._keep(upstream)):
                client.close()
                upstream.close()
                return
            self.connections += 1
            self._spawn(self._pump, client, upstream)
            self._spawn(self._pump, upstream, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        """Pass bytes from `source` to `sink` until `source` ends (or either fails), then
        close both: the other direction's pump ends with them."""
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                _shut(sock)
                with self._lock:
                    self._sockets.discard(sock)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
