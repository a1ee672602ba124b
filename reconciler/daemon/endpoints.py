"""The daemon's HTTP endpoints (/metrics, /healthz, /readyz and POST /hooks/git), served by
a small process of their own.

A run at thousands of tenants does long work that holds Python's interpreter lock for
seconds at a time (decoding a large reply, a full collection of a large heap). A thread of
the daemon could not answer meanwhile: GitHub gives a webhook 10 s, a kubelet's liveness
probe 1 s. So the daemon starts this process, and:

- hands it the metrics and readiness after each run (one JSON line on its stdin), which it
  serves until the next;
- reads a byte from its stdout for each verified push webhook, which wakes the daemon
  once it is free (a wake already pending is enough, so none is ever waited for).

The process counts the webhooks it answers itself, and ends when its stdin does (the
daemon stopped, however it stopped).

Whoever reaches the port can open connections, with or without the webhook's secret. So
each client is bounded (docs/gitops.md, "The endpoints' limits"): its request's line and
headers must come within HEAD_SECONDS and HEAD_BYTES, the webhook's body within
BODY_SECONDS and webhook.MAX_BODY, the answer must be taken within WRITE_SECONDS; and at
MAX_CONNECTIONS open connections, a new one closes the one open longest. Clients that
never finish a request (slowloris) thus hold a place for seconds, and cannot use up the
process's threads and descriptors: the kubelet's probe, which sends its request at once,
is answered.
"""

from __future__ import annotations

import contextlib
import errno
import io
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import IO, Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    generate_latest,
)

from ..errors import UnetError
from . import webhook
from .history import write_atomic
from .metrics import PORT_FILE, Metrics

START_TIMEOUT = 30.0  # seconds for the process to start and listen
WAKE = b"w"

# What one client may take (Go's net/http has ReadHeaderTimeout for the first, gunicorn
# limits a request's line to 4 KiB and each header to 8 KiB).
MAX_CONNECTIONS = 64  # open at once: probes, scrapes and webhooks need a handful
HEAD_SECONDS = 10.0  # for a request's line and headers, from its connection
HEAD_BYTES = 32 << 10  # for a request's line and headers
BODY_SECONDS = 10.0  # for the webhook's body, from the end of its headers
WRITE_SECONDS = 10.0  # for the answer, from its first byte
LINGER_SECONDS = 0.5  # to read what a refused client still sends (see _linger)
#: Why the endpoints closed a connection before its time (a metric's label).
CLOSED_REASONS = ("limit", "timeout", "too_large")


class Endpoints:
    """The endpoints' process, seen from the daemon."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process, self.port = process, port
        self.wake = threading.Event()  # a verified webhook: run now
        self.lost = threading.Event()  # the process ended: nothing is served any more
        threading.Thread(target=self._relay, name="unet-endpoints", daemon=True).start()

    def publish(self, metrics: Metrics) -> None:
        """What the endpoints serve until the next call."""
        state = {"metrics": generate_latest(metrics.registry).decode(),
                 "ready": metrics.ready, "readiness": metrics.readiness()}
        try:
            _stdin(self.process).write(json.dumps(state).encode() + b"\n")
            _stdin(self.process).flush()
        except (BrokenPipeError, ValueError):
            self.lost.set()

    def close(self) -> None:
        with contextlib.suppress(BrokenPipeError):
            _stdin(self.process).close()
        try:
            self.process.wait(5)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()

    def _relay(self) -> None:
        while os.read(_stdout(self.process), 4096):
            self.wake.set()
        self.lost.set()
        self.wake.set()


#: The folder this module is imported from (its package's parent, however deep).
_IMPORT_ROOT = Path(__file__).parents[__name__.count(".")]


def listen(metrics: Metrics, address: str, port: int, state_dir: Path,
           webhook_secret: bytes | None = None) -> Endpoints:
    """Serve on `port` (0: any free one, written to PORT_FILE in the state dir), and POST
    /hooks/git when a secret is given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(_IMPORT_ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env)
    where = f"[{address}]:{port}" if ":" in address else f"{address}:{port}"
    config = {"address": address, "port": port,
              "secret": webhook_secret.hex() if webhook_secret is not None else None}
    _stdin(process).write(json.dumps(config).encode() + b"\n")
    _stdin(process).flush()
    answer = _first_line(process)
    if not answer.startswith("listening "):
        process.kill()
        process.wait()
        raise UnetError(f"cannot listen on {where}: "
                        f"{answer.removeprefix('error ') or 'the endpoints did not start'}")
    endpoints = Endpoints(process, int(answer.split()[1]))
    endpoints.publish(metrics)
    write_atomic(state_dir / PORT_FILE, f"{endpoints.port}\n")
    return endpoints


def _stdin(process: subprocess.Popen[bytes]) -> IO[bytes]:
    assert process.stdin is not None
    return process.stdin


def _stdout(process: subprocess.Popen[bytes]) -> int:
    """The raw descriptor: read byte by byte, never through a buffer."""
    assert process.stdout is not None
    return process.stdout.fileno()


def _first_line(process: subprocess.Popen[bytes]) -> str:
    line = b""
    while not line.endswith(b"\n"):
        if not select.select([_stdout(process)], [], [], START_TIMEOUT)[0]:
            return ""
        byte = os.read(_stdout(process), 1)
        if not byte:
            return ""
        line += byte
    return line.decode().strip()


# --- the process --------------------------------------------------------------------------


class _Served:
    """What the daemon last published, and the webhooks counted here."""

    def __init__(self, secret: bytes | None) -> None:
        self.secret = secret
        self.metrics, self.ready, self.readiness = "", False, {"ready": False}
        self.registry = CollectorRegistry()
        self.webhooks = Counter("unet_reconcile_webhooks", "Git webhooks received, by result "
                                "(triggered, refused, ping)", ["result"],
                                registry=self.registry)
        self.closed = Counter("unet_reconcile_endpoints_closed_connections",
                              "Connections the endpoints cut short, by reason (limit: for a "
                              "newer one; timeout; too_large: refused with 413 or 431)",
                              ["reason"], registry=self.registry)
        for reason in CLOSED_REASONS:
            self.closed.labels(reason)
        self.open = Gauge("unet_reconcile_endpoints_open_connections",
                          "Connections open to the endpoints", registry=self.registry)

    def cut(self, reason: str) -> None:
        self.closed.labels(reason).inc()

    def update(self, state: dict[str, Any]) -> None:
        self.metrics, self.ready, self.readiness = \
            state["metrics"], state["ready"], state["readiness"]

    def wake(self) -> None:
        try:
            os.write(sys.stdout.fileno(), WAKE)
        except BlockingIOError:
            pass  # the daemon has a wake to read already
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise


class _HeadTooLarge(Exception):
    """A request's line and headers went on beyond HEAD_BYTES."""


class _Reading(io.RawIOBase):
    """A client's request, read from its socket within the time and the bytes that each
    part of it is allowed (`allow`): a client that sends a byte now and then cannot hold
    its connection longer, nor send more. The request's line and headers come first."""

    def __init__(self, sock: socket.socket, cut: Callable[[str], None]) -> None:
        self.sock, self.cut = sock, cut
        self.allow(HEAD_SECONDS, HEAD_BYTES)

    def allow(self, seconds: float, size: int) -> None:
        """The next part: `size` bytes more at most, all within `seconds` from now."""
        self.deadline, self.left = time.monotonic() + seconds, size

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.left <= 0:
            raise _HeadTooLarge  # a body is read to its length, never beyond
        self.sock.settimeout(_time_left(self.deadline, self.cut))
        try:
            count = self.sock.recv_into(buffer, min(len(buffer), self.left))
        except TimeoutError:
            self.cut("timeout")
            raise
        if not count:  # the client left, or was cut for a newer one: no request to serve
            raise ConnectionAbortedError(errno.ECONNABORTED, "the request ended early")
        self.left -= count
        return count


class _Answer(io.BufferedIOBase):
    """The answer to a client, sent within WRITE_SECONDS of its first byte."""

    def __init__(self, sock: socket.socket, cut: Callable[[str], None]) -> None:
        self.sock, self.cut = sock, cut
        self.deadline: float | None = None

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        self.deadline = self.deadline or time.monotonic() + WRITE_SECONDS
        self.sock.settimeout(_time_left(self.deadline, self.cut))
        try:
            self.sock.sendall(data)  # the timeout bounds the whole call
        except TimeoutError:
            self.cut("timeout")
            raise
        return len(data)


def _time_left(deadline: float, cut: Callable[[str], None]) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        cut("timeout")
        raise TimeoutError("the client took too long")
    return left


def _linger(sock: socket.socket) -> None:
    """Read what a client that was refused still sends, for a moment, before its
    connection is closed: closing with bytes unread resets the connection, and the client
    might lose the answer before reading it (Apache's "lingering close")."""
    with contextlib.suppress(OSError):
        sock.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + LINGER_SECONDS
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if not sock.recv(1 << 16):
                return


class _Server(ThreadingHTTPServer):
    """A thread per connection, MAX_CONNECTIONS at most: at the limit, a new connection
    closes the one open longest. A probe sends its request at once and is answered
    within milliseconds, so it is never the oldest one for long."""

    daemon_threads = True
    request_queue_size = 128  # connections the kernel holds until they are accepted

    def __init__(self, address: tuple[str, int], handler: type, served: _Served) -> None:
        self.address_family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
        self.served = served
        self.open: dict[socket.socket, None] = {}  # oldest first
        self.guard = threading.Lock()
        super().__init__(address, handler)
        served.open.set_function(lambda: len(self.open))

    def server_bind(self) -> None:
        if self.address_family == socket.AF_INET6:  # `::` takes IPv4 clients too
            self.socket.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        super().server_bind()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self.guard:
            while len(self.open) >= MAX_CONNECTIONS:
                oldest = next(iter(self.open))
                del self.open[oldest]
                with contextlib.suppress(OSError):  # its thread wakes up and closes it
                    oldest.shutdown(socket.SHUT_RDWR)
                self.served.cut("limit")
            self.open[request] = None
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self.guard:
            self.open.pop(request, None)
        super().shutdown_request(request)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that left or was cut is no error; anything else is, with its
        traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """One client's request to the endpoints, read within its bounds (_Reading), answered
    within WRITE_SECONDS (_Answer)."""

    server: _Server

    @property
    def served(self) -> _Served:
        return self.server.served

    def version_string(self) -> str:
        return "unet"  # not BaseHTTP's and Python's versions, to whoever asks

    def setup(self) -> None:
        self.connection = self.request
        self.reading = _Reading(self.connection, self.served.cut)
        self.rfile = io.BufferedReader(self.reading)
        self.wfile = _Answer(self.connection, self.served.cut)
        # For an answer before the request's line is read (431).
        self.requestline, self.request_version = "", self.protocol_version
        self.refused = False  # answered before the request was read whole

    def handle(self) -> None:
        try:
            self.handle_one_request()
        except _HeadTooLarge:
            self.served.cut("too_large")
            self._refuse(431, f"a request's line and headers take up to "
                              f"{HEAD_BYTES >> 10} KiB\n".encode())

    def finish(self) -> None:
        super().finish()
        if self.refused:
            _linger(self.connection)

    def do_GET(self) -> None:
        path = self.path.split("?", 1)[0]
        if path == "/metrics":
            body = self.served.metrics.encode() + generate_latest(self.served.registry)
            self._send(200, body, CONTENT_TYPE_LATEST)
        elif path == "/healthz":
            self._send(200, b"ok\n", "text/plain")
        elif path == "/readyz":
            body = json.dumps(self.served.readiness).encode() + b"\n"
            self._send(200 if self.served.ready else 503, body, "application/json")
        else:
            self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != webhook.PATH or self.served.secret is None:
            self._refuse(404, b"not found\n")
            return
        text = self.headers.get("Content-Length") or "0"
        length = int(text) if text.isdigit() else -1
        if not 0 <= length <= webhook.MAX_BODY:
            if length > 0:
                self.served.cut("too_large")
            self._refuse(413 if length > 0 else 400, b"a body of up to 1 MiB, with its "
                         b"Content-Length\n")
            return
        self.reading.allow(BODY_SECONDS, length)
        self._webhook(self.rfile.read(length), self.served.secret)

    def _webhook(self, body: bytes, secret: bytes) -> None:
        """A Git push webhook: it wakes the daemon when signed with the secret."""
        if not webhook.verified(secret, body, self.headers.get(webhook.SIGNATURE_HEADER)):
            self.served.webhooks.labels("refused").inc()
            self._send(401, b"signature missing or wrong\n", "text/plain")
        elif self.headers.get("X-GitHub-Event") == "ping":
            self.served.webhooks.labels("ping").inc()
            self._send(200, b"pong\n", "text/plain")
        else:
            self.served.webhooks.labels("triggered").inc()
            self.served.wake()
            self._send(202, b"fetching\n", "text/plain")

    def _refuse(self, status: int, text: bytes) -> None:
        """An answer given before the request was read whole."""
        self.refused = True
        self._send(status, text, "text/plain")

    def _send(self, status: int, body: bytes, kind: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are not worth a log line each


def main() -> None:
    """The endpoints' process: its config on the first line of stdin, then the published
    states, until stdin ends."""
    for sig in (signal.SIGINT, signal.SIGTERM):  # the daemon decides when this ends: when
        signal.signal(sig, signal.SIG_IGN)       # it stops, whatever stopped it
    config = json.loads(sys.stdin.buffer.readline())
    secret = bytes.fromhex(config["secret"]) if config["secret"] is not None else None
    served = _Served(secret)
    try:
        server = _Server((config["address"], config["port"]), _Handler, served)
    except OSError as exc:
        print(f"error {exc.strerror}", flush=True)
        return
    print(f"listening {server.server_address[1]}", flush=True)
    os.set_blocking(sys.stdout.fileno(), False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for line in sys.stdin.buffer:
        served.update(json.loads(line))


if __name__ == "__main__":
    main()
