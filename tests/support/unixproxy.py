"""A small proxy on a unix socket in front of an ovsdb-server, for fault tests.

Every client connection is forwarded byte for byte to the server's socket. A test can
stall all traffic (nothing is read or written while stalled; new connections wait),
resume it, and cut the connections that asked the server for an OVSDB lock, which
makes the server release that lock at once, as a network fault would.
"""

from __future__ import annotations

import contextlib
import re
import select
import socket
import threading
from pathlib import Path

_LOCK_REQUEST = re.compile(rb'"method"\s*:\s*"lock"')


class _Link:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.asked_for_lock = False
        self.closed = threading.Event()

    def close(self) -> None:
        self.closed.set()
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class UnixProxy:
    """Listens at `path`, forwards to `upstream`; use as a context manager."""

    def __init__(self, path: Path, upstream: Path) -> None:
        self.path = path
        self.upstream = upstream
        self.flowing = threading.Event()
        self.flowing.set()
        self.links: list[_Link] = []
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX)
        self.stopping = threading.Event()

    @property
    def remote(self) -> str:
        return f"unix:{self.path}"

    def __enter__(self) -> UnixProxy:
        self.listener.bind(str(self.path))
        self.listener.listen(16)
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.flowing.set()
        self.listener.close()
        with self.lock:
            for link in self.links:
                link.close()

    def stall(self) -> None:
        self.flowing.clear()

    def resume(self) -> None:
        self.flowing.set()

    def cut_lock_connections(self) -> int:
        """Close the connections that sent a `lock` request; how many there were."""
        with self.lock:
            cut = [link for link in self.links if link.asked_for_lock and
                   not link.closed.is_set()]
        for link in cut:
            link.close()
        return len(cut)

    def cut_all(self) -> int:
        """Close every connection; how many there were."""
        with self.lock:
            cut = [link for link in self.links if not link.closed.is_set()]
        for link in cut:
            link.close()
        return len(cut)

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.socket(socket.AF_UNIX)
            try:
                server.connect(str(self.upstream))
            except OSError:
                client.close()
                server.close()
                continue
            link = _Link(client, server)
            with self.lock:
                self.links.append(link)
            threading.Thread(target=self._pump, args=(link, client, server, True),
                             daemon=True).start()
            threading.Thread(target=self._pump, args=(link, server, client, False),
                             daemon=True).start()

    def _pump(self, link: _Link, source: socket.socket, target: socket.socket,
              from_client: bool) -> None:
        seen = b""
        while not link.closed.is_set():
            self.flowing.wait()
            try:
                ready, _, _ = select.select([source], [], [], 0.05)
                if not ready:
                    continue
                if not self.flowing.is_set():
                    continue  # stalled between the wait and the read: read nothing
                data = source.recv(65536)
                if not data:
                    break
                if from_client and not link.asked_for_lock:
                    seen = (seen + data)[-4096:]
                    link.asked_for_lock = bool(_LOCK_REQUEST.search(seen))
                target.sendall(data)
            except (OSError, ValueError):
                break
        link.close()
