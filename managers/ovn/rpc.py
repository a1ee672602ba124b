"""OVSDB `transact` requests on a connection of unet's own, for bulk reads and writes.

The OVS library's JSON-RPC client reads 4 KiB at a time and hands every value to
its own parser; a select of a thousand tenants' rows is a reply of 100 MB. Here
replies are read in large blocks and decoded by the standard library's C parser
with the cyclic garbage collector paused (it would scan the new objects again
and again and find nothing). The OVS stream classes still make the connection,
so tcp:, ssl: and unix: remotes all work.
"""

from __future__ import annotations

import errno
import json
import os
import time
from typing import Any

from ovs import poller as ovs_poller
from ovs import stream as ovs_stream

from reconciler.heap import paused_collection

DATABASE = "OVN_Northbound"
_BLOCK = 1 << 22
#: A successful reply ends so; no OVSDB value is null, so nothing inside one can.
_REPLY_END = b'"error":null}'
#: Shorter buffers ending in "}" may hold a whole message (an error, an echo): try them.
_SMALL = 1 << 20


class ConnectionLost(Exception):
    """The connection failed or closed before the reply came: the request may or may not
    have been carried out."""


class Rpc:
    """One connection; one request at a time."""

    def __init__(self, remote: str, timeout: float) -> None:
        self.remote = remote
        self.timeout = timeout
        self.stream: Any = None
        self.pending = bytearray()  # received, not yet decoded
        self.next_id = 0

    def close(self) -> None:
        if self.stream is not None:
            self.stream.close()
            self.stream = None

    def transact(self, operations: list[dict[str, Any]]) -> list[Any]:
        """The result of each operation (dicts with "error" for refused ones), plus a
        trailing error when the whole transaction failed."""
        self.next_id += 1
        reply = self._call({"id": self.next_id, "method": "transact",
                            "params": [DATABASE, *operations]}, self.next_id)
        if reply.get("error") is not None:
            raise ConnectionLost(f"the server refused the request: {reply['error']}")
        result = reply.get("result")
        if not isinstance(result, list):
            raise ConnectionLost(f"unexpected reply {str(reply)[:200]}")
        return result

    def _call(self, request: dict[str, Any], request_id: int) -> dict[str, Any]:
        if self.stream is None:
            self._connect()
        try:
            self._send(json.dumps(request).encode())
            while True:
                message = self._receive()
                if message.get("method") == "echo":  # the server's inactivity probe
                    self._send(json.dumps({"id": message.get("id"), "result":
                                           message.get("params", []), "error": None}).encode())
                elif message.get("id") == request_id:
                    return message
        except ConnectionLost:
            self.close()
            raise

    def _connect(self) -> None:
        error, stream = ovs_stream.Stream.open_block(ovs_stream.Stream.open(self.remote),
                                                     int(self.timeout * 1000))
        if error:
            raise ConnectionLost(f"cannot reach {self.remote}: {os.strerror(error)}")
        self.stream = stream
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

    def _receive(self) -> dict[str, Any]:
        """The next whole JSON message."""
        buffer = self.pending
        deadline = time.monotonic() + self.timeout
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
                if time.monotonic() > deadline:
                    raise ConnectionLost(f"no reply from {self.remote} in {self.timeout:g} s")
                self._wait(self.stream.recv_wait)
            elif error:
                raise ConnectionLost(f"reading from {self.remote}: {os.strerror(error)}")
            elif not data:
                raise ConnectionLost(f"{self.remote} closed the connection")
            else:
                buffer += data
                deadline = time.monotonic() + self.timeout

    def _wait(self, wait_for: Any) -> None:
        poller = ovs_poller.Poller()
        self.stream.run_wait(poller)
        wait_for(poller)
        poller.timer_wait(int(self.timeout * 1000))
        poller.block()


def _decode(buffer: bytearray) -> tuple[dict[str, Any], int] | None:
    """The first JSON object of `buffer` and where it ends; None while it is incomplete."""
    text = buffer.decode()
    with paused_collection(transient=True):
        try:
            message, end = json.JSONDecoder().raw_decode(text)
        except ValueError:
            return None
    if not isinstance(message, dict):
        raise ConnectionLost(f"unexpected message {text[:200]}")
    return message, len(buffer) if end == len(text) else len(text[:end].encode())
