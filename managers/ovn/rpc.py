"""OVSDB `transact` requests on a connection of unet's own, for bulk reads and writes.

The OVS library's JSON-RPC client reads 4 KiB at a time and hands every value to
its own parser; a select of a thousand tenants' rows is a reply of 100 MB. Here
replies are read in large blocks and decoded by the standard library's C parser
with the cyclic garbage collector paused (it would scan the new objects again
and again and find nothing). The OVS stream classes carry the bytes, so tcp:, ssl:
and unix: remotes all work; an ssl: connection is made here (`open_stream`), with
the manager's own TLS context (tls.py).

Given several remotes (a cluster), the connection goes to the cluster's leader: a
follower's OVSDB locks are its own (another client can hold the same lock on another
member at the same time) and its reads may be stale. Every wait is bounded (`Timeouts`).
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
from dataclasses import dataclass
from typing import Any

from ovs import poller as ovs_poller
from ovs import stream as ovs_stream

from unet.managers.sdk import WAIT_NOTICE

from .tls import NAME_MISMATCH, TlsClient, host_and_port, reason

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


class Unreachable(ConnectionLost):
    """No connection could be made: no server answered, or none was the leader in time."""


@dataclass(frozen=True)
class Timeouts:
    """How long to wait, in seconds (the ovn config's `…TimeoutSeconds`)."""

    connect: float = 10.0  # to connect to one server and have its first answer
    leader: float = 30.0  # for a cluster to have a leader (during an election, say)
    transaction: float = 60.0  # for the whole reply to one request


class Rpc:
    """One connection; one request at a time. It also holds OVSDB locks: a lock belongs
    to the connection that asked for it, and ends with it.

    While it holds a lock, a thread answers the server's inactivity probes between
    requests (a person reading the plan at the prompt, say): over tcp: and ssl: the
    server drops a connection that stays silent, and the lock with it.
    """

    def __init__(self, remote: str, timeouts: Timeouts, tls: TlsClient | None = None) -> None:
        self.remotes = [part.strip() for part in remote.split(",")]
        self.remote = self.remotes[0]  # the one connected to (or last tried)
        self.timeouts = timeouts
        self.heard = 0.0  # when the server last sent anything (monotonic)
        self.tls = tls  # for ssl: remotes
        self.stream: Any = None
        self.pending = bytearray()  # received, not yet decoded
        self.next_id = 0
        self.locks: set[str] = set()  # held on this connection now
        self.busy = threading.RLock()  # one user of the stream at a time
        self.listener: threading.Thread | None = None
        self.closed = threading.Event()
        # Hears monitor updates (method, params), in the thread that reads them.
        self.on_update: Callable[[str, list[Any]], None] | None = None
        self.rows: Callable[[dict[str, Any]], Any] | None = None  # see transact

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

    def transact(self, operations: list[dict[str, Any]],
                 rows: Callable[[dict[str, Any]], Any] | None = None) -> list[Any]:
        """The result of each operation (dicts with "error" for refused ones), plus a
        trailing error when the whole transaction failed. `rows` turns each JSON object of
        the reply into what it returns as it is decoded (json's object_hook): a reply of
        every row is then never held whole as OVSDB's JSON."""
        with self.busy:
            connection, self.rows = self.rows, rows  # the connection's own (a watch's) after
            try:
                result = self._request("transact", [DATABASE, *operations])
            finally:
                self.rows = connection
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

    def schema(self) -> Any:
        """The database's schema, as JSON."""
        with self.busy:
            return self._request("get_schema", [DATABASE])

    # -- monitors (a replica of rows: watch.py) ---------------------------------------------
    def monitor_cond_since(self, monitor: str, requests: dict[str, Any], last_txn: str
                           ) -> tuple[bool, str, dict[str, Any]]:
        """Start the conditional monitor `monitor` (`requests`: table → [{"columns", "where"}])
        from the transaction `last_txn`: whether the server still had the history since
        then, the id of the last transaction, and the rows as table-updates2 (what changed
        since `last_txn` when it had the history, every row otherwise). Its updates come
        to `on_update` as "update3"."""
        with self.busy:
            found, last, updates = self._request("monitor_cond_since",
                                                 [DATABASE, monitor, requests, last_txn])
        return found, last, updates

    def monitor_cond(self, monitor: str, requests: dict[str, Any]) -> dict[str, Any]:
        """Start the conditional monitor `monitor`: every row it selects, as table-updates2.
        Its updates come to `on_update` as "update2"."""
        with self.busy:
            updates: dict[str, Any] = self._request("monitor_cond", [DATABASE, monitor, requests])
        return updates

    def echo(self) -> None:
        """An echo request, answered: ovsdb-server sends a connection's pending messages
        before any reply, so every update it sent before is handled by then."""
        with self.busy:
            self._request("echo", [])

    def listen(self, seconds: float, quiet: float) -> bool:
        """Handle the next message the server sends within `seconds` (updates go to
        `on_update`), probing first a connection that has been silent for `quiet` seconds;
        whether one came. Raises ConnectionLost."""
        with self.busy:
            if time.monotonic() - self.heard > quiet:
                self._send(b'{"id":"probe","method":"echo","params":[]}')
            message = self._receive(until=time.monotonic() + seconds)
            if message is not None:
                self._handle(message)
        return message is not None

    def _request(self, method: str, params: list[Any]) -> Any:
        if self.stream is None:
            self._connect()
        seconds = self.timeouts.transaction
        reply = self._call(method, params, seconds, f"no reply from {self.remote} within "
                           f"{seconds:g} s to a {method} request (transactionTimeoutSeconds)")
        if reply.get("error") is not None:
            raise ConnectionLost(f"{self.remote} refused the request: {reply['error']}")
        return reply.get("result")

    def _call(self, method: str, params: list[Any], seconds: float,
              silence: str) -> dict[str, Any]:
        """The reply to one request, within `seconds` (else ConnectionLost(`silence`))."""
        self.next_id += 1
        request_id = self.next_id
        deadline = time.monotonic() + seconds
        try:
            self._send(json.dumps({"id": request_id, "method": method,
                                   "params": params}).encode(), deadline)
            while True:
                message = self._receive(deadline=deadline)
                if message is None:
                    raise ConnectionLost(silence)
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
        elif method in ("update", "update2", "update3") and self.on_update is not None:
            self.on_update(method, params)

    def _connect(self) -> None:
        """A connection to the cluster's leader (a standalone server is its own), trying the
        remotes in turn: up to the leader timeout while some server answers, at once when
        none can be reached."""
        deadline = time.monotonic() + self.timeouts.leader
        while True:
            problems, answered = [], False
            for remote in self.remotes:
                try:
                    self._open(remote)
                    problem = self._not_leader()
                except TlsFailed:
                    raise  # the certificates, not the server's health: no other member helps
                except ConnectionLost as exc:
                    problems.append(str(exc))
                    continue
                if problem is None:
                    return
                self._drop()
                problems.append(f"{remote} {problem}")
                answered = True
            if not answered:
                raise Unreachable("; ".join(problems))
            if time.monotonic() >= deadline:
                raise Unreachable(f"no leader among {', '.join(self.remotes)} within "
                                     f"{self.timeouts.leader:g} s (leaderTimeoutSeconds): "
                                     + "; ".join(problems))
            time.sleep(0.2)

    def _open(self, remote: str) -> None:
        self.remote = remote
        self.stream = open_stream(remote, self.timeouts.connect, self.tls)
        self.pending = bytearray()
        self.heard = time.monotonic()

    def _not_leader(self) -> str | None:
        """Why the server just connected to will not do (None: it will), from its _Server
        database; its first answer is due within the connect timeout."""
        reply = self._call("transact", ["_Server", {
            "op": "select", "table": "Database", "where": [["name", "==", DATABASE]],
            "columns": ["model", "connected", "leader"]}], self.timeouts.connect,
            f"{self.remote} accepted the connection but did not answer within "
            f"{self.timeouts.connect:g} s (connectTimeoutSeconds)")
        result = reply.get("result")
        if reply.get("error") is not None or not isinstance(result, list) or not result \
                or "rows" not in result[0]:
            return None  # no _Server database: an old standalone server
        if not result[0]["rows"]:
            return f"has no {DATABASE} database"
        row = result[0]["rows"][0]
        if row.get("model") != "clustered":
            return None
        if not row.get("connected"):
            return "is not connected to its cluster"
        return None if row.get("leader") else "is not the cluster's leader"

    def _send(self, data: bytes, deadline: float | None = None) -> None:
        view = memoryview(data)
        deadline = deadline or time.monotonic() + self.timeouts.transaction
        while view:
            self.stream.run()
            sent = self.stream.send(view.tobytes() if len(view) <= _BLOCK
                                    else view[:_BLOCK].tobytes())
            if sent > 0:
                view = view[sent:]
            elif sent == 0 or -sent == errno.EAGAIN:
                if time.monotonic() > deadline:
                    raise ConnectionLost(f"{self.remote} took nothing more for "
                                         f"{self.timeouts.transaction:g} s "
                                         "(transactionTimeoutSeconds)")
                self._wait(self.stream.send_wait, deadline - time.monotonic())
            else:
                raise ConnectionLost(f"sending to {self.remote}: {os.strerror(-sent)}")

    def _receive(self, until: float | None = None,
                 deadline: float | None = None) -> dict[str, Any] | None:
        """The next whole JSON message; None once `until` or `deadline` (monotonic times)
        has passed.

        While waiting `until` a time (for news, such as a lock), an echo every few seconds
        keeps the connection talking, and a server that has sent nothing for the
        transaction timeout is a lost connection.
        """
        buffer = self.pending
        every = min(_PROBE, self.timeouts.transaction / 3)  # probes answered well in time
        probe = time.monotonic() + every
        while True:
            if buffer.endswith(b"}") and (len(buffer) < _SMALL or buffer.endswith(_REPLY_END)):
                message = _take_message(buffer, self.rows)
                if message is not None:
                    return message
            self.stream.run()
            error, data = self.stream.recv(_BLOCK)
            if error == errno.EAGAIN:
                now = time.monotonic()
                if (until is not None and now > until) or (deadline is not None
                                                           and now > deadline):
                    return None
                if until is not None and now > self.heard + self.timeouts.transaction:
                    raise ConnectionLost(f"{self.remote} answered nothing for "
                                         f"{self.timeouts.transaction:g} s "
                                         "(transactionTimeoutSeconds)")
                if until is not None and now > probe:
                    self._send(json.dumps({"id": "probe", "method": "echo",
                                           "params": []}).encode())
                    probe = now + every
                wake = [t for t in (until, deadline, probe if until else None) if t]
                self._wait(self.stream.recv_wait, min(wake, default=now + every) - now)
            elif error:
                raise ConnectionLost(f"reading from {self.remote}: {os.strerror(error)}")
            elif not data:
                raise ConnectionLost(f"{self.remote} closed the connection")
            else:
                buffer += data
                self.heard = time.monotonic()

    def _wait(self, wait_for: Any, seconds: float) -> None:
        poller = ovs_poller.Poller()
        self.stream.run_wait(poller)
        wait_for(poller)
        poller.timer_wait(max(1, int(min(seconds, _PROBE) * 1000)))
        poller.block()


def _take_message(buffer: bytearray, rows: Callable[[dict[str, Any]], Any] | None = None
                  ) -> dict[str, Any] | None:
    """The first JSON object of `buffer`, taken out of it; None while it is incomplete (the
    buffer left as it was). `rows`: json's object_hook (see Rpc.transact).

    The buffer is emptied before the text is decoded: a reply of every row (100 MB of
    JSON at 1,000 tenants) was otherwise held as bytes, as text and as rows at once."""
    try:
        text = buffer.decode()
    except UnicodeDecodeError:  # ends inside a character: more is coming
        return None
    buffer.clear()
    try:
        message, end = json.JSONDecoder(object_hook=rows).raw_decode(text)
    except ValueError:
        buffer += text.encode()
        return None
    if end < len(text):
        buffer += text[end:].encode()
    if not isinstance(message, dict):
        raise ConnectionLost(f"unexpected message {text[:200]}")
    return message


# --- opening a connection -------------------------------------------------------------------


def open_stream(remote: str, timeout: float, tls: TlsClient | None = None) -> Any:
    """A connected OVS stream to one remote (connecting, and the TLS handshake, each within
    `timeout` seconds). An ssl: remote is connected with `tls`, to a server whose
    certificate names the remote's host (or serverName), and only once the server has
    answered a first request over it:
    that is when a server that refuses the client's certificate says so (with TLS 1.3, after
    the client's side of the handshake is done). Raises ConnectionLost, TlsFailed when the
    server was reached but TLS failed."""
    if remote.startswith("ssl:"):
        if tls is None:
            raise TlsFailed(f"{remote} needs a TLS client key, certificate and CA certificate")
        return _open_tls(remote, timeout, tls)
    if remote.startswith("tcp:"):
        sock = _connect_tcp(remote, timeout)
        sock.setblocking(False)
        return ovs_stream.TCPStream(sock, remote, 0)
    error, stream = ovs_stream.Stream.open_block(ovs_stream.Stream.open(remote),
                                                 int(timeout * 1000))
    if error:
        raise ConnectionLost(f"cannot reach {remote}: {os.strerror(error)}")
    return stream


def _connect_tcp(remote: str, timeout: float) -> socket.socket:
    """A TCP connection to a `tcp:` or `ssl:` remote. A host name is resolved by the system,
    as for ovn-nbctl, and each of its addresses tried in turn (the OVS library resolves
    names only with the Python `unbound` module, and said 'Connection refused' without)."""
    host, port = host_and_port(remote)
    try:
        return socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        why = "timed out" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise ConnectionLost(f"cannot reach {remote}: {why}") from exc


def _open_tls(remote: str, timeout: float, tls: TlsClient) -> Any:
    host, _port = host_and_port(remote)
    raw = _connect_tcp(remote, timeout)
    address = raw.getpeername()[:2]
    sock = tls.context.wrap_socket(raw, server_hostname=tls.expected_name(host),
                                   do_handshake_on_connect=False)
    try:
        _handshake(sock, remote, timeout)
    except ssl.SSLCertVerificationError as exc:  # its name (_handshake says the rest)
        sock.close()
        presented = tls.presented_names(address, timeout)
        raise TlsFailed(f"TLS handshake with {remote} failed: "
                        f"{tls.wrong_name(host, presented)}") from exc
    except BaseException:
        sock.close()
        raise
    sock.setblocking(False)
    return ovs_stream.SSLStream(sock, remote, 0)


_REFUSED = ("it may not accept this client's certificate: check sslCert and sslKey, and "
            "that the server trusts their CA")


def _handshake(sock: ssl.SSLSocket, remote: str, timeout: float) -> None:
    """The TLS handshake, and an echo request answered, within `timeout` seconds.

    With TLS 1.3 the server checks the client's certificate after the client's side of the
    handshake is done, and answers with session tickets or an alert saying why it refuses.
    That answer is read before anything is sent: a request the server never reads would
    make its kernel reset the connection, and the alert could be lost with it.
    """
    deadline = time.monotonic() + timeout
    received = bytearray()

    def left() -> float:
        return max(0.001, deadline - time.monotonic())

    def read() -> None:
        data = sock.recv(_BLOCK)
        if not data:
            raise TlsFailed(f"TLS handshake with {remote} failed: the server closed the "
                            f"connection ({_REFUSED})")
        received.extend(data)

    try:
        sock.settimeout(left())
        sock.do_handshake()
        if sock.version() == "TLSv1.3" and select.select([sock], [], [], min(_SETTLE, left()))[0]:
            sock.setblocking(False)
            with contextlib.suppress(ssl.SSLWantReadError):  # tickets only
                read()
        sock.settimeout(left())
        sock.sendall(b'{"id":"tls","method":"echo","params":[]}')
        while _take_message(received) is None:
            sock.settimeout(left())
            read()
    except ssl.SSLCertVerificationError as exc:
        if exc.verify_code in NAME_MISMATCH:
            raise  # _open_tls says which names the certificate holds
        raise _handshake_failed(exc, remote, timeout) from exc
    except OSError as exc:
        raise _handshake_failed(exc, remote, timeout) from exc


def _handshake_failed(exc: OSError, remote: str, timeout: float) -> TlsFailed:
    """Why a handshake failed, in the words of what to check."""
    failed = f"TLS handshake with {remote} failed"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return TlsFailed(f"{failed}: certificate verify failed ({reason(exc)}): the server's "
                         "certificate is not trusted here (check sslCaCert)")
    if isinstance(exc, ssl.SSLEOFError | ssl.SSLZeroReturnError):
        return TlsFailed(f"{failed}: the server closed the connection ({_REFUSED})")
    if isinstance(exc, ssl.SSLError):
        why = reason(exc)
        if "alert" in why and ("certificate" in why or "unknown ca" in why):  # the server's
            return TlsFailed(f"{failed}: the server refused this client's certificate ({why}); "
                             "check sslCert and sslKey, and that the server trusts their CA")
        return TlsFailed(f"{failed}: {why}")
    if isinstance(exc, TimeoutError):
        return TlsFailed(f"TLS handshake with {remote} timed out after {timeout:g} s "
                         "(connectTimeoutSeconds)")
    return TlsFailed(f"{failed}: {exc.strerror or exc} ({_REFUSED})")
