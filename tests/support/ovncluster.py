"""A clustered OVN Northbound database for tests and the benchmark: three `ovsdb-server`
members of one Raft cluster on this machine.

Everything is on unix sockets: the clients' remotes and the members' Raft addresses
alike (ovsdb-server accepts `unix:` Raft addresses), so no TCP port can be taken by
someone else. Members are started from the distribution's packages in a folder of
their own and stopped by their pids; a member can be killed (SIGKILL), restarted on its
database file (it rejoins and catches up from the leader), stopped (SIGSTOP: a
partition, as far as the others can tell) and continued. `ovn-northd` (with a standalone
Southbound database) is started against the cluster on request, for traces.

Missing packages fail loudly: tests never skip because OVN is not installed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from unet.reconciler.processes import process_alive

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"
SB_SCHEMA = "/usr/share/ovn/ovn-sb.ovsschema"
DATABASE = "OVN_Northbound"
TOOLS = ("ovsdb-server", "ovsdb-tool", "ovsdb-client", "ovs-appctl", "ovn-nbctl")


class ClusterError(RuntimeError):
    """The cluster did not do what the test needs (start, elect a leader, catch up)."""


def require_cluster_tools(northd: bool = False) -> None:
    import shutil

    tools = (*TOOLS, "ovn-northd", "ovn-sbctl") if northd else TOOLS
    missing = [tool for tool in tools if shutil.which(tool) is None]
    missing += [p for p in (NB_SCHEMA, SB_SCHEMA) if not Path(p).is_file()]
    if missing:
        raise ClusterError(f"OVN is not installed (missing: {', '.join(missing)}); run "
                           "`make test`, which installs ovn-central and ovn-common")


@dataclass
class Member:
    """One ovsdb-server of the cluster; its files are `root/<name>.*`."""

    name: str
    root: Path

    def path(self, suffix: str) -> Path:
        return self.root / f"{self.name}.{suffix}"

    @property
    def db(self) -> Path:
        return self.path("db")

    @property
    def sock(self) -> Path:
        return self.path("sock")

    @property
    def remote(self) -> str:
        return f"unix:{self.sock}"

    @property
    def raft(self) -> str:
        return f"unix:{self.path('raft')}"

    @property
    def ctl(self) -> Path:
        return self.path("ctl")

    @property
    def log(self) -> Path:
        return self.path("log")

    def pid(self) -> int | None:
        """The pid of the running server (None: not running; a zombie is not running)."""
        try:
            pid = int(self.path("pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if process_alive(pid) else None

    def stopped(self) -> bool:
        """Stopped with SIGSTOP (state T)."""
        pid = self.pid()
        if pid is None:
            return False
        with contextlib.suppress(OSError, IndexError):
            return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "T"
        return False


class OvnCluster:
    """A Raft cluster of `size` OVN_Northbound members in `root`; a context manager.

    `root` must be short: unix socket paths have at most 107 bytes.
    """

    def __init__(self, root: Path, size: int = 3, election_timer_ms: int = 1000,
                 northd: bool = False) -> None:
        require_cluster_tools(northd)
        self.root = root
        self.members = [Member(f"nb{n}", root) for n in range(1, size + 1)]
        self.election_timer_ms = election_timer_ms
        self.with_northd = northd
        longest = max(len(str(m.path("raft"))) for m in self.members)
        if longest > 100:
            raise ClusterError(f"{root} is too long for unix socket paths ({longest} bytes)")

    # -- addresses ----------------------------------------------------------------------
    @property
    def remote(self) -> str:
        """The clients' connection string: every member, separated by commas."""
        return ",".join(m.remote for m in self.members)

    @property
    def sb_remote(self) -> str:
        return f"unix:{self.root / 'sb.sock'}"

    # -- life cycle ---------------------------------------------------------------------
    def __enter__(self) -> OvnCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        """Create the cluster (the first member), join the others, start every member,
        wait for a leader that every member follows, and initialise the database."""
        self.root.mkdir(parents=True, exist_ok=True)
        first, *others = self.members
        _run("ovsdb-tool", f"--election-timer={self.election_timer_ms}", "create-cluster",
             str(first.db), NB_SCHEMA, first.raft)
        for member in others:
            _run("ovsdb-tool", "join-cluster", str(member.db), DATABASE, member.raft,
                 first.raft)
        for member in self.members:
            self.restart(member, wait=False)
        self.wait_until_settled()
        self.nbctl("init")
        if self.with_northd:
            self._start_northd()

    def stop(self) -> None:
        """Every process of the lab, by pid (a stopped one is continued first, so that
        it can take the SIGTERM)."""
        names = ["northd", "sb"] if self.with_northd else []
        for name in names:
            _stop_pidfile(self.root / f"{name}.pid")
        for member in self.members:
            pid = member.pid()
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
            _stop_pidfile(member.path("pid"))

    def restart(self, member: Member, wait: bool = True) -> None:
        """Start `member` on its database file (after a kill, say); with `wait`, until
        it is a member again that follows the leader and has caught up."""
        if member.pid() is not None:
            raise ClusterError(f"{member.name} is still running")
        member.sock.unlink(missing_ok=True)  # a killed server leaves its socket behind
        Path(member.raft.removeprefix("unix:")).unlink(missing_ok=True)
        _run("ovsdb-server", str(member.db), f"--remote=punix:{member.sock}",
             f"--pidfile={member.path('pid')}", f"--log-file={member.log}",
             f"--unixctl={member.ctl}", "--detach", "--no-chdir")
        if wait:
            self.wait_until_settled()
            self.wait_caught_up(member)

    # -- faults -------------------------------------------------------------------------
    def kill(self, member: Member) -> None:
        """SIGKILL: no goodbye to the other members or to clients."""
        pid = member.pid()
        if pid is None:
            raise ClusterError(f"{member.name} is not running")
        os.kill(pid, signal.SIGKILL)
        _wait(lambda: member.pid() is None, 10, f"{member.name} (pid {pid}) to die")

    def pause(self, member: Member) -> None:
        """SIGSTOP: the member still holds its sockets but answers nobody."""
        pid = member.pid()
        if pid is None:
            raise ClusterError(f"{member.name} is not running")
        os.kill(pid, signal.SIGSTOP)
        _wait(member.stopped, 5, f"{member.name} to stop")

    def resume(self, member: Member) -> None:
        pid = member.pid()
        if pid is None:
            raise ClusterError(f"{member.name} is not running")
        os.kill(pid, signal.SIGCONT)

    def terminate(self, member: Member) -> None:
        """A clean stop (SIGTERM) of one member."""
        _stop_pidfile(member.path("pid"))

    # -- state --------------------------------------------------------------------------
    def status(self, member: Member) -> dict[str, str]:
        """`cluster/status` of a running member, as {"Role": "leader", ...}."""
        result = subprocess.run(["ovs-appctl", "-t", str(member.ctl), "cluster/status",
                                 DATABASE], capture_output=True, text=True, timeout=10,
                                check=False)
        if result.returncode != 0:
            raise ClusterError(f"cluster/status of {member.name}: {result.stderr.strip()}")
        out = {}
        for line in result.stdout.splitlines():
            key, sep, value = line.partition(":")
            if sep and not line.startswith(" "):
                out.setdefault(key.strip(), value.strip())
        return out

    def running(self) -> list[Member]:
        return [m for m in self.members if m.pid() is not None and not m.stopped()]

    def leader(self, timeout: float = 30) -> Member:
        """The member every running member agrees is the leader (waiting for an election)."""
        found: list[Member] = []

        def agreed() -> bool:
            found.clear()
            found.extend(self._agreed_leader())
            return bool(found)

        _wait(agreed, timeout, "a leader that every running member follows",
              lambda: self._statuses())
        return found[0]

    def followers(self) -> list[Member]:
        leader = self.leader()
        return [m for m in self.running() if m is not leader]

    def wait_until_settled(self, timeout: float = 30) -> Member:
        """Every running member is a cluster member and follows one leader."""
        return self.leader(timeout)

    def wait_caught_up(self, member: Member, timeout: float = 30) -> None:
        """`member` has applied everything the leader has (the same Raft index)."""
        def same() -> bool:
            leader = self.leader()
            return self.index(member) >= self.index(leader)

        _wait(same, timeout, f"{member.name} to catch up with the leader",
              lambda: f"{member.name} at {self.index(member)}")

    def index(self, member: Member) -> int:
        """The Raft index of the last entry `member` applied (its _Server row)."""
        rows = _client_transact(member.remote, ["_Server", {
            "op": "select", "table": "Database", "where": [["name", "==", DATABASE]],
            "columns": ["index"]}])[0]["rows"]
        value = rows[0]["index"] if rows else 0
        return value if isinstance(value, int) else 0

    def _agreed_leader(self) -> list[Member]:
        running = self.running()
        statuses = {}
        for member in running:
            try:
                statuses[member.name] = self.status(member)
            except (ClusterError, subprocess.TimeoutExpired):
                return []
        leaders = [m for m in running if statuses[m.name].get("Role") == "leader"]
        if len(leaders) != 1 or not all(
                s.get("Status") == "cluster member" for s in statuses.values()):
            return []
        leader = leaders[0]
        # followers name the leader by a nickname (from its address), never "unknown"
        named = {statuses[m.name].get("Leader") for m in running if m is not leader}
        terms = {statuses[m.name].get("Term") for m in running}
        if len(named) <= 1 and "unknown" not in named and len(terms) == 1:
            return [leader]
        return []

    def _statuses(self) -> str:
        out = []
        for member in self.members:
            if member.pid() is None:
                out.append(f"{member.name}: not running")
            elif member.stopped():
                out.append(f"{member.name}: stopped")
            else:
                with contextlib.suppress(ClusterError, subprocess.TimeoutExpired):
                    s = self.status(member)
                    out.append(f"{member.name}: {s.get('Status')}, {s.get('Role')}, "
                               f"leader {s.get('Leader')}, term {s.get('Term')}")
        return "; ".join(out)

    # -- reading ------------------------------------------------------------------------
    def nbctl(self, *args: str) -> str:
        """ovn-nbctl against the leader (not every remote: over unix sockets nothing probes a
        connection, so a client that picked a stopped member would wait forever)."""
        result = subprocess.run(["ovn-nbctl", f"--db={self.leader().remote}", "--timeout=30",
                                 *args],
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            raise ClusterError(f"ovn-nbctl {' '.join(args)}: {result.stderr.strip()}")
        return result.stdout

    def select(self, tables: tuple[str, ...], columns: tuple[str, ...] = ()) -> dict[
            str, list[dict[str, Any]]]:
        """Every row of `tables` (all columns, or `columns`), read from the leader in one
        transaction: OVSDB's JSON values as they come."""
        operations: list[dict[str, Any]] = [{"op": "select", "table": t, "where": []}
                                            for t in tables]
        if columns:
            for operation in operations:
                operation["columns"] = list(columns)
        results = _client_transact(self.leader().remote, [DATABASE, *operations])
        return {t: r["rows"] for t, r in zip(tables, results, strict=True)}

    def committed_log(self, member: Member) -> list[dict[str, Any]]:
        """The committed entries of `member`'s Raft log that carry data, oldest first, as
        stored in its file (`{"term", "index", "eid", "data": [schema, changes]}`); the
        snapshot it started from, if compacted, is not among them."""
        entries: dict[int, dict[str, Any]] = {}
        commit = 0
        for record in _records(member.db):
            if "commit_index" in record:
                commit = max(commit, int(record["commit_index"]))
            elif "index" in record and "term" in record and "prev_index" not in record:
                index = int(record["index"])
                for later in [i for i in entries if i >= index]:
                    del entries[later]  # a new leader replaced them
                entries[index] = record
        return [entries[i] for i in sorted(entries)
                if i <= commit and entries[i].get("data") is not None]

    # -- northd -------------------------------------------------------------------------
    def _start_northd(self) -> None:
        sb_db = self.root / "sb.db"
        _run("ovsdb-tool", "create", str(sb_db), SB_SCHEMA)
        _run("ovsdb-server", str(sb_db), f"--remote=punix:{self.root / 'sb.sock'}",
             *_daemon_options(self.root, "sb"))
        subprocess.run(["ovn-sbctl", f"--db={self.sb_remote}", "init"], check=True,
                       capture_output=True)
        _run("ovn-northd", f"--ovnnb-db={self.remote}", f"--ovnsb-db={self.sb_remote}",
             *_daemon_options(self.root, "northd"))

    def sync(self, timeout: int = 60) -> None:
        """Wait until ovn-northd has compiled the current Northbound into the Southbound."""
        self.nbctl(f"--timeout={timeout}", "--wait=sb", "sync")

    def northd_problems(self, expected: tuple[str, ...] = ()) -> list[str]:
        """ovn-northd's errors and warnings, but for those `expected`."""
        log = (self.root / "northd.log").read_text()
        return [line for line in log.splitlines() if ("|ERR|" in line or "|WARN|" in line)
                and "|timeval|" not in line and not any(e in line for e in expected)]


# --- helpers ------------------------------------------------------------------------------


def _daemon_options(root: Path, name: str) -> list[str]:
    return [f"--pidfile={root / name}.pid", f"--log-file={root / name}.log",
            f"--unixctl={root / name}.ctl", "--detach", "--no-chdir"]


def _run(*command: str) -> None:
    result = subprocess.run(command, capture_output=True, text=True, check=False, timeout=60)
    if result.returncode != 0:
        raise ClusterError(f"{' '.join(command)}: {result.stderr.strip()}")


def _stop_pidfile(pidfile: Path) -> None:
    """SIGTERM to the pid in `pidfile`, then wait (a zombie counts as stopped); SIGKILL
    after 5 s."""
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    if process_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while process_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        if process_alive(pid):
            os.kill(pid, signal.SIGKILL)
    pidfile.unlink(missing_ok=True)


def _wait(done: Any, timeout: float, what: str, state: Any = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise ClusterError(f"waited {timeout:g} s for {what}"
                               + (f" ({state()})" if state else ""))
        time.sleep(0.05)


def _client_transact(remote: str, request: list[Any]) -> list[dict[str, Any]]:
    """One transaction with ovsdb-client (which talks to the server it is given, leader
    or not)."""
    result = subprocess.run(["ovsdb-client", "--timeout=30", "transact", remote,
                             json.dumps(request)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        raise ClusterError(f"ovsdb-client transact {remote}: {result.stderr.strip()}")
    answer = json.loads(result.stdout)
    errors = [r for r in answer if isinstance(r, dict) and r.get("error")]
    if errors:
        raise ClusterError(f"ovsdb-client transact {remote}: {errors[0]}")
    return answer  # type: ignore[no-any-return]


_RECORD = re.compile(rb"OVSDB CLUSTER (\d+) [0-9a-f]+\n")


def _records(db: Path) -> Iterator[dict[str, Any]]:
    """The JSON records of a clustered database file."""
    data = db.read_bytes()
    at = 0
    while True:
        header = _RECORD.match(data, at)
        if header is None:
            return
        start = header.end()
        end = start + int(header.group(1))
        yield json.loads(data[start:end])
        at = end + 1 if data[end:end + 1] == b"\n" else end
