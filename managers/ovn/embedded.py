"""The embedded OVN Northbound database: `northbound: embedded`, the default.

unet keeps a local ovsdb-server with the OVN_Northbound schema under
`.unet/ovn/` of the network repo, on a unix socket (never a TCP port,
which a stale server could silently hold). The database file stays between
runs. unet stops the server only when unet started it and no other unet
process is using it; a server someone else started is never stopped.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from unet.managers.sdk import UnetError, process_alive, state_folder

SCHEMA_CANDIDATES = ("/usr/share/ovn/ovn-nb.ovsschema", "/usr/local/share/ovn/ovn-nb.ovsschema")
PACKAGES = "ovn-central ovn-common (Debian/Ubuntu: apt-get install ovn-central ovn-common)"


class EmbeddedError(UnetError):
    """The embedded database cannot be started; the message says what to install or fix."""


def find_tools() -> tuple[str, str, str]:
    """ovsdb-server, ovsdb-tool and the Northbound schema, or a message naming the packages."""
    server, tool = shutil.which("ovsdb-server"), shutil.which("ovsdb-tool")
    schema = next((p for p in SCHEMA_CANDIDATES if Path(p).is_file()), None)
    missing = [name for name, found in (("ovsdb-server", server), ("ovsdb-tool", tool),
                                        ("the OVN Northbound schema", schema)) if not found]
    if missing:
        raise EmbeddedError(f"the embedded OVN database needs {', '.join(missing)}; "
                            f"install {PACKAGES}")
    return server, tool, schema  # type: ignore[return-value]


class EmbeddedNorthbound:
    """A local Northbound database server; use as a context manager."""

    def __init__(self, workdir: Path) -> None:
        self.dir = (workdir / ".unet" / "ovn").resolve()
        self.db = self.dir / "ovnnb.db"
        self.socket = self.dir / "nb.sock"
        self.pidfile = self.dir / "nb.pid"
        self.marker = self.dir / "started-by-unet"
        self._users: int | None = None  # fd of our shared lock on `users.lock`

    @property
    def remote(self) -> str:
        return f"unix:{self.socket}"

    def __enter__(self) -> EmbeddedNorthbound:
        server, tool, schema = find_tools()
        state_folder(self.dir)
        with self._exclusive("start.lock"):
            self._users = os.open(self.dir / "users.lock", os.O_CREAT | os.O_RDWR, 0o600)
            fcntl.flock(self._users, fcntl.LOCK_SH)
            if self.running():
                pass
            elif self.answering():  # someone else's server, without our pidfile: use it
                self.marker.unlink(missing_ok=True)
            else:
                self._create_or_upgrade(tool, schema)
                self._start(server)
        return self

    def __exit__(self, *exc: object) -> None:
        with self._exclusive("start.lock"):
            assert self._users is not None
            fcntl.flock(self._users, fcntl.LOCK_UN)
            try:
                fcntl.flock(self._users, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # another unet process still uses the server
            finally:
                os.close(self._users)
                self._users = None
            if self.marker.exists():
                self.stop()

    def _exclusive(self, name: str) -> _FileLock:
        return _FileLock(self.dir / name)

    def pid(self) -> int | None:
        try:
            return int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None

    def running(self) -> bool:
        pid = self.pid()
        return pid is not None and process_alive(pid) and self.socket.exists()

    def answering(self) -> bool:
        """A server accepts connections at the socket (whoever started it)."""
        with socket.socket(socket.AF_UNIX) as probe:
            probe.settimeout(2)
            try:
                probe.connect(str(self.socket))
            except OSError:
                return False
        return True

    def _create_or_upgrade(self, tool: str, schema: str) -> None:
        if not self.db.exists():
            _run([tool, "create", str(self.db), schema])
        elif _run([tool, "needs-conversion", str(self.db), schema]).strip() == "yes":
            _run([tool, "convert", str(self.db), schema])

    def _start(self, server: str) -> None:
        for stale in (self.socket, self.pidfile):
            stale.unlink(missing_ok=True)
        _run([server, str(self.db), f"--remote=punix:{self.socket}",
              f"--unixctl={self.dir / 'nb.ctl'}", f"--pidfile={self.pidfile}",
              f"--log-file={self.dir / 'nb.log'}", "--detach", "--no-chdir"])
        deadline = time.monotonic() + 10
        while not self.running():
            if time.monotonic() > deadline:
                raise EmbeddedError(f"ovsdb-server did not start; see {self.dir / 'nb.log'}")
            time.sleep(0.02)
        self.marker.write_text(str(self.pid()))

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None and process_alive(pid):
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.marker.unlink(missing_ok=True)


class _FileLock:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.fd: int | None = None

    def __enter__(self) -> None:
        self.fd = os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def __exit__(self, *exc: object) -> None:
        assert self.fd is not None
        os.close(self.fd)



def _run(command: list[str]) -> str:
    result = subprocess.run(command, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise EmbeddedError(f"{Path(command[0]).name} failed: {result.stderr.strip()}")
    return result.stdout
