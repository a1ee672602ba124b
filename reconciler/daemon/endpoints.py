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
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import IO, Any

from ..errors import UnetError
from . import webhook
from .history import write_atomic
from .metrics import PORT_FILE, Metrics

START_TIMEOUT = 30.0  # seconds for the process to start and listen
WAKE = b"w"


class Endpoints:
    """The endpoints' process, seen from the daemon."""

    def __init__(self, process: subprocess.Popen[bytes], port: int) -> None:
        self.process, self.port = process, port
        self.wake = threading.Event()  # a verified webhook: run now
        self.lost = threading.Event()  # the process ended: nothing is served any more
        threading.Thread(target=self._relay, name="unet-endpoints", daemon=True).start()

    def publish(self, metrics: Metrics) -> None:
        """What the endpoints serve until the next call."""
        from prometheus_client import generate_latest

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


def listen(metrics: Metrics, address: str, port: int, state_dir: Path,
           webhook_secret: bytes | None = None) -> Endpoints:
    """Serve on `port` (0: any free one, written to PORT_FILE in the state dir), and POST
    /hooks/git when a secret is given."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, env=env)
    config = {"address": address, "port": port,
              "secret": webhook_secret.hex() if webhook_secret is not None else None}
    _stdin(process).write(json.dumps(config).encode() + b"\n")
    _stdin(process).flush()
    answer = _first_line(process)
    if not answer.startswith("listening "):
        process.kill()
        process.wait()
        raise UnetError(f"cannot listen on {address}:{port}: "
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
        from prometheus_client import CollectorRegistry, Counter

        self.secret = secret
        self.metrics, self.ready, self.readiness = "", False, {"ready": False}
        self.registry = CollectorRegistry()
        self.webhooks = Counter("unet_reconcile_webhooks", "Git webhooks received, by result "
                                "(triggered, refused, ping)", ["result"],
                                registry=self.registry)

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


def _handler(served: _Served) -> type:
    from http.server import BaseHTTPRequestHandler

    from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/metrics":
                body = served.metrics.encode() + generate_latest(served.registry)
                self._send(200, body, CONTENT_TYPE_LATEST)
            elif path == "/healthz":
                self._send(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                body = json.dumps(served.readiness).encode() + b"\n"
                self._send(200 if served.ready else 503, body, "application/json")
            else:
                self._send(404, b"not found: try /metrics, /healthz or /readyz\n", "text/plain")

        def do_POST(self) -> None:
            if self.path.split("?", 1)[0] != webhook.PATH or served.secret is None:
                self._send(404, b"not found\n", "text/plain")
                return
            text = self.headers.get("Content-Length") or "0"
            length = int(text) if text.isdigit() else -1
            if not 0 <= length <= webhook.MAX_BODY:
                self._send(413 if length > 0 else 400, b"a body of up to 1 MiB, with its "
                           b"Content-Length\n", "text/plain")
                return
            body = self.rfile.read(length)
            if not webhook.verified(served.secret, body,
                                    self.headers.get(webhook.SIGNATURE_HEADER)):
                served.webhooks.labels("refused").inc()
                self._send(401, b"signature missing or wrong\n", "text/plain")
            elif self.headers.get("X-GitHub-Event") == "ping":
                served.webhooks.labels("ping").inc()
                self._send(200, b"pong\n", "text/plain")
            else:
                served.webhooks.labels("triggered").inc()
                served.wake()
                self._send(202, b"fetching\n", "text/plain")

        def _send(self, status: int, body: bytes, kind: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass  # requests are not worth a log line each

    return Handler


def main() -> None:
    """The endpoints' process: its config on the first line of stdin, then the published
    states, until stdin ends."""
    from http.server import ThreadingHTTPServer

    for sig in (signal.SIGINT, signal.SIGTERM):  # the daemon decides when this ends: when
        signal.signal(sig, signal.SIG_IGN)       # it stops, whatever stopped it
    config = json.loads(sys.stdin.buffer.readline())
    secret = bytes.fromhex(config["secret"]) if config["secret"] is not None else None
    served = _Served(secret)
    try:
        server = ThreadingHTTPServer((config["address"], config["port"]), _handler(served))
    except OSError as exc:
        print(f"error {exc.strerror}", flush=True)
        return
    server.daemon_threads = True
    print(f"listening {server.server_address[1]}", flush=True)
    os.set_blocking(sys.stdout.fileno(), False)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    for line in sys.stdin.buffer:
        served.update(json.loads(line))


if __name__ == "__main__":
    main()
