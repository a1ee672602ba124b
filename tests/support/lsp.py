"""A small Language Server Protocol client over stdio, to drive a real language server.

It speaks JSON-RPC with Content-Length framing, answers the server's own requests
(`workspace/configuration` from the settings it was given, anything else with null)
and keeps the latest `textDocument/publishDiagnostics` of every document.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import IO, Any


class LanguageServer:
    def __init__(self, command: list[str], root: Path, settings: dict[str, Any],
                 log: Path) -> None:
        self.settings = settings
        self.log = log
        self.diagnostics: dict[str, list[dict[str, Any]]] = {}
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._next_id = 0
        self._versions: dict[str, int] = {}
        with log.open("wb") as stderr:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE,
                                            stdout=subprocess.PIPE, stderr=stderr)
        assert self.process.stdout is not None
        threading.Thread(target=self._read, args=(self.process.stdout,), daemon=True).start()
        self.request("initialize", {
            "processId": None, "rootUri": root.as_uri(),
            "workspaceFolders": [{"uri": root.as_uri(), "name": root.name}],
            "capabilities": {"workspace": {"configuration": True},
                             "textDocument": {"publishDiagnostics": {}}},
        })
        self.notify("initialized", {})
        self.notify("workspace/didChangeConfiguration", {"settings": settings})

    def open(self, path: Path) -> str:
        """Open the file as an editor does (nothing when it is open already)."""
        uri = path.as_uri()
        if uri in self._versions:
            return uri
        self._versions[uri] = 1
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": uri, "languageId": "yaml", "version": 1, "text": path.read_text()}})
        return uri

    def change(self, uri: str, text: str) -> None:
        """Replace the text of an open document, as typing in the editor does."""
        self._versions[uri] += 1
        self.diagnostics.pop(uri, None)
        self.notify("textDocument/didChange", {
            "textDocument": {"uri": uri, "version": self._versions[uri]},
            "contentChanges": [{"text": text}]})

    def diagnostics_of(self, uris: list[str], timeout: float = 60.0,
                       quiet: float = 0.5) -> dict[str, list[dict[str, Any]]]:
        """The latest diagnostics of each document, once every one has some and the
        server has published nothing new for `quiet` seconds."""
        deadline = time.monotonic() + timeout
        last = time.monotonic()
        while time.monotonic() < deadline:
            if all(uri in self.diagnostics for uri in uris) and \
                    time.monotonic() - last >= quiet:
                return {uri: self.diagnostics[uri] for uri in uris}
            if self._receive(min(quiet, 0.2)) == "textDocument/publishDiagnostics":
                last = time.monotonic()
        missing = [uri for uri in uris if uri not in self.diagnostics]
        raise AssertionError(f"no diagnostics within {timeout}s for {missing}; server log:\n"
                             + self._log_tail())

    def request(self, method: str, params: Any, timeout: float = 60.0) -> Any:
        self._next_id += 1
        ident = self._next_id
        self._send({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            message = self._next(0.2)
            if message is not None and message.get("id") == ident and "method" not in message:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result")
            if message is not None:
                self._handle(message)
        raise AssertionError(f"{method}: no answer within {timeout}s; server log:\n"
                             + self._log_tail())

    def notify(self, method: str, params: Any) -> None:
        self._send({"jsonrpc": "2.0", "method": method, "params": params})

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self.request("shutdown", None, timeout=10)
                self.notify("exit", None)
                self.process.wait(timeout=10)
        except (AssertionError, OSError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()

    def _receive(self, timeout: float) -> str | None:
        message = self._next(timeout)
        return None if message is None else self._handle(message)

    def _next(self, timeout: float) -> dict[str, Any] | None:
        try:
            message = self._inbox.get(timeout=timeout)
        except queue.Empty:
            return None
        if message is None:
            raise AssertionError("the language server exited; its log:\n" + self._log_tail())
        return message

    def _log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def _handle(self, message: dict[str, Any]) -> str | None:
        method = message.get("method")
        if method == "textDocument/publishDiagnostics":
            self.diagnostics[message["params"]["uri"]] = message["params"]["diagnostics"]
        elif method is not None and "id" in message:  # the server asks: answer
            result: Any = None
            if method == "workspace/configuration":
                result = [self.settings.get(item.get("section"), {})
                          for item in message["params"]["items"]]
            self._send({"jsonrpc": "2.0", "id": message["id"], "result": result})
        return method if isinstance(method, str) else None

    def _send(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        assert self.process.stdin is not None
        self.process.stdin.write(b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        self.process.stdin.flush()

    def _read(self, stream: IO[bytes]) -> None:
        while True:
            length = None
            while (line := stream.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode("ascii").partition(":")
                if name.strip().lower() == "content-length":
                    length = int(value)
            if not line or length is None:
                self._inbox.put(None)
                return
            self._inbox.put(json.loads(stream.read(length)))
