"""The endpoints' limits (issue 26): clients that open a request and never finish it, or
send too much, cannot starve `/healthz` or the webhook. Each test starts the endpoints'
process as the daemon does (`listen`), with the limits it ships with, and talks to it over
real sockets.
"""

from __future__ import annotations

import contextlib
import resource
import select
import socket
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from unet.reconciler.daemon.endpoints import (
    BODY_SECONDS,
    HEAD_BYTES,
    HEAD_SECONDS,
    MAX_CONNECTIONS,
    Endpoints,
    listen,
)
from unet.reconciler.daemon.metrics import Metrics

from .test_daemon_webhook import SECRET, _signed
from .test_gitops_daemon import metric, metrics, wait_until

#: A request begun and never finished: its last header never ends.
SLOW_HEAD = b"GET /healthz HTTP/1.1\r\nHost: unet\r\nX-Slow: "
CLOSED = "unet_reconcile_endpoints_closed_connections_total"
OPEN = "unet_reconcile_endpoints_open_connections"


@contextlib.contextmanager
def served(folder: Path, address: str = "127.0.0.1") -> Iterator[Endpoints]:
    endpoints = listen(Metrics(), address, 0, folder, SECRET)
    try:
        yield endpoints
    finally:
        endpoints.close()


@contextlib.contextmanager
def slow_clients(port: int, count: int) -> Iterator[list[socket.socket]]:
    """`count` connections, each with a request begun and never finished (oldest first)."""
    conns: list[socket.socket] = []
    try:
        for _ in range(count):
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(SLOW_HEAD)
            conns.append(conn)
        yield conns
    finally:
        for conn in conns:
            conn.close()


def trickle(conns: list[socket.socket]) -> None:
    """One more byte on each connection still open: a client that sends a little now and
    then is never idle for long, and must still be cut."""
    for conn in conns:
        with contextlib.suppress(OSError):
            conn.send(b"a")


def closed_by_server(conn: socket.socket) -> bool:
    """The server closed the connection without answering anything."""
    if not select.select([conn], [], [], 0)[0]:
        return False
    try:
        return conn.recv(1, socket.MSG_PEEK) == b""
    except ConnectionResetError:
        return True


def healthz_seconds(port: int, host: str = "127.0.0.1") -> float:
    """How long `/healthz` took to answer 200 (it must within the kubelet's 1 s)."""
    started = time.monotonic()
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/healthz", timeout=1) as response:
            assert response.status == 200
    except OSError as exc:
        raise AssertionError(f"/healthz unanswered after {time.monotonic() - started:.1f} "
                             f"s: {exc!r}") from exc
    return time.monotonic() - started


def limit_descriptors(endpoints: Endpoints, count: int) -> None:
    """The endpoints' process may open `count` descriptors at most, as a process under a
    low `ulimit -n`: fewer than the slow clients of a test, more than the limit needs."""
    resource.prlimit(endpoints.process.pid, resource.RLIMIT_NOFILE, (count, count))


def test_twice_the_limit_of_slow_clients_leaves_healthz_answered_within_a_second(
        tmp_path: Path) -> None:
    """Each slow client held a thread and a descriptor for good, until the process had no
    descriptor left to accept the kubelet's probe. At the limit, a new connection closes
    the one open longest: the slow clients that came first are cut, the probe is
    answered."""
    with served(tmp_path) as endpoints:
        limit_descriptors(endpoints, MAX_CONNECTIONS + 16)
        with slow_clients(endpoints.port, 2 * MAX_CONNECTIONS) as slow:
            for _ in range(3):
                assert healthz_seconds(endpoints.port) < 1.0
            first, last = slow[:MAX_CONNECTIONS], slow[-MAX_CONNECTIONS // 2:]
            wait_until("the first slow clients cut", lambda: all(map(closed_by_server, first)))
            assert not any(map(closed_by_server, last)), "the newest connections are kept"
            values = metrics(endpoints.port)
            # One for each slow client beyond the limit, one for the first probe.
            assert metric(values, CLOSED, reason="limit") >= MAX_CONNECTIONS + 1
            assert metric(values, OPEN) <= MAX_CONNECTIONS


def test_slow_heads_and_a_slow_webhook_body_are_cut_in_time_and_free_their_places(
        tmp_path: Path) -> None:
    """A byte now and then keeps no connection open beyond its time: the request's line and
    headers get HEAD_SECONDS from the connection, the webhook's body BODY_SECONDS once its
    headers are in. A cut webhook triggers nothing; the places are free again after."""
    body = b'{"ref": "refs/heads/main", "commits": [%s]}' % b", ".join([b'"0123456789"'] * 20)
    with served(tmp_path) as endpoints, \
            slow_clients(endpoints.port, MAX_CONNECTIONS // 2) as slow, \
            socket.create_connection(("127.0.0.1", endpoints.port), timeout=5) as hook:
        hook.sendall(b"POST /hooks/git HTTP/1.1\r\nHost: unet\r\nX-GitHub-Event: push\r\n"
                     b"X-Hub-Signature-256: " + _signed(body).encode() + b"\r\n"
                     b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
        started = time.monotonic()
        deadline = started + max(HEAD_SECONDS, BODY_SECONDS) + 5
        sent = 0
        while not (closed_by_server(hook) and all(map(closed_by_server, slow))):
            assert time.monotonic() < deadline, "slow clients still open"
            trickle(slow)
            if not closed_by_server(hook) and sent < len(body) - 1:
                hook.send(body[sent:sent + 1])
                sent += 1
            assert healthz_seconds(endpoints.port) < 1.0
            time.sleep(0.2)
        took = time.monotonic() - started
        assert max(HEAD_SECONDS, BODY_SECONDS) - 1 < took, f"cut after {took:.1f} s only"
        assert sent < len(body), "the body was never complete"
        assert not endpoints.wake.is_set(), "a cut webhook triggers nothing"

        assert metric(metrics(endpoints.port), CLOSED, reason="timeout") \
            == MAX_CONNECTIONS // 2 + 1
        wait_until("only the request for the metrics open", lambda: metric(
            metrics(endpoints.port), OPEN) == 1)
        # As many again would have closed the oldest of them, had their places stayed taken.
        with slow_clients(endpoints.port, MAX_CONNECTIONS - 4) as again:
            assert healthz_seconds(endpoints.port) < 1.0
            assert not any(map(closed_by_server, again)), "the places were free again"
            assert metric(metrics(endpoints.port), CLOSED, reason="limit") == 0


def _exchange(port: int, request: bytes) -> bytes:
    """The server's whole answer to `request`, within a second."""
    with socket.create_connection(("127.0.0.1", port), timeout=1) as conn:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            conn.sendall(request)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := conn.recv(65536):
                answer += chunk
        return answer


def test_an_oversized_head_or_body_is_refused_at_once(tmp_path: Path) -> None:
    """HEAD_BYTES for the request's line and headers (the standard library allowed 100
    header lines of 64 KiB each), the webhook's 1 MiB for its body."""
    big = b"".join(b"X-Big-%d: %s\r\n" % (n, b"b" * 4000) for n in range(HEAD_BYTES // 4000 + 1))
    heads = (b"GET /healthz HTTP/1.1\r\nHost: unet\r\n" + big + b"\r\n",
             b"GET /healthz HTTP/1.1\r\nHost: unet\r\nX-Endless: " + b"e" * (4 * HEAD_BYTES),
             b"GET /healthz?" + b"q" * HEAD_BYTES + b" HTTP/1.1\r\n\r\n")
    with served(tmp_path) as endpoints:
        for head in heads:
            answer = _exchange(endpoints.port, head)
            assert answer.startswith(b"HTTP/1.0 431 "), answer[:200]
            assert b"up to 32 KiB" in answer
        answer = _exchange(endpoints.port, b"POST /hooks/git HTTP/1.1\r\nHost: unet\r\n"
                                           b"Content-Length: %d\r\n\r\n" % (2 << 20))
        assert answer.startswith(b"HTTP/1.0 413 "), answer[:200]
        assert healthz_seconds(endpoints.port) < 1.0
        assert metric(metrics(endpoints.port), CLOSED, reason="too_large") == 4


def test_an_ipv6_address_serves_both_families(tmp_path: Path) -> None:
    """`--metrics-address ::` (an IPv6-only or dual-stack cluster's pods): the kubelet may
    probe either address family of the pod."""
    with served(tmp_path, "::") as endpoints:
        assert healthz_seconds(endpoints.port, "[::1]") < 1.0
        assert healthz_seconds(endpoints.port, "127.0.0.1") < 1.0
    with served(tmp_path, "::1") as endpoints:
        assert healthz_seconds(endpoints.port, "[::1]") < 1.0



def test_answers_name_no_versions(tmp_path: Path) -> None:
    """Whoever reaches the port learns nothing of the Python or library versions behind it."""
    with served(tmp_path, "127.0.0.1") as endpoints, urllib.request.urlopen(
            f"http://127.0.0.1:{endpoints.port}/healthz", timeout=1) as response:
        assert response.headers["Server"] == "unet"
