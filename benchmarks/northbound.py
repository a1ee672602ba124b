"""The OVN Northbound databases the live stages run against, each of the benchmark's own.

- `NbServer`: one empty ovsdb-server on a unix socket, started on a new database and
  stopped by its pid; it answers what the report asks of a backend (its remote, its CPU
  time, its peak memory) and reads rows back with ovn-nbctl (`rows`, `ours`);
- `ClusterServer`: three ovsdb-servers in one Raft cluster (tests/support/ovncluster.py),
  answering the same questions for the members together (CPU time summed, memory the
  largest), and how many elections their logs record.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from unet.reconciler.processes import process_alive

from .generate import INSTALLATION
from .system import BenchError, process_cpu_s, process_peak_mib

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"
#: The tables unet manages (managers/ovn/schema.py MANAGED_COLUMNS), for `ovn-nbctl list`.
OVN_TABLES = ("Logical_Router", "Logical_Switch", "Logical_Router_Port", "Logical_Switch_Port",
              "DHCP_Options", "Port_Group", "ACL", "Address_Set", "NAT",
              "Logical_Router_Static_Route", "Gateway_Chassis")


class NbServer:
    """An empty OVN Northbound ovsdb-server on a unix socket in `root`, stopped by its pid.

    `root` should be short: a unix socket path has at most 107 bytes.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.db = root / "nb.db"
        self.socket = root / "nb.sock"
        self.pidfile = root / "nb.pid"
        self.applied = False  # it holds the live repo, applied
        self.shards: frozenset[str] = frozenset()  # the regions whose shards applied into it

    @property
    def remote(self) -> str:
        return f"unix:{self.socket}"

    def start(self) -> None:
        """Stop any server of ours, then start a new one on a new, empty database."""
        self.stop()
        for tool in ("ovsdb-tool", "ovsdb-server", "ovn-nbctl"):
            if shutil.which(tool) is None:
                raise BenchError(f"{tool} is missing: run `make setup` (apt-get install "
                                 "ovn-central ovn-common)")
        self.root.mkdir(parents=True, exist_ok=True)
        self.db.unlink(missing_ok=True)
        self.socket.unlink(missing_ok=True)
        subprocess.run(["ovsdb-tool", "create", str(self.db), NB_SCHEMA], check=True,
                       capture_output=True)
        # --detach returns once the server is ready (socket bound, pidfile written)
        subprocess.run(["ovsdb-server", str(self.db), f"--remote=punix:{self.socket}",
                        f"--pidfile={self.pidfile}", f"--log-file={self.root / 'nb.log'}",
                        f"--unixctl={self.root / 'nb.ctl'}", "--detach", "--no-chdir"],
                       check=True, capture_output=True)
        if self.pid() is None or not self.socket.exists():
            raise BenchError(f"ovsdb-server did not start; see {self.root / 'nb.log'}")
        self.applied = False
        self.shards = frozenset()

    def pid(self) -> int | None:
        try:
            pid = int(self.pidfile.read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None

    def stop(self) -> None:
        pid = self.pid()
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 10
            while process_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        self.pidfile.unlink(missing_ok=True)

    def cpu_s(self) -> float:
        """The server's CPU time so far (user + system), 0 when it is not running."""
        pid = self.pid()
        return 0.0 if pid is None else process_cpu_s(pid)

    def peak_mib(self) -> float:
        return process_peak_mib(self.pid())

    def nbctl(self, *args: str) -> str:
        result = subprocess.run(["ovn-nbctl", f"--db={self.remote}", *args],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise BenchError(f"ovn-nbctl {' '.join(args[:4])} ...: {result.stderr.strip()}")
        return result.stdout

    def rows(self, table: str, columns: str) -> list[dict[str, Any]]:
        """The rows of a table (the named columns), with OVSDB JSON values made plain."""
        data = json.loads(self.nbctl("--format=json", f"--columns={columns}", "list", table))
        return [{name: _ovsdb_value(value) for name, value in zip(data["headings"], row,
                                                                 strict=True)}
                for row in data["data"]]

    def ours(self, table: str, columns: str) -> list[dict[str, Any]]:
        """The rows of a table that the benchmark's installation wrote (their external_ids
        and the named columns)."""
        return [row for row in self.rows(table, f"external_ids,{columns}")
                if row["external_ids"].get("unet:installation") == INSTALLATION]


def _ovsdb_value(value: Any) -> Any:
    """An OVSDB JSON value (["uuid", u], ["set", [...]], ["map", [...]]) as Python data."""
    if isinstance(value, list) and len(value) == 2 and isinstance(value[0], str):
        tag, inner = value
        if tag in ("uuid", "named-uuid"):
            return inner
        if tag == "set":
            return [_ovsdb_value(v) for v in inner]
        if tag == "map":
            return {_ovsdb_value(k): _ovsdb_value(v) for k, v in inner}
    return value


class ClusterServer(NbServer):
    """An empty OVN Northbound database of three ovsdb-servers in one Raft cluster
    (tests/support/ovncluster.py), in `root`: the same questions as NbServer, answered
    for the members together (CPU time summed, memory the largest)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cluster: Any = None

    @property
    def remote(self) -> str:
        return self.cluster.remote if self.cluster is not None else ""

    def start(self) -> None:
        from tests.support.ovncluster import ClusterError, OvnCluster

        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)
        try:
            self.cluster = OvnCluster(self.root)
            self.cluster.start()
        except ClusterError as exc:
            self.stop()
            raise BenchError(f"the 3-member cluster did not start: {exc}") from exc
        self.applied = False

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
            self.cluster = None

    def _pids(self) -> list[int]:
        members = self.cluster.members if self.cluster is not None else []
        return [pid for pid in (m.pid() for m in members) if pid is not None]

    def pid(self) -> int | None:
        """A member's pid while every member runs; None otherwise."""
        pids = self._pids()
        return pids[0] if self.cluster is not None and len(pids) == len(self.cluster.members) \
            else None

    def cpu_s(self) -> float:
        return sum(process_cpu_s(pid) for pid in self._pids())

    def peak_mib(self) -> float:
        return max((process_peak_mib(pid) for pid in self._pids()), default=0.0)

    def elections(self) -> int:
        """Elections the members' logs record (one at the start; more: a leader change)."""
        members = self.cluster.members if self.cluster is not None else []
        return max((m.log.read_text(errors="replace").count("starting election")
                    for m in members if m.log.exists()), default=0)
