"""OVSDB `transact` requests on a connection of unet's own, for bulk reads and writes.

The OVS library's JSON-RPC client reads 4 KiB at a time and hands every value to
its own parser; a select of a thousand tenants' rows is a reply of 100 MB. Here
replies are read in large blocks and decoded by the standard library's C parser
with the cyclic garbage collector paused (it would scan the new objects again
and again and find nothing). The OVS stream classes carry the bytes, so tcp:, ssl:
and unix: remotes all work; an ssl: connection is made here (`open_stream`), with
the manager's own TLS context (tls.py).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import select
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

import ovs.socket_util
from ovs import poller as ovs_poller
from ovs import stream as ovs_stream

from managers.base import WAIT_NOTICE

from .tls import reason, ssl_members

DATABASE = "OVN_Northbound"
_BLOCK = 1 << 22
#: A successful reply ends so; no OVSDB value is null, so nothing inside one can.
_REPLY_END = b'"error":null}'
#: Shorter buffers ending in "}" may hold a whole message (an error, an echo): try them.
_SMALL = 1 << 20
#: Seconds between echo requests while waiting for news (a lock) on a quiet connection.
_PROBE = 5.0
#: Seconds between looks at a connection that holds a lock and is otherwise idle.
_LISTEN = 1.0
#: Seconds to wait, after a TLS 1.3 handshake, for the server to accept or refuse the
#: client's certificate (it answers at once; a server that sends no tickets costs this).
_SETTLE = 1.0


class ConnectionLost(Exception):
    """The connection failed or closed before the reply came: the request may or may not
    have been carried out."""


class TlsFailed(ConnectionLost):
    """The server was reached, but no TLS connection could be made with it: a certificate
    one side does not trust, or a server that does not answer the handshake."""


class Rpc:
    """One connection; one request at a time. It also holds OVSDB locks: a lock belongs
    to the connection that asked for it, and ends with it.

    While it holds a lock, a thread answers the server's inactivity probes between
    requests (a person reading the plan at the prompt, say): over tcp: and ssl: the
    server drops a connection that stays silent, and the lock with it.
    """

    def __init__(self, remote: str, timeout: float, tls: ssl.SSLContext | None = None) -> None:
        self.remote = remote
        self.timeout = timeout
        self.tls = tls  # for an ssl: remote
        self.stream: Any = None
        self.pending = bytearray()  # received, not yet decoded
        self.next_id = 0
        self.locks: set[str] = set()  # held on this connection now
        self.busy = threading.RLock()  # one user of the stream at a time
        self.listener: threading.Thread | None = None
        self.closed = threading.Event()

    def close(self) -> None:
        """Closed, and its listener ended: nothing of a connection outlives it."""
        self.closed.set()
        with self.busy:
            self._drop()
        listener = self.listener
        if listener is not None and listener is not threading.current_thread():
            listener.join()

    def _drop(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None
        self.locks.clear()

    def transact(self, operations: list[dict[str, Any]]) -> list[Any]:
        """The result of each operation (dicts with "error" for refused ones), plus a
        trailing error when the whole transaction failed."""
        with self.busy:
            result = self._request("transact", [DATABASE, *operations])
        if not isinstance(result, list):
            raise ConnectionLost(f"unexpected reply {str(result)[:200]}")
        return result

    def lock(self, name: str, seconds: float,
             waiting: Callable[[], None] = lambda: None) -> bool:
        """Ask for the lock `name` and wait up to `seconds` for the server to grant it,
        calling `waiting` at once and every WAIT_NOTICE seconds until then. When it is not
        granted in time, the request is withdrawn."""
        with self.busy:
            if self._request("lock", [name]).get("locked"):
                self.locks.add(name)
            granted = self._wait_for_lock(name, time.monotonic() + seconds, waiting)
        if granted and self.listener is None:
            self.listener = threading.Thread(target=self._listen, daemon=True,
                                             name=f"ovsdb-probes {self.remote}")
            self.listener.start()
        return granted

    def _wait_for_lock(self, name: str, deadline: float, waiting: Callable[[], None]) -> bool:
        notice = time.monotonic()
        while name not in self.locks:
            if time.monotonic() >= notice:
                waiting()  # may ask the server who holds it: its reply comes first
                notice = time.monotonic() + WAIT_NOTICE
                continue
            message = self._receive(until=min(deadline, notice))
            if message is not None:
                self._handle(message)
            elif time.monotonic() >= deadline:
                self._request("unlock", [name])  # stop waiting in the server's queue
                return False
        return True

    def unlock(self, name: str) -> None:
        with self.busy:
            self.locks.discard(name)
            self._request("unlock", [name])

    def _listen(self) -> None:
        """Answer probes and take news of the locks while nobody else uses the stream."""
        while not self.closed.wait(_LISTEN):
            if not self.busy.acquire(blocking=False):
                continue  # a request is under way: its own loop answers probes
            try:
                if self.stream is None or not self.locks:
                    self.listener = None
                    return
                while (message := self._receive(until=time.monotonic())) is not None:
                    self._handle(message)
            except ConnectionLost:
                self._drop()  # the next request connects again, without the lock
            finally:
                self.busy.release()
        self.listener = None

    def _request(self, method: str, params: list[Any]) -> Any:
        self.next_id += 1
        reply = self._call({"id": self.next_id, "method": method, "params": params},
                           self.next_id)
        if reply.get("error") is not None:
            raise ConnectionLost(f"the server refused the request: {reply['error']}")
        return reply.get("result")

    def _call(self, request: dict[str, Any], request_id: int) -> dict[str, Any]:
        if self.stream is None:
            self._connect()
        try:
            self._send(json.dumps(request).encode())
            while True:
                message = self._receive()
                assert message is not None
                if message.get("id") == request_id and "method" not in message:
                    return message
                self._handle(message)
        except ConnectionLost:
            self._drop()
            raise

    def _handle(self, message: dict[str, Any]) -> None:
        """A message that is not the reply awaited: a probe, or news about a lock."""
        method, params = message.get("method"), message.get("params") or []
        if method == "echo":  # the server's inactivity probe
            self._send(json.dumps({"id": message.get("id"), "result": params,
                                   "error": None}).encode())
        elif method == "locked" and params:
            self.locks.add(params[0])
        elif method == "stolen" and params:
            self.locks.discard(params[0])

    def _connect(self) -> None:
        self.stream = open_stream(self.remote, self.timeout, self.tls)
        self.pending = bytearray()

    def _send(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self.stream.run()
            sent = self.stream.send(view.tobytes() if len(view) <= _BLOCK
                                    else view[:_BLOCK].tobytes())
            if sent > 0:
                view = view[sent:]
            elif sent == 0 or -sent == errno.EAGAIN:
                self._wait(self.stream.send_wait)
            else:
                raise ConnectionLost(f"sending to {self.remote}: {os.strerror(-sent)}")

    def _receive(self, until: float | None = None) -> dict[str, Any] | None:
        """The next whole JSON message; None once `until` (a monotonic time) has passed.

        Waiting longer than the timeout for a message is a lost connection; while waiting
        `until` a later time, an echo every few seconds keeps the connection talking.
        """
        buffer = self.pending
        deadline = time.monotonic() + self.timeout
        probe = time.monotonic() + _PROBE
        while True:
            if buffer.endswith(b"}") and (len(buffer) < _SMALL or buffer.endswith(_REPLY_END)):
                decoded = _decode(buffer)
                if decoded is not None:
                    message, end = decoded
                    self.pending = buffer[end:]
                    return message
            self.stream.run()
            error, data = self.stream.recv(_BLOCK)
            if error == errno.EAGAIN:
                now = time.monotonic()
                if until is not None and now > until:
                    return None
                if now > deadline:
                    raise ConnectionLost(f"no reply from {self.remote} in {self.timeout:g} s")
                if until is not None and now > probe:
                    self._send(json.dumps({"id": "probe", "method": "echo",
                                           "params": []}).encode())
                    probe = now + _PROBE
                self._wait(self.stream.recv_wait, min(until or deadline, deadline) - now)
            elif error:
                raise ConnectionLost(f"reading from {self.remote}: {os.strerror(error)}")
            elif not data:
                raise ConnectionLost(f"{self.remote} closed the connection")
            else:
                buffer += data
                deadline = time.monotonic() + self.timeout

    def _wait(self, wait_for: Any, seconds: float | None = None) -> None:
        poller = ovs_poller.Poller()
        self.stream.run_wait(poller)
        wait_for(poller)
        poller.timer_wait(max(1, int(min(seconds or self.timeout, _PROBE) * 1000)))
        poller.block()


def _decode(buffer: bytearray) -> tuple[dict[str, Any], int] | None:
    """The first JSON object of `buffer` and where it ends; None while it is incomplete."""
    text = buffer.decode()
    try:
        message, end = json.JSONDecoder().raw_decode(text)
    except ValueError:
        return None
    if not isinstance(message, dict):
        raise ConnectionLost(f"unexpected message {text[:200]}")
    return message, len(buffer) if end == len(text) else len(text[:end].encode())


# --- opening a connection -------------------------------------------------------------------


def open_stream(remote: str, timeout: float, tls: ssl.SSLContext | None = None) -> Any:
    """A connected OVS stream to one remote (connecting, and the TLS handshake, each within
    `timeout` seconds). An ssl: remote is
    connected with `tls`, and only once the server has answered a first request over it:
    that is when a server that refuses the client's certificate says so (with TLS 1.3, after
    the client's side of the handshake is done). Raises ConnectionLost, TlsFailed when the
    server was reached but TLS failed."""
    if remote.startswith("ssl:"):
        if tls is None:
            raise TlsFailed(f"{remote} needs a TLS client key, certificate and CA certificate")
        return _open_tls(remote, timeout, tls)
    error, stream = ovs_stream.Stream.open_block(ovs_stream.Stream.open(remote),
                                                 int(timeout * 1000))
    if error:
        raise ConnectionLost(f"cannot reach {remote}: {os.strerror(error)}")
    return stream


def check_tls(remote: str, tls: ssl.SSLContext, timeout: float) -> None:
    """Raise TlsFailed when TLS fails with an ssl: member of `remote` that can be reached;
    done with the first one that works. (Members that cannot be reached are left to the
    caller, which may find another.)"""
    for member in ssl_members(remote):
        try:
            stream = open_stream(member, timeout, tls)
        except TlsFailed:
            raise
        except ConnectionLost:
            continue
        stream.close()
        return


def _open_tls(remote: str, timeout: float, tls: ssl.SSLContext) -> Any:
    host, port = ovs.socket_util.inet_parse_active(remote.split(":", 1)[1], 0, raises=False)
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConnectionLost(f"cannot reach {remote}: {why}") from exc
    sock = tls.wrap_socket(raw, do_handshake_on_connect=False)
    try:
        _handshake(sock, remote, timeout)
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return ovs_stream.SSLStream(sock, remote, 0)


def _handshake(sock: ssl.SSLSocket, remote: str, timeout: float) -> None:
    """The TLS handshake, and an echo request answered, within `timeout` seconds.

    With TLS 1.3 the server checks the client's certificate after the client's side of the
    handshake is done, and answers with session tickets or an alert saying why it refuses.
    That answer is read before anything is sent: a request the server never reads would
    make its kernel reset the connection, and the alert could be lost with it.
    """
    deadline = time.monotonic() + timeout
    failed = f"TLS handshake with {remote} failed"
    refused = "it may not accept this client's certificate: check sslCert and sslKey, and " \
              "that the server trusts their CA"
    received = bytearray()

    def read() -> None:
        data = sock.recv(_BLOCK)
        if not data:
            raise TlsFailed(f"{failed}: the server closed the connection ({refused})")
        received.extend(data)

    try:
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.do_handshake()
        if sock.version() == "TLSv1.3" and select.select(
                [sock], [], [], min(_SETTLE, max(0.0, deadline - time.monotonic())))[0]:
            sock.setblocking(False)
            with contextlib.suppress(ssl.SSLWantReadError):  # tickets only
                read()
        sock.settimeout(max(0.001, deadline - time.monotonic()))
        sock.sendall(b'{"id":"tls","method":"echo","params":[]}')
        while _decode(received) is None:
            sock.settimeout(max(0.001, deadline - time.monotonic()))
            read()
    except ssl.SSLCertVerificationError as exc:
        raise TlsFailed(f"{failed}: certificate verify failed ({reason(exc)}): the server's "
                        "certificate is not trusted here (check sslCaCert)") from exc
    except (ssl.SSLEOFError, ssl.SSLZeroReturnError) as exc:
        raise TlsFailed(f"{failed}: the server closed the connection ({refused})") from exc
    except ssl.SSLError as exc:
        why = reason(exc)
        if "alert" in why and ("certificate" in why or "unknown ca" in why):  # the server's
            raise TlsFailed(f"{failed}: the server refused this client's certificate ({why}); "
                            "check sslCert and sslKey, and that the server trusts their CA"
                            ) from exc
        raise TlsFailed(f"{failed}: {why}") from exc
    except TimeoutError as exc:
        raise TlsFailed(f"TLS handshake with {remote} timed out after {timeout:g} s") from exc
    except OSError as exc:
        raise TlsFailed(f"{failed}: {exc.strerror or exc} ({refused})") from exc
