"""A real OVN control plane for tests: NB and SB ovsdb-servers and ovn-northd.

Started from the distribution's packages in a temp folder, on unix sockets
only, and stopped by pid. Missing packages fail loudly: tests never skip
because OVN is not installed (`make test` installs it).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from unet.reconciler.processes import process_alive

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"
SB_SCHEMA = "/usr/share/ovn/ovn-sb.ovsschema"
TOOLS = ("ovsdb-server", "ovsdb-tool", "ovn-northd", "ovn-nbctl", "ovn-sbctl", "ovn-trace")


def require_ovn() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    missing += [path for path in (NB_SCHEMA, SB_SCHEMA) if not Path(path).is_file()]
    if missing:
        raise RuntimeError(f"OVN is not installed (missing: {', '.join(missing)}); "
                           "run `make test`, which installs ovn-central and ovn-common")



class OvnLab:
    """NB + SB + northd in `root`; use as a context manager."""

    def __init__(self, root: Path) -> None:
        require_ovn()
        self.root = root
        self.nb_sock = root / "nb.sock"
        self.sb_sock = root / "sb.sock"
        self.pids: list[Path] = []

    @property
    def nb_remote(self) -> str:
        return f"unix:{self.nb_sock}"

    @property
    def sb_remote(self) -> str:
        return f"unix:{self.sb_sock}"

    def __enter__(self) -> OvnLab:
        self.root.mkdir(parents=True, exist_ok=True)
        self.start_db("nb", NB_SCHEMA)
        self.start_db("sb", SB_SCHEMA)
        self.nbctl("init")
        subprocess.run(["ovn-sbctl", f"--db={self.sb_remote}", "init"], check=True)
        self._daemon("northd", ["ovn-northd", f"--ovnnb-db={self.nb_remote}",
                                f"--ovnsb-db={self.sb_remote}"])
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start_db(self, name: str, schema: str) -> None:
        db = self.root / f"{name}.db"
        if not db.exists():
            subprocess.run(["ovsdb-tool", "create", str(db), schema], check=True)
        self._daemon(name, ["ovsdb-server", str(db), f"--remote=punix:{self.root / name}.sock"])
        deadline = time.monotonic() + 10
        while not (self.root / f"{name}.sock").exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"ovsdb-server {name} did not start")
            time.sleep(0.02)

    def _daemon(self, name: str, command: list[str]) -> None:
        pidfile = self.root / f"{name}.pid"
        subprocess.run([*command, f"--pidfile={pidfile}", f"--log-file={self.root / name}.log",
                        f"--unixctl={self.root / name}.ctl", "--detach", "--no-chdir"],
                       check=True)
        self.pids.append(pidfile)

    def pid(self, name: str) -> int:
        return int((self.root / f"{name}.pid").read_text())

    def stop_daemon(self, name: str) -> None:
        pidfile = self.root / f"{name}.pid"
        try:
            pid = int(pidfile.read_text())
        except (OSError, ValueError):
            return
        if process_alive(pid):
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        pidfile.unlink(missing_ok=True)
        if name in ("nb", "sb"):
            (self.root / f"{name}.sock").unlink(missing_ok=True)

    def stop(self) -> None:
        for pidfile in reversed(self.pids):
            self.stop_daemon(pidfile.stem)

    def nbctl(self, *args: str) -> str:
        result = subprocess.run(["ovn-nbctl", f"--db={self.nb_remote}", *args],
                                capture_output=True, text=True, check=True)
        return result.stdout

    def sbctl(self, *args: str) -> str:
        result = subprocess.run(["ovn-sbctl", f"--db={self.sb_remote}", *args],
                                capture_output=True, text=True, check=True)
        return result.stdout

    def sync(self) -> None:
        """Wait until ovn-northd has compiled the current NB into the SB."""
        self.nbctl("--wait=sb", "sync")

    def trace(self, datapath: str, flow: str, *options: str) -> str:
        result = subprocess.run(["ovn-trace", f"--db={self.sb_remote}", *options, datapath,
                                 flow], capture_output=True, text=True, check=True)
        return result.stdout
