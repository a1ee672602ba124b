"""Running the unet command line against a lab's Northbound database, and reading its rows
back with ovn-nbctl: what the OVN tests share.

unet always runs as a subprocess (so kills and locks are real), with this checkout on its
path; its output must never hold a traceback.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from unet.reconciler.processes import process_alive

from ..conftest import ROOT
from .ovnlab import NB_SCHEMA, OvnLab

INSTALLATION = "example"
ROOT_TABLES = ("Logical_Switch", "Logical_Router", "Port_Group", "Address_Set", "DHCP_Options",
               "Load_Balancer")
TABLES = (*ROOT_TABLES, "Logical_Switch_Port", "Logical_Router_Port", "ACL", "NAT",
          "Logical_Router_Static_Route", "Gateway_Chassis")


# --- running unet ---------------------------------------------------------------------------


def unet_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "UNET_DEBUG"}
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONPATH"] = str(ROOT)
    return env


def unet(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run the unet command line; its output never holds a traceback."""
    result = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                            env=unet_env(), capture_output=True, text=True, timeout=timeout,
                            check=False)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    assert "internal error" not in result.stderr, result.stderr
    return result


def apply(cwd: Path, repo: Path | str, *extra: str) -> subprocess.CompletedProcess[str]:
    return unet(cwd, "apply", str(repo), "--auto-approve", "--manager", "ovn", *extra)


def plan(cwd: Path, repo: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    return unet(cwd, "plan", str(repo), "--manager", "ovn", *extra)


def plan_json(cwd: Path, repo: Path, *extra: str) -> tuple[int, dict[str, Any]]:
    result = plan(cwd, repo, "--format", "json", "--detailed-exitcode", *extra)
    return result.returncode, json.loads(result.stdout)


def assert_noop(cwd: Path, repo: Path) -> None:
    result = plan(cwd, repo, "--detailed-exitcode")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "No changes." in result.stdout


def spawn(cwd: Path, *args: str) -> tuple[subprocess.Popen[bytes], Path, Path]:
    """unet in the background, its output in files (a full pipe would stall it)."""
    out, err = cwd / f"out.{time.monotonic_ns()}", cwd / f"err.{time.monotonic_ns()}"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        proc = subprocess.Popen([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                                env=unet_env(), stdout=stdout, stderr=stderr)
    return proc, out, err


def spawn_at_prompt(cwd: Path, out: Path, *args: str) -> tuple[subprocess.Popen[bytes], int]:
    """unet in the background on a terminal, as a person runs it (so it asks before
    applying); its output in `out`. Returns the process and the terminal's controlling
    end, to answer the prompt with `os.write(controller, b"yes\\n")`."""
    import pty

    controller, terminal = pty.openpty()
    with out.open("wb") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "unet.reconciler.cli", *args], cwd=cwd,
                                env=unet_env(), stdin=terminal, stdout=stdout,
                                stderr=subprocess.STDOUT)
    os.close(terminal)
    return proc, controller


def wait_for_text(proc: subprocess.Popen[bytes], files: tuple[Path, ...], text: str,
                  timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in f.read_text(errors="replace") for f in files):
        if proc.poll() is not None:
            raise AssertionError(f"unet exited ({proc.returncode}) before printing {text!r}: "
                                 + files[-1].read_text())
        if time.monotonic() > deadline:
            raise AssertionError(f"unet did not print {text!r} within {timeout} s")
        time.sleep(0.005)


@contextlib.contextmanager
def reaped(proc: subprocess.Popen[bytes]) -> Iterator[subprocess.Popen[bytes]]:
    """Kill the process (by its pid) if the test leaves it running."""
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=30)


# --- reading the Northbound database with ovn-nbctl -----------------------------------------


@functools.cache
def _schema() -> dict[str, Any]:
    return json.loads(Path(NB_SCHEMA).read_text())["tables"]  # type: ignore[no-any-return]


def _atom(value: Any) -> Any:
    if isinstance(value, list) and len(value) == 2 and value[0] in ("uuid", "named-uuid"):
        return value[1]
    return value


def _value(table: str, column: str, value: Any) -> Any:
    """As ovsdbapp shows it: sets as sorted lists, optional values as value or None."""
    kind = _schema()[table]["columns"].get(column, {}).get("type", "string")
    if isinstance(value, list) and value and value[0] == "map":
        return {_atom(k): _atom(v) for k, v in value[1]}
    items = value[1] if isinstance(value, list) and value and value[0] == "set" else [value]
    items = [_atom(v) for v in items]
    if not isinstance(kind, dict) or kind.get("max", 1) == 1:
        return items[0] if items else None
    return sorted(items, key=str)


def rows(remote: str, table: str) -> list[dict[str, Any]]:
    result = subprocess.run(["ovn-nbctl", f"--db={remote}", "--format=json", "list", table],
                            capture_output=True, text=True, check=True)
    data = json.loads(result.stdout)
    return [{column: _value(table, column, value)
             for column, value in zip(data["headings"], row, strict=True)}
            for row in data["data"]]


def ours(remote: str, table: str, installation: str = INSTALLATION) -> list[dict[str, Any]]:
    return [r for r in rows(remote, table)
            if r["external_ids"].get("unet:installation") == installation]


def row_named(remote: str, table: str, name: str) -> dict[str, Any]:
    found = [r for r in rows(remote, table) if r.get("name") == name]
    assert len(found) == 1, f"{table} {name}: {len(found)} rows"
    return found[0]


#: Columns of ports that ovn-northd writes whenever it gets to them (`tag`: the VLAN it
#: assigns a port with a `tag_request`), not unet: a dump taken before northd caught up
#: with unet's last apply would differ from one taken after.
NORTHD_COLUMNS = frozenset({"up", "tag", "dynamic_addresses"})


def dump(remote: str) -> dict[str, list[dict[str, Any]]]:
    """Every row unet could touch, for comparing before and after; without NORTHD_COLUMNS."""
    return {table: sorted(({k: v for k, v in row.items() if k not in NORTHD_COLUMNS}
                           for row in rows(remote, table)), key=lambda r: r["_uuid"])
            for table in TABLES}


def nbctl_list(remote: str, table: str, uuid: str) -> str:
    return subprocess.run(["ovn-nbctl", f"--db={remote}", "list", table, uuid],
                          capture_output=True, text=True, check=True).stdout


def northd_problems(lab: OvnLab, expected: tuple[str, ...] = ()) -> list[str]:
    """ovn-northd's errors and warnings, but for a slow machine's and those `expected`."""
    log = (lab.root / "northd.log").read_text()
    return [line for line in log.splitlines() if ("|ERR|" in line or "|WARN|" in line)
            and "|timeval|" not in line and not any(e in line for e in expected)]


# --- repo edits -----------------------------------------------------------------------------


def add_instance(repo: Path, name: str, subnet: str = "web", group: str = "web") -> None:
    with (repo / "tenants" / "acme" / "compute.yaml").open("a") as out:
        out.write(f"---\napiVersion: network.osac.io/v1alpha1\nkind: ComputeInstance\n"
                  f"metadata:\n  name: {name}\nspec:\n  networkAttachments:\n"
                  f"    - subnet: {subnet}\n      securityGroups: [{group}]\n")


# --- the installation as a whole ------------------------------------------------------------


def desired_keys(repo: Path) -> dict[str, set[str]]:
    """Per table, the keys of the OVN rows a repo needs (rendered without a backend)."""
    from unet.reconciler.desired import render_desired
    from unet.reconciler.validate import validate_repo

    validation = validate_repo(repo)
    assert validation.ok, [d.to_json() for d in validation.diagnostics if d.is_error]
    out: dict[str, set[str]] = {}
    for obj in render_desired(validation, {}, only=["ovn"]).objects:
        out.setdefault(obj.table, set()).add(obj.key)
    return out


def key_counts(remote: str, installation: str) -> dict[str, Counter[str]]:
    """Per table, how many rows carry each `unet:key` of the installation."""
    return {table: Counter(r["external_ids"]["unet:key"] for r in ours(remote, table,
                                                                       installation))
            for table in TABLES}


def assert_consistent(lab: OvnLab, desired: dict[str, set[str]] | None,
                      installation: str = "bench") -> int:
    """No key twice; no row without our tags. With `desired`: exactly the desired rows."""
    total = 0
    for table, counts in key_counts(lab.nb_remote, installation).items():
        twice = [key for key, count in counts.items() if count > 1]
        assert not twice, f"{table}: duplicated rows {twice[:5]}"
        every = rows(lab.nb_remote, table)
        assert len(every) == len(counts), f"{table}: {len(every) - len(counts)} untagged rows"
        if desired is not None:
            assert set(counts) == desired.get(table, set()), table
        total += len(counts)
    return total


# --- extra servers ----------------------------------------------------------------------


@contextlib.contextmanager
def ovsdb_server(folder: Path, remote: str, *options: str) -> Iterator[Path]:
    """An extra Northbound ovsdb-server; yields its log. Stopped by its pid."""
    folder.mkdir(parents=True, exist_ok=True)
    db, pidfile, log = folder / "nb.db", folder / "nb.pid", folder / "nb.log"
    subprocess.run(["ovsdb-tool", "create", str(db), NB_SCHEMA], check=True)
    subprocess.run(["ovsdb-server", str(db), f"--remote={remote}", *options,
                    f"--pidfile={pidfile}", f"--log-file={log}",
                    f"--unixctl={folder / 'nb.ctl'}", "--detach", "--no-chdir"],
                   check=True, capture_output=True)
    pid = int(pidfile.read_text())
    try:
        yield log
    finally:
        stop_pid(pid)


def stop_pid(pid: int) -> None:
    """SIGTERM, then wait; a zombie counts as stopped (PID 1 here reaps late)."""
    if process_alive(pid):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 5
    while process_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not process_alive(pid), f"pid {pid} does not stop"


def listening_port(log: Path) -> int:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        found = re.search(r"listening on port (\d+)", log.read_text())
        if found:
            return int(found.group(1))
        time.sleep(0.02)
    raise AssertionError(f"no port in {log}: {log.read_text()}")
