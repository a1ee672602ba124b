"""The daemon's stages of the benchmark (issue 17): `unet reconcile` running as a daemon that
watches the Northbound database, on the applied live repo of one size.

- daemon-repair: hand edits, one at a time, spread over tables (a tag added to rows of
  seven tables, an ACL removed from its port group, a VM's port deleted); the time from
  the edit to the end of the run that repaired it (the run's record in the history): the
  median of the edits as the wall time, and the maximum and median per kind of edit in the
  note (the target is every edit: report.BAR_REPAIR_MAX_S);
- daemon-idle: the daemon's CPU time per run when nothing changed, over a few runs;
- daemon-commit: a commit changing one tenant, pushed to the branch the daemon follows;
  the run that applies it (its `duration`: from the fetch, made at once by a signed
  webhook, to the end of the run).

Each is compared in the report with the one-shot run it replaces (reconcile-drift,
reconcile-noop), when measured in the same run.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from typing import Any

from .fixture import Fixture
from .repos import git
from .results import Result
from .system import process_cpu_s, process_peak_mib

EDITS = 20
SECRET = "bench-webhook-secret"
HISTORY = "history.jsonl"


class _Daemon:
    """`unet reconcile` as a daemon, on the live repo (or a clone of a Git origin)."""

    def __init__(self, fx: Fixture, name: str, *source: str) -> None:
        self.fx = fx
        self.state = fx.scratch / f"{name}-state"
        shutil.rmtree(self.state, ignore_errors=True)
        self.err = fx.scratch / f"{name}.err"
        env = {**fx.env(), "UNET_BENCH_HOOK": SECRET}
        with self.err.open("wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "unet.reconciler.cli", "reconcile", *source, "--manager",
                 "ovn", "--interval", "1h", "--metrics-port", "0", "--metrics-address",
                 "127.0.0.1", "--state-dir", str(self.state), "--webhook-secret-env",
                 "UNET_BENCH_HOOK"], cwd=fx.cwd, env=env, stdout=subprocess.DEVNULL,
                stderr=err)

    def runs(self) -> list[dict[str, Any]]:
        try:
            text = (self.state / HISTORY).read_text()
        except OSError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def wait(self, what: str, done: Callable[[list[dict[str, Any]]], bool],
             timeout: float = 600.0) -> float:
        """Until `done(runs)`; when it became true (monotonic)."""
        deadline = time.monotonic() + timeout
        while True:
            if done(self.runs()):
                return time.monotonic()
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the daemon did not get to {what}: "
                                   f"{self.err.read_text()[-2000:]}")
            time.sleep(0.01)

    def settle(self) -> None:
        """Until a run found nothing to do, and none followed for a second."""
        self.wait("a quiet state", lambda runs: bool(runs) and runs[-1]["result"] == "ok")
        seen = len(self.runs())
        while True:
            time.sleep(1.0)
            now = len(self.runs())
            if now == seen and self.runs()[-1]["result"] == "ok":
                return
            seen = now

    @property
    def cpu_s(self) -> float:
        return process_cpu_s(self.proc.pid)

    @property
    def peak_mib(self) -> float:
        return process_peak_mib(self.proc.pid)

    def port(self) -> int:
        path = self.state / "metrics.port"
        self.wait("its metrics port", lambda _runs: path.exists())
        return int(path.read_text())

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _result(stage: str, fx: Fixture, walls: list[float], cpu: float, peak: float, ok: bool,
            note: str) -> Result:
    return Result(stage=stage, source="folder", tenants=fx.tenants,
                  manifests=int(fx.meta["manifests"]), files=int(fx.meta.get("files", 0)),
                  wall_s=statistics.median(walls) if walls else 0.0, cpu_s=cpu, peak_mib=peak,
                  ok=ok, note=note, walls=[round(w, 3) for w in walls],
                  load=round(os.getloadavg()[0], 2))


def measure_daemon(fx: Fixture) -> list[Result]:
    """daemon-repair and daemon-idle, on the applied live repo (reconcile: repair)."""
    daemon = _Daemon(fx, "daemon", "--path", str(fx.live))
    try:
        daemon.settle()
        return [_repairs(fx, daemon), _idle(fx, daemon)]
    finally:
        daemon.stop()


def _edits(fx: Fixture) -> list[tuple[str, list[str]]]:
    """EDITS hand edits spread over tables, as (kind, ovn-nbctl arguments)."""
    groups = [g for g in fx.nb.ours("Port_Group", "_uuid,name,acls") if g["acls"]]
    ports = [p for p in fx.nb.ours("Logical_Switch_Port", "_uuid,name") if ".vm." in p["name"]]
    edits: list[tuple[str, list[str]]] = []
    tables = ("ACL", "Logical_Switch", "Logical_Router_Static_Route", "NAT", "Address_Set",
              "DHCP_Options", "Logical_Router_Port")
    for n, table in enumerate(tables * 2):
        rows = fx.nb.ours(table, "_uuid")
        row = rows[(n * 7919) % len(rows)]
        edits.append((f"{table} tag", ["set", table, row["_uuid"], "external_ids:hand=edit"]))
    for n in range(3):
        group = groups[(n * 104729) % len(groups)]
        edits.append(("ACL removed", ["remove", "Port_Group", group["_uuid"], "acls",
                                      sorted(group["acls"])[0]]))
    for n in range(EDITS - len(edits)):
        edits.append(("VM port deleted", ["lsp-del", ports[(n * 15485863) % len(ports)]["name"]]))
    return edits[:EDITS]


def _repairs(fx: Fixture, daemon: _Daemon) -> Result:
    latencies: list[float] = []
    kinds: dict[str, list[float]] = {}
    runs: dict[str, list[float]] = {}  # the repairing runs' own durations
    cpu = daemon.cpu_s
    for kind, command in _edits(fx):
        seen = len(daemon.runs())
        fx.nb.nbctl(*command)
        edited = time.monotonic()
        ended = daemon.wait(f"repair {kind}", _repaired_after(seen))
        latencies.append(ended - edited)
        kind = "tag added" if "tag" in kind else kind
        kinds.setdefault(kind, []).append(ended - edited)
        runs.setdefault(kind, []).append(max(float(r["duration"]) for r in daemon.runs()[seen:]
                                             if r["result"] == "applied"))
        daemon.settle()
    plan = subprocess.run([sys.executable, "-m", "unet.reconciler.cli", "plan", str(fx.live),
                           "--manager", "ovn", "--detailed-exitcode"], cwd=fx.cwd,
                          env=fx.env(), capture_output=True, text=True, check=False)
    ok = plan.returncode == 0
    note = (_by_kind(latencies, kinds, runs) if ok else
            f"a plan after the repairs is not empty (exit {plan.returncode})")
    return _result("daemon-repair", fx, latencies, (daemon.cpu_s - cpu) / len(latencies),
                   daemon.peak_mib, ok, note)


def _by_kind(latencies: list[float], kinds: dict[str, list[float]],
             runs: dict[str, list[float]]) -> str:
    """The maximum (the target is every edit, not the median) and the median, per kind of
    edit: from the edit to the end of the run that repaired it, and that run alone."""
    worst = max(kinds, key=lambda kind: max(kinds[kind]))
    parts = [f"{kind} ({len(values)}): max {max(values):.2f} s, median "
             f"{statistics.median(values):.2f} s (the run: max {max(runs[kind]):.2f} s)"
             for kind, values in sorted(kinds.items())]
    return (f"{len(latencies)} edits, max {max(latencies):.2f} s ({worst}), median "
            f"{statistics.median(latencies):.2f} s; " + "; ".join(parts))


def _repaired_after(seen: int) -> Callable[[list[dict[str, Any]]], bool]:
    """Whether a run after the first `seen` repaired something."""
    return lambda runs: any(r["result"] == "applied" and r.get("repaired")
                            for r in runs[seen:])


def _more_than(seen: int) -> Callable[[list[dict[str, Any]]], bool]:
    """Whether a run followed the first `seen`."""
    return lambda runs: len(runs) > seen


def _idle(fx: Fixture, daemon: _Daemon, runs: int = 5) -> Result:
    """Runs the webhook asks for, with nothing changed: each plans nothing."""
    port = daemon.port()
    cpu, seen = daemon.cpu_s, len(daemon.runs())
    walls = []
    for _ in range(runs):
        before = len(daemon.runs())
        started = time.monotonic()
        _push_hook(port)
        ended = daemon.wait("an idle run", _more_than(before))
        walls.append(ended - started)
    new = daemon.runs()[seen:]
    ok = all(r["result"] == "ok" and r.get("scope") is None for r in new)
    note = "each run planned nothing" if ok else f"a run planned: {new[-1]['message']}"
    return _result("daemon-idle", fx, walls, (daemon.cpu_s - cpu) / runs, daemon.peak_mib,
                   ok, note)


def _push_hook(port: int) -> None:
    body = json.dumps({"ref": "refs/heads/main"}).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/hooks/git", data=body, method="POST",
        headers={"Content-Type": "application/json", "X-GitHub-Event": "push",
                 "X-Hub-Signature-256": signature})
    with urllib.request.urlopen(request, timeout=120):  # a run may hold the GIL for long
        pass


def measure_commit(fx: Fixture) -> Result:
    """daemon-commit: the live repo as a Git origin the daemon follows; one tenant's change
    pushed, the daemon told by the webhook."""
    origin = fx.scratch / "origin.git"
    shutil.rmtree(origin, ignore_errors=True)
    work = fx.scratch / "live-work"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(fx.live, work, ignore=shutil.ignore_patterns(".git", ".unet"))
    git(fx.scratch, "init", "-q", "--bare", str(origin))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", "-A")
    git(work, "commit", "-q", "-m", "base")
    git(work, "push", "-q", str(origin), "main")
    daemon = _Daemon(fx, "daemon-git", "--repo", str(origin))
    try:
        daemon.settle()
        port = daemon.port()
        tenants = sorted((work / "tenants").iterdir())
        groups = tenants[len(tenants) // 2] / "security-groups.yaml"
        groups.write_text(groups.read_text().replace("portFrom: 443\n      portTo: 443",
                                                     "portFrom: 8443\n      portTo: 8443", 1))
        git(work, "commit", "-q", "-am", "one tenant opens 8443 instead of 443")
        git(work, "push", "-q", str(origin), "main")
        commit = git(work, "rev-parse", "HEAD").strip()
        cpu, seen = daemon.cpu_s, len(daemon.runs())
        started = time.monotonic()
        _push_hook(port)
        ended = daemon.wait("the commit applied", lambda runs: any(
            r.get("reconciled") == commit and r["result"] in ("applied", "ok")
            for r in runs[seen:]))
        run = next(r for r in daemon.runs()[seen:] if r.get("reconciled") == commit)
        ok = run["result"] == "applied"
        note = (f"{run['message']}; planned {run.get('scope')}; {ended - started:.2f} s from "
                "the webhook (the daemon may still be collecting the last run's garbage)"
                if ok else run["message"])
        return _result("daemon-commit", fx, [float(run["duration"])], daemon.cpu_s - cpu,
                       daemon.peak_mib, ok, note)
    finally:
        daemon.stop()
