"""The performance benchmark of `unet` (`make bench`).

`python -m benchmarks.bench` measures unet commands on synthetic repos of growing size
(benchmarks/generate.py), each run in a fresh process (wall time and the child's peak RSS),
and reports medians and how the cost grows with the size. See docs/performance.md.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from reconciler.processes import process_alive
from reconciler.sources import SourceError

from .generate import (
    GENERATOR_VERSION,
    PR_BRANCH,
    PR_TENANT,
    generate_repo,
    pr_change,
)

# --- an OVN Northbound server of our own ------------------------------------------------------

NB_SCHEMA = "/usr/share/ovn/ovn-nb.ovsschema"
CACHE_ENV = "UNET_CACHE_DIR"  # where unet keeps its caches: validation results, parsed files
NB_ENV = "UNET_BENCH_NORTHBOUND"  # the live copy's `northbound:` is ${UNET_BENCH_NORTHBOUND}
INSTALLATION = "bench"
#: The tables unet manages (managers/ovn/render.py MANAGED_COLUMNS), for `ovn-nbctl list`.
OVN_TABLES = ("Logical_Router", "Logical_Switch", "Logical_Router_Port", "Logical_Switch_Port",
              "DHCP_Options", "Port_Group", "ACL", "Address_Set", "NAT",
              "Logical_Router_Static_Route", "Gateway_Chassis")


class BenchError(SourceError):
    """The benchmark could not set something up (a tool missing, a server not starting)."""


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
        return 0.0 if pid is None else _cpu_s(pid)

    def peak_mib(self) -> float:
        return _peak_mib(self.pid())

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
        return sum(_cpu_s(pid) for pid in self._pids())

    def peak_mib(self) -> float:
        return max((_peak_mib(pid) for pid in self._pids()), default=0.0)

    def elections(self) -> int:
        """Elections the members' logs record (one at the start; more: a leader change)."""
        members = self.cluster.members if self.cluster is not None else []
        return max((m.log.read_text(errors="replace").count("starting election")
                    for m in members if m.log.exists()), default=0)


def _cpu_s(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _peak_mib(pid: int | None) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


# --- one size: its repos, its server, and the children run on them ----------------------------


@dataclass
class Fixture:
    """Everything the stages of one size work on."""

    tenants: int
    repo: Path  # the generated repo, committed: branch main, and branch pr (plan-pr)
    live: Path  # the same repo for the live stages: northbound ${UNET_BENCH_NORTHBOUND},
    #             reconcile: repair
    scratch: Path
    nb: NbServer  # the backend of the stage being measured: one of `servers`
    meta: dict[str, Any]
    drifted: int = 0  # rows the last drift changed or deleted
    servers: dict[str, NbServer] = field(default_factory=dict)  # by Stage.backend

    @property
    def applied(self) -> bool:
        return self.nb.applied

    @applied.setter
    def applied(self, value: bool) -> None:
        self.nb.applied = value

    @contextlib.contextmanager
    def backend(self, name: str) -> Iterator[None]:
        """The stages in the block run against `servers[name]`."""
        before, self.nb = self.nb, self.servers[name]
        try:
            yield
        finally:
            self.nb = before

    def env(self) -> dict[str, str]:
        source = str(Path(__file__).resolve().parent.parent)
        path = os.environ.get("PYTHONPATH")
        return {**os.environ, NB_ENV: self.nb.remote, CACHE_ENV: str(self.cache_dir),
                "PYTHONPATH": source + (os.pathsep + path if path else "")}

    @property
    def cache_dir(self) -> Path:
        """unet's caches for the children (validation results, parsed files): emptied
        before every run that is not meant to find them warm."""
        return self.scratch / "validate-cache"

    @property
    def cwd(self) -> Path:
        """The children's working folder: keeps `.unet/` out of the caller's."""
        folder = self.scratch / "cwd"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @property
    def state_dir(self) -> Path:
        return self.scratch / "reconcile-state"


@dataclass(slots=True)
class Run:
    """One timed child process."""

    wall_s: float
    cpu_s: float  # user + system: less disturbed than wall time by other load
    peak_mib: float
    exit_code: int
    out: Path
    err: Path
    server_cpu_s: float = 0.0  # the Northbound server's CPU time meanwhile

    def stdout(self) -> str:
        return self.out.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")


def run_child(command: list[str], fx: Fixture, name: str = "child",
              cwd: Path | None = None, stdout: Path | None = None) -> Run:
    """Run a command as a fresh process: wall time, its own CPU time and peak RSS."""
    out_path = stdout or fx.scratch / f"{name}.out"
    err_path = fx.scratch / f"{name}.err"
    server_before = fx.nb.cpu_s()
    with out_path.open("wb") as out, err_path.open("wb") as err:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=out, stderr=err, cwd=cwd or fx.cwd,
                                 env=fx.env())
        try:
            # wait4 gives this child's own rusage; RUSAGE_CHILDREN would be the max so far.
            _pid, status, usage = os.wait4(child.pid, 0)
        except BaseException:  # interrupted: the child goes too
            child.kill()
            child.wait()
            raise
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024,
               child.returncode, out_path, err_path, max(0.0, fx.nb.cpu_s() - server_before))


def run_unet(argv: list[str], fx: Fixture, name: str = "unet") -> Run:
    """`unet ARGV` in a fresh process (`python -m reconciler.cli`)."""
    return run_child([sys.executable, "-m", "reconciler.cli", *argv], fx, name)


# --- the stages -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a run's output says: clean or not, and a short note for the table."""

    ok: bool
    note: str = ""
    errors: int = 0
    warnings: int = 0


@dataclass(frozen=True, slots=True)
class Stage:
    """A unet command to measure.

    `argv` gives its arguments for a size (rev: None for the files on disk, or a Git
    revision). `prepare` runs before every repetition, untimed (e.g. a fresh backend
    before `apply`); `check` reads the run's output; `verify` runs once after the
    last repetition, untimed, and returns a problem or None. `sources` are the ways
    the stage can read the repo; `heavy` stages are repeated `--heavy-repeat` times.
    """

    argv: Callable[[Fixture, str | None], list[str]]
    check: Callable[[Fixture, Run], Outcome]
    prepare: Callable[[Fixture, str | None], None] | None = None
    verify: Callable[[Fixture], str | None] | None = None
    sources: tuple[str, ...] = ("folder", "rev")
    heavy: bool = False
    title: str = ""
    backend: str = "standalone"  # or "cluster": three ovsdb-servers in one Raft cluster


def _validate_argv(fx: Fixture, rev: str | None) -> list[str]:
    argv = ["validate", str(fx.repo), "--format", "json"]
    return [*argv, "--rev", rev] if rev else argv


def _json_output(run: Run) -> dict[str, Any]:
    try:
        data = json.loads(run.stdout())
    except (json.JSONDecodeError, OSError):
        return {}
    return data if isinstance(data, dict) else {}


def _tail(run: Run) -> str:
    return " ".join(run.stderr().strip().splitlines()[-2:])[-300:]


def _exited(run: Run) -> str:
    """How the child ended: `exit N`, or the signal that killed it (no output to show)."""
    if run.exit_code >= 0:
        return f"exit {run.exit_code}"
    name = signal.Signals(-run.exit_code).name
    why = " (the kernel's OOM killer sends it, as can a person: see dmesg)" \
        if name == "SIGKILL" else ""
    return f"killed by {name}{why}"


def _check_validate(fx: Fixture, run: Run) -> Outcome:
    summary = _json_output(run).get("summary", {})
    if not summary:
        return Outcome(False, f"{_exited(run)}: {_tail(run)}", errors=-1)
    errors, warnings = int(summary.get("errors", -1)), int(summary.get("warnings", -1))
    return Outcome(run.exit_code == 0 and errors == 0,
                   f"{summary.get('documents', 0):,} manifests, {summary.get('files', 0):,} "
                   "files", errors, warnings)


def _prepare_validate_cold(fx: Fixture, rev: str | None) -> None:
    """No cached validation result and no parsed file: the run parses and checks
    everything."""
    shutil.rmtree(fx.cache_dir, ignore_errors=True)


def _prepare_validate_warm(fx: Fixture, rev: str | None) -> None:
    """A run right before, untimed, on an empty cache: what it leaves behind (unet's cache
    of validation results, the page cache) is what the timed run finds."""
    _prepare_validate_cold(fx, rev)
    run_unet(_validate_argv(fx, rev), fx, "warm-up")


def _prepare_validate_parsed(fx: Fixture, rev: str | None) -> None:
    """What a first validate left behind, but its result: the timed run reads every file
    back from the parse cache and checks them all, as a run does after a change to a
    file (which it parses) or a CI job with a restored `~/.cache/unet`."""
    _prepare_validate_warm(fx, rev)
    for entry in fx.cache_dir.glob("validate-*.json"):
        entry.unlink()


def _prepare_plan_pr_parsed(fx: Fixture, rev: str | None) -> None:
    """The parse cache an earlier plan of the same pull request left: both revisions'
    files are read back (a CI job that keeps `~/.cache/unet` with actions/cache)."""
    _prepare_validate_cold(fx, rev)
    run_unet(_plan_pr_argv(fx, rev), fx, "warm-up")


def _plan_pr_argv(fx: Fixture, rev: str | None) -> list[str]:
    return ["plan", str(fx.repo), "--base", "main", "--head", PR_BRANCH, "--format", "json"]


def _check_plan_pr(fx: Fixture, run: Run) -> Outcome:
    plan = _json_output(run)
    if not plan:
        return Outcome(False, f"{_exited(run)}: {_tail(run)}", errors=-1)
    errors = sum(1 for d in plan.get("diagnostics", []) if d.get("severity") == "error")
    counts = plan.get("counts", {})
    rows = plan.get("row_counts", {})
    note = ("resources " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items()) if v
                                     and k != "no-op")
            + "; rows " + ", ".join(f"{v} {k}" for k, v in sorted(rows.items()) if v))
    return Outcome(run.exit_code == 0 and bool(plan.get("valid")) and
                   bool(plan.get("has_changes")), note, errors)


def _live_argv(command: str) -> Callable[[Fixture, str | None], list[str]]:
    def argv(fx: Fixture, rev: str | None) -> list[str]:
        if command == "apply":
            return ["apply", str(fx.live), "--auto-approve", "--manager", "ovn"]
        return ["reconcile", "--once", "--path", str(fx.live), "--manager", "ovn",
                "--state-dir", str(fx.state_dir)]
    return argv


def _prepare_apply(fx: Fixture, rev: str | None) -> None:
    fx.applied = False
    fx.nb.start()
    _prepare_validate_cold(fx, rev)


def _check_apply(fx: Fixture, run: Run) -> Outcome:
    done = [line for line in run.stdout().splitlines() if line.startswith("Apply complete")]
    ok = run.exit_code == 0 and bool(done)
    fx.applied = ok
    return Outcome(ok, done[0] if done else f"{_exited(run)}: {_tail(run)}",
                   errors=0 if ok else 1)


def ensure_applied(fx: Fixture) -> None:
    """The server holds the live repo, applied (a fresh server and an untimed apply)."""
    if fx.applied and fx.nb.pid() is not None:
        return
    _prepare_apply(fx, None)
    run = run_unet(_live_argv("apply")(fx, None), fx, "setup-apply")
    if not _check_apply(fx, run).ok:
        raise BenchError(f"the untimed apply failed: {_tail(run)}")


def _reconcile_record(run: Run) -> dict[str, Any]:
    """The JSON line `unet reconcile` logs for its run (standard error)."""
    for line in reversed(run.stderr().splitlines()):
        if line.startswith("{") and '"event": "reconcile"' in line:
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                return record
    return {}


def _check_reconcile(expect: str) -> Callable[[Fixture, Run], Outcome]:
    def check(fx: Fixture, run: Run) -> Outcome:
        record = _reconcile_record(run)
        result = record.get("result")
        note = (f"{result}: {record.get('message', _tail(run))}" if record
                else f"{_exited(run)}: {_tail(run)}")[:120]
        if expect == "applied":
            ok = result == "applied" and int(record.get("repaired", 0)) >= fx.drifted > 0
        else:
            ok = result == expect
        return Outcome(ok and run.exit_code == 0, note, errors=0 if ok else 1)
    return check


def _prepare_reconcile_noop(fx: Fixture, rev: str | None) -> None:
    ensure_applied(fx)
    _prepare_validate_cold(fx, rev)  # the untimed apply left the parse cache warm


def _prepare_drift(fx: Fixture, rev: str | None) -> None:
    ensure_applied(fx)
    _prepare_validate_cold(fx, rev)
    fx.drifted = make_drift(fx.nb)


def make_drift(nb: NbServer, share: float = 0.01) -> int:
    """Change the addresses of 1% of our Logical_Switch_Ports and delete 1% of our ACLs,
    in one ovn-nbctl transaction; return how many rows changed."""
    ports = sorted((row for row in nb.rows("Logical_Switch_Port", "_uuid,name,external_ids")
                    if row["external_ids"].get("unet:installation") == INSTALLATION),
                   key=lambda row: row["name"])
    groups = sorted((row for row in nb.rows("Port_Group", "_uuid,name,acls,external_ids")
                     if row["external_ids"].get("unet:installation") == INSTALLATION),
                    key=lambda row: row["name"])
    acls = [(group["_uuid"], acl) for group in groups for acl in sorted(group["acls"])]
    commands: list[str] = []
    changed_ports, deleted_acls = _spread(ports, share), _spread(acls, share)
    for n, port in enumerate(changed_ports):
        address = f"02:de:ad:{n >> 16 & 0xFF:02x}:{n >> 8 & 0xFF:02x}:{n & 0xFF:02x} " \
                  f"10.99.{n >> 8 & 0xFF}.{n & 0xFF}"
        commands += ["--", "set", "Logical_Switch_Port", port["_uuid"],
                     f'addresses="{address}"']
    for group, acl in deleted_acls:
        commands += ["--", "remove", "Port_Group", group, "acls", acl]
    nb.nbctl(*commands)
    return len(changed_ports) + len(deleted_acls)


def _spread(items: Sequence[Any], share: float) -> list[Any]:
    """`share` of the items (at least one), evenly spread over them."""
    if not items:
        return []
    count = max(1, round(len(items) * share))
    return [items[i * len(items) // count] for i in range(count)]


def _verify_no_changes(fx: Fixture) -> str | None:
    """After the repair, a live plan must be empty."""
    run = run_unet(["plan", str(fx.live), "--manager", "ovn", "--detailed-exitcode"], fx,
                   "verify-plan")
    if run.exit_code != 0:
        return f"the plan after the repair is not empty ({_exited(run)}): {_tail(run)}"
    return None


STAGES: dict[str, Stage] = {
    "validate": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_cold,
                      title="validate, cold (no cached result)"),
    "validate-warm": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_warm,
                           title="validate, warm (right after a first validate)"),
    "validate-parsed": Stage(_validate_argv, _check_validate, prepare=_prepare_validate_parsed,
                             title="validate with the parse cache warm, results cache cold"),
    "plan-pr": Stage(_plan_pr_argv, _check_plan_pr, prepare=_prepare_validate_cold,
                     sources=("rev",),
                     title="PR plan, one tenant changed (--base main --head pr), parse cache "
                           "cold"),
    "plan-pr-parsed": Stage(_plan_pr_argv, _check_plan_pr, prepare=_prepare_plan_pr_parsed,
                            sources=("rev",),
                            title="PR plan, one tenant changed, parse cache warm (from the "
                                  "same plan before)"),
    "apply": Stage(_live_argv("apply"), _check_apply, prepare=_prepare_apply,
                   sources=("folder",), heavy=True,
                   title="initial apply to an empty Northbound (--manager ovn)"),
    "reconcile-noop": Stage(_live_argv("reconcile"), _check_reconcile("ok"),
                            prepare=_prepare_reconcile_noop, sources=("folder",), heavy=True,
                            title="reconcile --once, nothing to do"),
    "reconcile-drift": Stage(_live_argv("reconcile"), _check_reconcile("applied"),
                             prepare=_prepare_drift, verify=_verify_no_changes,
                             sources=("folder",), heavy=True,
                             title="reconcile --once repairing 1% drift (reconcile: repair)"),
    "apply-cluster": Stage(_live_argv("apply"), _check_apply, prepare=_prepare_apply,
                           sources=("folder",), heavy=True, backend="cluster",
                           title="initial apply to an empty 3-member Northbound cluster"),
    "reconcile-noop-cluster": Stage(_live_argv("reconcile"), _check_reconcile("ok"),
                                    prepare=_prepare_reconcile_noop, sources=("folder",),
                                    heavy=True, backend="cluster",
                                    title="reconcile --once, nothing to do, on the cluster"),
}
#: The daemon's stages (daemon.py): a long-running `unet reconcile`, not one command per
#: repetition; each is compared with the one-shot stage it replaces.
DAEMON_STAGES = {"daemon-repair": "reconcile-drift", "daemon-idle": "reconcile-noop",
                 "daemon-commit": "reconcile-noop"}
DAEMON_TITLES = {
    "daemon-repair": "daemon: a hand edit to one row repaired (median of 20, over tables)",
    "daemon-idle": "daemon: a run with nothing changed (CPU per run)",
    "daemon-commit": "daemon: a commit changing one tenant applied after the fetch"}
#: Clustered stages and the standalone stage each is compared with.
CLUSTERED = {"apply-cluster": "apply", "reconcile-noop-cluster": "reconcile-noop"}
SOURCES: dict[str, str | None] = {"folder": None, "rev": "HEAD"}


# --- measuring --------------------------------------------------------------------------------


@dataclass(slots=True)
class Result:
    """The medians of the repetitions of one stage, source and size."""

    stage: str
    source: str
    tenants: int
    manifests: int
    files: int
    wall_s: float
    cpu_s: float
    peak_mib: float
    ok: bool
    note: str
    server_cpu_s: float = 0.0  # the Northbound server's CPU time during the run
    errors: int = 0
    warnings: int = 0
    walls: list[float] = field(default_factory=list)
    peaks: list[float] = field(default_factory=list)
    load: float = 0.0  # 1-minute load average before the runs: other work on the machine
    time_ratio: float | None = None  # against the previous size of the same stage and source
    cpu_ratio: float | None = None
    size_ratio: float | None = None


def measure(stage: str, source: str, fx: Fixture, repeat: int) -> Result:
    """Run one stage `repeat` times; the medians (a run that is not clean makes it not ok)."""
    spec = STAGES[stage]
    with fx.backend(spec.backend):
        return _measure(stage, spec, source, fx, repeat)


def _measure(stage: str, spec: Stage, source: str, fx: Fixture, repeat: int) -> Result:
    runs: list[Run] = []
    outcomes: list[Outcome] = []
    load = os.getloadavg()[0]
    print(f"  {stage} ({source}) x{repeat} ...", end="", file=sys.stderr, flush=True)
    for _ in range(repeat):
        if spec.prepare is not None:
            spec.prepare(fx, SOURCES[source])
        warm_page_cache(fx.repo if spec.sources != ("folder",) else fx.live)
        run = run_unet(spec.argv(fx, SOURCES[source]), fx, stage)
        runs.append(run)
        outcomes.append(spec.check(fx, run))
        print(f" {run.wall_s:.1f}s", end="", file=sys.stderr, flush=True)
    problem = spec.verify(fx) if spec.verify is not None and all(o.ok for o in outcomes) \
        else None
    last = outcomes[-1]
    bad = next((o for o in outcomes if not o.ok), None)
    note = bad.note if bad is not None else (problem or last.note)
    print(" ok" if bad is None and problem is None else f" NOT CLEAN: {note}",
          file=sys.stderr)
    return Result(
        stage=stage, source=source, tenants=fx.tenants,
        manifests=int(fx.meta["manifests"]), files=int(fx.meta.get("files", 0)),
        wall_s=statistics.median(r.wall_s for r in runs),
        cpu_s=statistics.median(r.cpu_s for r in runs),
        peak_mib=statistics.median(r.peak_mib for r in runs),
        ok=bad is None and problem is None, note=note,
        server_cpu_s=statistics.median(r.server_cpu_s for r in runs),
        errors=max(o.errors for o in outcomes), warnings=last.warnings,
        walls=[round(r.wall_s, 3) for r in runs], peaks=[round(r.peak_mib, 1) for r in runs],
        load=round(load, 2),
    )


def warm_page_cache(repo: Path) -> None:
    """Read every file of the repo, .git included, so that runs measure unet, not the disk.

    A CI job validates a checkout it has just written, so its files are in the page
    cache; on this VM the kernel reclaims idle page cache within seconds (DAMON).
    """
    for folder, _dirs, names in os.walk(repo):
        for name in names:
            try:
                with open(os.path.join(folder, name), "rb") as handle:
                    while handle.read(1 << 20):
                        pass
            except OSError:
                continue


# --- repos of every size, cached in the work folder -------------------------------------------


def prepared_repo(work: Path, tenants: int) -> tuple[Path, Path, dict[str, Any]]:
    """The repo of `tenants` tenants under `work` (generated and committed, with the pull
    request's branch) and its live copy, unless cached."""
    home = work / f"tenants-{tenants}"
    meta_path = home / "meta.json"
    repo, live = home / "repo", home / "live"
    if meta_path.is_file():
        meta = json.loads(meta_path.read_text())
        if meta.get("generator") == GENERATOR_VERSION and meta.get("tenants") == tenants \
                and live.is_dir():
            return repo, live, meta
    if home.exists():
        shutil.rmtree(home)
    start = time.perf_counter()
    manifests = generate_repo(repo, tenants)
    generate_s = time.perf_counter() - start
    start = time.perf_counter()
    _commit(repo)
    commit_s = time.perf_counter() - start
    generate_repo(live, tenants, northbound="${" + NB_ENV + "}", reconcile="repair")
    # Not rglob over the repo: a background `git gc --auto` may be pruning .git/objects.
    files = 1 + sum(1 for top in ("provider", "tenants") for _ in (repo / top).rglob("*.yaml"))
    meta = {"generator": GENERATOR_VERSION, "tenants": tenants, "manifests": manifests,
            "files": files, "generate_s": round(generate_s, 3), "commit_s": round(commit_s, 3)}
    meta_path.write_text(json.dumps(meta, indent=2) + "\n")
    return repo, live, meta


_GIT_ENV = {"GIT_AUTHOR_NAME": "unet-bench", "GIT_AUTHOR_EMAIL": "bench@unet.invalid",
            "GIT_COMMITTER_NAME": "unet-bench", "GIT_COMMITTER_EMAIL": "bench@unet.invalid",
            "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z",
            "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _git(repo: Path, *args: str, text: str | None = None,
         env: dict[str, str] | None = None) -> str:
    result = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo,
                            env={**os.environ, **_GIT_ENV, **(env or {})}, input=text,
                            capture_output=True, text=True, check=True)
    return result.stdout.strip()


def _commit(repo: Path) -> None:
    """Make the generated folder a Git repo: `main` with one commit, for `--rev HEAD`, and
    `pr` on top of it with the pull request of `plan-pr` (written with plumbing: the
    working folder stays as generated)."""
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "generated")
    index = {"GIT_INDEX_FILE": str(repo / ".git" / "bench-pr-index")}
    _git(repo, "read-tree", "main", env=index)
    for path, text in pr_change().items():
        blob = _git(repo, "hash-object", "-w", "--stdin", text=text)
        _git(repo, "update-index", "--cacheinfo", f"100644,{blob},{path}", env=index)
    tree = _git(repo, "write-tree", env=index)
    commit = _git(repo, "commit-tree", tree, "-p", "main", "-m",
                  f"tenant-{PR_TENANT:05d}: one more VM, one rule changed")
    _git(repo, "update-ref", f"refs/heads/{PR_BRANCH}", commit)
    Path(index["GIT_INDEX_FILE"]).unlink(missing_ok=True)


# --- comparisons, measured in the same run ----------------------------------------------------


@dataclass(slots=True)
class Comparison:
    """unet against another tool doing the same work, on the same size."""

    name: str
    tenants: int
    unet: str  # what was measured of unet
    other: str  # and of the other tool
    unet_wall_s: float
    unet_cpu_s: float
    other_wall_s: float
    other_cpu_s: float
    unet_server_cpu_s: float = 0.0
    other_server_cpu_s: float = 0.0
    ok: bool = True
    note: str = ""
    load: float = 0.0

    @property
    def wall_ratio(self) -> float:
        """unet's wall time over the other's: below 1, unet is faster."""
        return self.unet_wall_s / self.other_wall_s if self.other_wall_s else math.inf

    @property
    def cpu_ratio(self) -> float:
        other = self.other_cpu_s + self.other_server_cpu_s
        unet = self.unet_cpu_s + self.unet_server_cpu_s
        return unet / other if other else math.inf


def _tool(name: str) -> str | None:
    beside = Path(sys.executable).parent / name  # the venv's own, first
    return str(beside) if beside.is_file() else shutil.which(name)


def split_repo(fx: Fixture) -> tuple[Path, list[str]]:
    """The repo's manifests, one document per file (check-jsonschema reads one document
    per YAML file); written once per size, untimed."""
    root = fx.repo.parent / "split"
    listing = root / "files.txt"
    if listing.is_file():
        return root, listing.read_text().split()
    if root.exists():
        shutil.rmtree(root)
    names: list[str] = []
    for number, path in enumerate(sorted(fx.repo.rglob("*.yaml"))):
        if ".git" in path.parts:
            continue
        text = path.read_text()
        documents = [d for d in text.split("\n---\n")
                     if "apiVersion:" in d]  # the header comment is not a document
        folder = root / f"{number // 1000:03d}"
        folder.mkdir(parents=True, exist_ok=True)
        for index, document in enumerate(documents):
            name = f"{folder.name}/{number % 1000:03d}-{index:02d}.yaml"
            (root / name).write_text(document if document.endswith("\n")
                                     else document + "\n")
            names.append(name)
    listing.write_text("\n".join(names) + "\n")
    return root, names


def bundled_schema(target: Path) -> Path:
    """The per-kind schemas unet checks shapes with (not the editors' unet.schema.json,
    which adds rules unet reports from its semantic stage), each embedded under its own
    $id behind a switch on the kind, so a validator resolves the `$ref`s without the
    network."""
    folder = Path(__file__).resolve().parent.parent / "schemas"
    kinds = [json.loads(path.read_text()) for path in sorted(folder.glob("*.schema.json"))
             if path.name != "unet.schema.json"]
    top = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "type": "object",
        "required": ["apiVersion", "kind"],
        "properties": {"kind": {"enum": [schema["title"] for schema in kinds]}},
        "allOf": [{"if": {"properties": {"kind": {"const": schema["title"]}},
                          "required": ["kind"]},
                   "then": {"$ref": schema["$id"]}} for schema in kinds],
        "$defs": {f"bundled:{schema['title']}": schema for schema in kinds},
    }
    target.write_text(json.dumps(top))
    return target


def _chunks_of_args(names: list[str], limit: int = 1_000_000) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for name in names:
        if chunk and size + len(name) + 1 > limit:
            yield chunk
            chunk, size = [], 0
        chunk.append(name)
        size += len(name) + 1
    if chunk:
        yield chunk


def compare_schema(fx: Fixture, unet: Result | None, repeat: int) -> Comparison:
    """unet validate (cold, folder) against check-jsonschema on the same documents."""
    tool = _tool("check-jsonschema")
    if unet is None:
        unet = measure("validate", "folder", fx, repeat)
    if tool is None:
        return Comparison("validate vs check-jsonschema", fx.tenants, "validate", "missing",
                          unet.wall_s, unet.cpu_s, 0, 0, ok=False,
                          note="check-jsonschema is not installed: pip install -e '.[bench]'")
    root, names = split_repo(fx)
    schema = bundled_schema(fx.scratch / "unet.bundled.schema.json")
    load = os.getloadavg()[0]
    walls, cpus, ok = [], [], True
    print(f"  check-jsonschema on {len(names):,} documents x{repeat} ...", end="",
          file=sys.stderr, flush=True)
    for _ in range(repeat):
        warm_page_cache(root)
        wall = cpu = 0.0
        for chunk in _chunks_of_args(names):
            run = run_child([tool, "--schemafile", str(schema), *chunk], fx,
                            "check-jsonschema", cwd=root)
            wall, cpu = wall + run.wall_s, cpu + run.cpu_s
            ok = ok and run.exit_code == 0
        walls.append(wall)
        cpus.append(cpu)
        print(f" {wall:.1f}s", end="", file=sys.stderr, flush=True)
    print("" if ok else f" FAILED: {_tail(run)}", file=sys.stderr)
    return Comparison("validate vs check-jsonschema", fx.tenants,
                      "unet validate, cold (schema + models + every semantic check)",
                      f"check-jsonschema, schema only, {len(names):,} single-document files",
                      unet.wall_s, unet.cpu_s, statistics.median(walls),
                      statistics.median(cpus), ok=ok and unet.ok, load=round(load, 2),
                      note="" if ok else f"check-jsonschema failed: {_tail(run)}")


# -- initial apply against an ovn-nbctl script ----------------------------------------------


def _nbctl_value(value: Any) -> str:
    """A column value in ovn-nbctl's (ovs-vsctl's) syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}={_nbctl_value(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_nbctl_value(v) for v in value) + "]"
    raise BenchError(f"cannot write {value!r} for ovn-nbctl")


def nbctl_script(plan: dict[str, Any]) -> list[list[str]]:
    """The initial load of a live plan as ovn-nbctl invocations, one per tenant (provider
    rows first), each one transaction of `--`-chained commands: the same rows, the same
    columns and the same external_ids as `unet apply` writes."""
    from managers.ovn.render import PARENT_COLUMNS
    from reconciler.objects import TAG_HASH, TAG_INSTALLATION, TAG_KEY, TAG_OWNER
    from reconciler.plan_io import changes_from_json

    changes = {c.uid: c for c in changes_from_json(plan)}
    order = [step.split(" ", 1)[1] for wave in plan["waves"] for step in wave["steps"]
             if step.startswith("create ")]
    objects = [changes[uid].after for uid in order if changes[uid].after is not None]
    groups: dict[str, list[Any]] = {}
    for obj in objects:
        groups.setdefault(obj.key.split("/")[1], []).append(obj)
    by_key = {obj.key: obj for obj in objects}
    tenant_groups = sorted(g for g in groups if g.startswith("tenant-"))
    ordered = [g for g in sorted(groups) if g not in tenant_groups] + tenant_groups
    invocations = []
    for group in ordered:
        members = groups[group]
        ids = {obj.key: f"@r{n}" for n, obj in enumerate(members)}
        children: dict[str, dict[str, list[str]]] = {}
        commands: list[str] = []
        for obj in members:
            if obj.parent is not None and obj.parent[0] in ids:
                children.setdefault(obj.parent[0], {}).setdefault(obj.parent[1], []).append(
                    ids[obj.key])
        for obj in members:
            values = [f"{name}={_nbctl_value(value)}" for name, value in obj.fields.items()
                      if value is not None]
            for column, targets in obj.refs.items():
                missing = [t for t in targets if t not in ids]
                if missing:
                    raise BenchError(f"{obj.key} refers to {missing[0]} of another tenant")
                values.append(f"{column}=[{','.join(ids[t] for t in targets)}]")
            for column, members_ids in children.get(obj.key, {}).items():
                assert column in PARENT_COLUMNS[obj.table]
                values.append(f"{column}=[{','.join(members_ids)}]")
            tags = {**obj.meta, TAG_INSTALLATION: plan["installation"],
                    TAG_OWNER: obj.owner, TAG_KEY: obj.key, TAG_HASH: obj.content_hash}
            values.append(f"external_ids={_nbctl_value(tags)}")
            commands += ["--", f"--id={ids[obj.key]}", "create", obj.table, *values]
            if obj.parent is not None and obj.parent[0] not in ids:
                parent = by_key[obj.parent[0]]
                commands += ["--", "add", parent.table, parent.fields["name"], obj.parent[1],
                             ids[obj.key]]
        invocations.append(commands)
    return invocations


def compare_nbctl(fx: Fixture, unet: Result | None, heavy: int, check_equal: bool) -> Comparison:
    """unet's initial apply against an ovn-nbctl script loading the same rows."""
    if unet is None:
        unet = measure("apply", "folder", fx, heavy)
    fx.nb.start()
    fx.applied = False
    planned = run_unet(["plan", str(fx.live), "--manager", "ovn", "--format", "json"], fx,
                       "nbctl-plan")
    plan = _json_output(planned)
    if not plan:
        raise BenchError(f"the plan for the ovn-nbctl script failed: {_tail(planned)}")
    invocations = nbctl_script(plan)
    rows = sum(1 for c in plan["backend_changes"] if "create" in c["actions"])
    del plan
    fx.nb.start()
    load = os.getloadavg()[0]
    print(f"  ovn-nbctl script: {len(invocations):,} invocations, {rows:,} rows ...", end="",
          file=sys.stderr, flush=True)
    script = fx.scratch / "nbctl-script.sh"
    script.write_text("".join(f"ovn-nbctl --db={fx.nb.remote} "
                              + " ".join(_shell(a) for a in args) + "\n"
                              for args in invocations[:3]) + "# ...\n")
    server_before = fx.nb.cpu_s()
    wall = cpu = 0.0
    ok, note = True, ""
    start = time.perf_counter()
    for args in invocations:
        run = run_child(["ovn-nbctl", f"--db={fx.nb.remote}", *args], fx, "nbctl")
        cpu += run.cpu_s
        if run.exit_code != 0:
            ok, note = False, f"ovn-nbctl failed: {_tail(run)}"
            break
    wall = time.perf_counter() - start
    server_cpu = fx.nb.cpu_s() - server_before
    print(f" {wall:.1f}s", file=sys.stderr)
    if ok:
        loaded = sum(1 for table in OVN_TABLES
                     for row in fx.nb.rows(table, "external_ids")
                     if row["external_ids"].get("unet:installation") == INSTALLATION)
        if loaded != rows:
            ok, note = False, f"the script loaded {loaded:,} rows, the plan has {rows:,}"
        else:
            note = f"{rows:,} rows in {len(invocations):,} invocations"
    if ok and check_equal:
        verify = run_unet(["plan", str(fx.live), "--manager", "ovn", "--detailed-exitcode"], fx,
                          "nbctl-verify")
        if verify.exit_code != 0:
            ok, note = False, "after the script, unet plans changes: the rows differ"
        else:
            note += "; unet plans no change after it (same rows)"
    return Comparison("initial apply vs ovn-nbctl script", fx.tenants,
                      "unet apply (validate, observe, plan, apply, confirm)",
                      "ovn-nbctl, one invocation (one transaction) per tenant",
                      unet.wall_s, unet.cpu_s, wall, cpu, unet.server_cpu_s, server_cpu,
                      ok=ok and unet.ok, note=note, load=round(load, 2))


def _shell(arg: str) -> str:
    import shlex

    return shlex.quote(arg)


# -- observe against ovn-nbctl list -----------------------------------------------------------

_OBSERVE_DRIVER = """\
import json, sys, time
start = time.perf_counter()
from managers.ovn.live import Northbound
imported = time.perf_counter()
nb = Northbound(sys.argv[1])
connected = time.perf_counter()
observed = nb.observe(sys.argv[2], sys.argv[3])
done = time.perf_counter()
nb.close()
print(json.dumps({"import_s": imported - start, "connect_s": connected - imported,
                  "observe_s": done - connected, "objects": len(observed.objects)}))
"""


def compare_observe(fx: Fixture, repeat: int) -> Comparison:
    """unet's observe (connect: the leader found, the schema read; observe: our rows as objects),
    in a fresh process, against `ovn-nbctl list` of the same 11 tables."""
    ensure_applied(fx)
    load = os.getloadavg()[0]
    print(f"  observe vs ovn-nbctl list x{repeat} ...", end="", file=sys.stderr, flush=True)
    inner, outer, lists = [], [], []
    objects = 0
    ok = True
    for _ in range(repeat):
        run = run_child([sys.executable, "-c", _OBSERVE_DRIVER, fx.nb.remote, INSTALLATION,
                         "ovn"], fx, "observe")
        timings = _json_output(run)
        ok = ok and run.exit_code == 0 and bool(timings)
        if not ok:
            break
        objects = int(timings["objects"])
        inner.append((timings["connect_s"] + timings["observe_s"], timings))
        outer.append(run)
        command = ["ovn-nbctl", f"--db={fx.nb.remote}", "--format=json", "list",
                   OVN_TABLES[0]]
        for table in OVN_TABLES[1:]:
            command += ["--", "list", table]
        lists.append(run_child(command, fx, "nbctl-list", stdout=Path(os.devnull)))
        print(f" {inner[-1][0]:.1f}s/{lists[-1].wall_s:.1f}s", end="", file=sys.stderr,
              flush=True)
    print("" if ok else f" FAILED: {_tail(run)}", file=sys.stderr)
    if not ok:
        return Comparison("observe vs ovn-nbctl list", fx.tenants, "observe", "list", 0, 0,
                          0, 0, ok=False, note=f"the observe driver failed: {_tail(run)}")
    seconds = statistics.median(s for s, _ in inner)
    middle = sorted(inner, key=lambda item: item[0])[len(inner) // 2][1]
    return Comparison(
        "observe vs ovn-nbctl list", fx.tenants,
        "Northbound() + observe() in a fresh process (imports excluded)",
        "ovn-nbctl --format=json list of the 11 tables (to /dev/null)",
        seconds, statistics.median(r.cpu_s for r in outer),
        statistics.median(r.wall_s for r in lists), statistics.median(r.cpu_s for r in lists),
        statistics.median(r.server_cpu_s for r in outer),
        statistics.median(r.server_cpu_s for r in lists), ok=True, load=round(load, 2),
        note=f"{objects:,} objects; connect {middle['connect_s']:.2f} s, observe "
             f"{middle['observe_s']:.2f} s; unet cpu is the whole process")


def compare_cluster(fx: Fixture, clustered: Result, standalone: Result) -> Comparison:
    """A stage on the 3-member cluster against the same stage on one server, measured in
    the same run (their figures are in the stages' tables too)."""
    cluster = fx.servers.get("cluster")
    elections = cluster.elections() if isinstance(cluster, ClusterServer) else 0
    return Comparison(
        f"{standalone.stage}: 3-member cluster vs standalone", fx.tenants,
        f"{clustered.stage}: three ovsdb-servers in one Raft cluster, unix sockets",
        f"{standalone.stage}: one standalone ovsdb-server",
        clustered.wall_s, clustered.cpu_s, standalone.wall_s, standalone.cpu_s,
        clustered.server_cpu_s, standalone.server_cpu_s, ok=clustered.ok and standalone.ok,
        note=f"NB cpu is the 3 members' together; {elections} election(s) in the members' "
             "logs (1: no leader change)", load=clustered.load)


COMPARISONS = ("schema", "nbctl", "observe", "cluster")


# --- where the time goes ----------------------------------------------------------------------


@dataclass(slots=True)
class Profile:
    stage: str
    tenants: int
    seconds: float
    text: Path  # pyinstrument's call tree
    top_inclusive: list[tuple[str, float]]  # (function, share of the run), our code
    top_self: list[tuple[str, float]]  # (function, share), any code


def profile_stage(stage: str, fx: Fixture, work: Path) -> Profile | None:
    """Run one stage once more under pyinstrument; its call tree and its top costs."""
    with fx.backend(STAGES[stage].backend):
        return _profile_stage(stage, fx, work)


def _profile_stage(stage: str, fx: Fixture, work: Path) -> Profile | None:
    spec = STAGES[stage]
    if _tool("pyinstrument") is None:
        print("pyinstrument is not installed (pip install -e '.[bench]'): no profile",
              file=sys.stderr)
        return None
    source = spec.sources[0]
    if spec.prepare is not None:
        spec.prepare(fx, SOURCES[source])
    warm_page_cache(fx.repo if spec.sources != ("folder",) else fx.live)
    session = work / f"profile-{stage}-{fx.tenants}.pyisession"
    text = session.with_suffix(".txt")
    print(f"  profiling {stage} at {fx.tenants} tenants ...", end="", file=sys.stderr,
          flush=True)
    run = run_child([sys.executable, "-m", "pyinstrument", "-r", "session", "-o", str(session),
                     "-m", "reconciler.cli", *spec.argv(fx, SOURCES[source])], fx, "profile")
    print(f" {run.wall_s:.1f}s", file=sys.stderr)
    if not session.is_file():
        print(f"the profile failed: {_tail(run)}", file=sys.stderr)
        return None
    subprocess.run([sys.executable, "-m", "pyinstrument", "--load", str(session), "-r", "text",
                    "--show-all", "-o", str(text)], check=False, capture_output=True)
    if not text.is_file():
        subprocess.run([sys.executable, "-m", "pyinstrument", "--load", str(session), "-r",
                        "text", "-o", str(text)], check=False, capture_output=True)
    from pyinstrument.session import Session

    loaded = Session.load(str(session))
    root = loaded.root_frame()
    if root is None:
        return None
    total = root.time or 1.0
    inclusive: dict[str, float] = {}
    own: dict[str, float] = {}

    def walk(frame: Any, active: frozenset[str]) -> None:
        name = f"{frame.function} ({frame.file_path_short}:{frame.line_no})" \
            if frame.function else str(frame.identifier)
        if frame.function and not str(frame.function).startswith("["):
            if name not in active:  # recursion: count a function once per stack
                inclusive[name] = inclusive.get(name, 0.0) + frame.time
            own[name] = own.get(name, 0.0) + frame.total_self_time
        for child in frame.children:
            walk(child, active | {name})

    walk(root, frozenset())
    source_dir = str(Path(__file__).resolve().parent.parent)

    def ours(name: str) -> bool:
        return ("reconciler/" in name or "managers/" in name) and "bench.py" not in name \
            and "site-packages" not in name and source_dir.split("/")[-1] != name

    top_inclusive = sorted(((n, t / total) for n, t in inclusive.items() if ours(n)),
                           key=lambda item: -item[1])[:20]
    top_self = sorted(((n, t / total) for n, t in own.items()), key=lambda item: -item[1])[:20]
    return Profile(stage, fx.tenants, total, text, top_inclusive, top_self)


# --- report -----------------------------------------------------------------------------------


def add_growth(results: list[Result]) -> None:
    """Fill time and size ratios against the previous size of each stage and source."""
    previous: dict[tuple[str, str], Result] = {}
    for result in sorted(results, key=lambda r: r.tenants):
        key = (result.stage, result.source)
        before = previous.get(key)
        if before is not None and before.wall_s > 0 and before.manifests > 0:
            result.time_ratio = result.wall_s / before.wall_s
            result.cpu_ratio = result.cpu_s / before.cpu_s if before.cpu_s > 0 else None
            result.size_ratio = result.manifests / before.manifests
        previous[key] = result


#: The bar (issue "Scale"): at BAR_TENANTS, wall seconds per stage; memory for any stage;
#: growth from BAR_TENANTS to the next size.
BAR_TENANTS = 1000
BAR_WALL_S = {"validate": 10.0, "validate-warm": 2.0, "plan-pr": 15.0, "apply": 120.0,
              "reconcile-noop": 20.0}
BAR_PEAK_MIB = 2048.0
BAR_GROWTH = 3.5


@dataclass(frozen=True, slots=True)
class Verdict:
    bar: str
    limit: str
    measured: str
    met: bool
    by: str  # how far over (or under) the limit


def verdicts(results: list[Result]) -> list[Verdict]:
    """Every bar that the results can say something about."""
    out = []
    at = {(r.stage, r.source): r for r in results if r.tenants == BAR_TENANTS}
    for stage, limit in BAR_WALL_S.items():
        result = at.get((stage, STAGES[stage].sources[0])) or at.get((stage, "folder"))
        if result is None:
            continue
        out.append(Verdict(f"{stage} at {BAR_TENANTS} tenants", f"≤ {limit:g} s",
                           f"{result.wall_s:.1f} s (cpu {result.cpu_s:.1f} s)",
                           result.wall_s <= limit, f"×{result.wall_s / limit:.2f} of the bar"))
    if at:
        worst = max(at.values(), key=lambda r: r.peak_mib)
        out.append(Verdict(f"peak memory at {BAR_TENANTS} tenants, any stage",
                           f"≤ {BAR_PEAK_MIB:.0f} MiB", f"{worst.peak_mib:.0f} MiB ({worst.stage})",
                           worst.peak_mib <= BAR_PEAK_MIB,
                           f"×{worst.peak_mib / BAR_PEAK_MIB:.2f} of the bar"))
    bigger = sorted({r.tenants for r in results if r.tenants > BAR_TENANTS})
    if bigger and at:
        nxt = bigger[0]
        for r in results:
            if r.tenants == nxt and r.time_ratio is not None:
                out.append(Verdict(f"growth of {r.stage} ({r.source}), {BAR_TENANTS} → {nxt}",
                                   f"≤ ×{BAR_GROWTH:g}",
                                   f"×{r.time_ratio:.2f} wall, ×{r.cpu_ratio or 0:.2f} cpu",
                                   r.time_ratio <= BAR_GROWTH,
                                   f"size ×{r.size_ratio or 0:.2f}"))
    return out


_COLUMNS = ("stage", "source", "tenants", "manifests", "wall s", "cpu s", "peak MiB",
            "NB cpu s", "×wall", "×cpu", "×size", "load", "clean")


def _row(r: Result) -> tuple[str, ...]:
    return (r.stage, r.source, f"{r.tenants:,}", f"{r.manifests:,}", f"{r.wall_s:.2f}",
            f"{r.cpu_s:.2f}", f"{r.peak_mib:.0f}",
            f"{r.server_cpu_s:.2f}" if r.server_cpu_s else "-",
            f"{r.time_ratio:.2f}" if r.time_ratio else "-",
            f"{r.cpu_ratio:.2f}" if r.cpu_ratio else "-",
            f"{r.size_ratio:.2f}" if r.size_ratio else "-", f"{r.load:.1f}",
            "yes" if r.ok else f"NO: {r.note}")


def format_table(results: list[Result]) -> str:
    """A fixed-width table of the results."""
    rows = [_COLUMNS, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return "\n".join("  ".join(cell.rjust(w) if 1 < i < len(row) - 1 else cell.ljust(w)
                               for i, (cell, w) in enumerate(zip(row, widths, strict=True)))
                     for row in rows)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]], right_from: int = 1) -> str:
    lines = ["| " + " | ".join(header) + " |",
             "|" + "|".join("---:" if i >= right_from else "---"
                            for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def format_comparisons(comparisons: list[Comparison], markdown: bool = False) -> str:
    header = ("comparison", "tenants", "unet wall s", "unet cpu s", "other wall s",
              "other cpu s", "NB cpu s (unet / other)", "wall ratio", "cpu ratio", "note")
    rows = [(c.name, f"{c.tenants:,}", f"{c.unet_wall_s:.2f}", f"{c.unet_cpu_s:.2f}",
             f"{c.other_wall_s:.2f}", f"{c.other_cpu_s:.2f}",
             f"{c.unet_server_cpu_s:.2f} / {c.other_server_cpu_s:.2f}"
             if c.unet_server_cpu_s or c.other_server_cpu_s else "-",
             f"{c.wall_ratio:.2f}", f"{c.cpu_ratio:.2f}",
             c.note if c.ok else f"NOT CLEAN: {c.note}") for c in comparisons]
    if markdown:
        return _md_table(header, rows, right_from=1)
    return "\n".join("  ".join(row) for row in [header, *rows])


def render_markdown(report: dict[str, Any], results: list[Result],
                    comparisons: list[Comparison], profile: Profile | None) -> str:
    """The figures as docs/performance.md holds them."""
    m = report["machine"]
    out = [f"Measured {report['date']} on {m['cpu']}, {m['cores']} cores, "
           f"{m['memory_gib']:.0f} GiB RAM; Python {m['python']}; {m['ovn']}, {m['ovsdb']}; "
           f"python-ovs JSON parser: {m['ovs_json_parser']}; "
           f"unet {m['code'].get('commit', '?')[:12]}"
           f"{' (modified)' if m['code'].get('modified') else ''}. Load average "
           f"{report['load_before']:.1f} before, {report['load_after']:.1f} after; the run took "
           f"{report['seconds'] / 60:.0f} min.", ""]
    header = ("stage", "source", "tenants", "manifests", "wall s", "cpu s", "peak MiB",
              "NB cpu s", "×wall", "×cpu", "×size", "load", "clean")
    for stage in dict.fromkeys(r.stage for r in results):
        title = STAGES[stage].title if stage in STAGES else DAEMON_TITLES[stage]
        out += [f"**{stage}** — {title}", "",
                _md_table(header, [(*_row(r)[:-1], "yes" if r.ok else f"NO: {r.note}")
                                   for r in results if r.stage == stage], right_from=2), ""]
    if comparisons:
        out += ["**Comparisons** (ratio = unet ÷ other; below 1, unet is faster; cpu ratio "
                "counts the Northbound server's CPU on both sides)", "",
                format_comparisons(comparisons, markdown=True), ""]
    verdict_rows = [(v.bar, v.limit, v.measured, "met" if v.met else "**missed**", v.by)
                    for v in verdicts(results)]
    if verdict_rows:
        out += ["**The bar**", "", _md_table(("bar", "limit", "measured", "", "by"),
                                              verdict_rows, right_from=99), ""]
    if profile is not None:
        out += [f"**Profile** of {profile.stage} at {profile.tenants:,} tenants "
                f"({profile.seconds:.1f} s under pyinstrument)", "",
                _md_table(("function (inclusive, our code)", "share"),
                          [(f"`{n}`", f"{s:.0%}") for n, s in profile.top_inclusive
                           if s < 0.95][:12]),  # the entry points are ~100 %: not news
                "", _md_table(("function (self time, any code)", "share"),
                              [(f"`{n}`", f"{s:.0%}") for n, s in profile.top_self[:12]]), ""]
    return "\n".join(out)


def machine() -> dict[str, Any]:
    """What the figures were measured on."""
    cpu = "unknown"
    memory = 0.0
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                memory = int(line.split()[1]) / 1024 / 1024
    except (OSError, ValueError):
        pass
    try:
        import ovs.json

        parser = "C" if getattr(ovs.json, "PARSER", "") == "C" else "pure Python"
    except ImportError:
        parser = "missing"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory,
            "python": platform.python_version(), "platform": platform.platform(),
            "ovn": _first_line(["ovn-nbctl", "--version"]),
            "ovsdb": _first_line(["ovsdb-server", "--version"]),
            "ovs_json_parser": parser, "code": code_version()}


def _first_line(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              check=False).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return f"{command[0]} missing"


def code_version() -> dict[str, Any]:
    """Which unet was measured: the package folder (children import the same one, through
    PYTHONPATH) and its Git commit, when it is a checkout."""
    source = Path(__file__).resolve().parent.parent
    info: dict[str, Any] = {"path": str(source)}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=source, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "reconciler", "managers"],
                               cwd=source, capture_output=True, text=True, check=True).stdout
        info.update(commit=head, modified=bool(dirty.strip()))
    except (OSError, subprocess.CalledProcessError):
        pass
    return info


# --- command line -----------------------------------------------------------------------------


def _int_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a list of integers: {text}") from exc
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("sizes are positive integers")
    return values


def _choice_list(choices: Sequence[str], allow_none: bool = False
                 ) -> Callable[[str], list[str]]:
    def parse(text: str) -> list[str]:
        if allow_none and text.strip() == "none":
            return []
        values = [part.strip() for part in text.split(",") if part.strip()]
        unknown = [v for v in values if v not in choices]
        if unknown or not values:
            raise argparse.ArgumentTypeError(f"choose from {', '.join(choices)}")
        return values
    return parse


def _stage_repeats(text: str) -> dict[str, int]:
    out = {}
    for part in text.split(","):
        name, _, count = part.partition("=")
        if name.strip() not in STAGES or not count.strip().isdigit() or int(count) < 1:
            raise argparse.ArgumentTypeError(f"STAGE=N with a stage of {', '.join(STAGES)}")
        out[name.strip()] = int(count)
    return out


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.bench",
                                     description="Time unet on synthetic repos of growing size.")
    parser.add_argument("--sizes", type=_int_list, default=[100, 1000, 3000],
                        help="tenant counts, comma separated (default 100,1000,3000)")
    parser.add_argument("--stages", type=_choice_list([*STAGES, *DAEMON_STAGES]),
                        default=[*STAGES, *DAEMON_STAGES],
                        help=f"stages to measure: {', '.join([*STAGES, *DAEMON_STAGES])} "
                             "(default all)")
    parser.add_argument("--sources", type=_choice_list(list(SOURCES)), default=["folder"],
                        help="validate reads the folder, Git (--rev HEAD), or both "
                             "(default folder)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs per figure of the light stages; the median (default 3)")
    parser.add_argument("--heavy-repeat", type=int, default=1,
                        help="runs per figure of apply and reconcile (default 1)")
    parser.add_argument("--stage-repeat", type=_stage_repeats, default={},
                        metavar="STAGE=N,...", help="runs per figure of single stages")
    parser.add_argument("--compare", type=_choice_list(COMPARISONS, allow_none=True),
                        default=list(COMPARISONS),
                        help=f"comparisons: {', '.join(COMPARISONS)} or none (default all)")
    parser.add_argument("--full-max", type=int, default=BAR_TENANTS, metavar="TENANTS",
                        help="sizes above this run each stage once and skip the schema and "
                             f"ovn-nbctl comparisons (default {BAR_TENANTS})")
    parser.add_argument("--profile-size", type=int, default=BAR_TENANTS,
                        help="profile the slowest stage at this size, when measured "
                             f"(default {BAR_TENANTS}; 0: no profile)")
    parser.add_argument("--profile-stage", choices=list(STAGES), default=None,
                        help="profile this stage instead of the slowest")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder that caches the generated repos (default: a temporary one)")
    parser.add_argument("--json", type=Path, default=None, metavar="PATH",
                        help="also write the results as JSON")
    parser.add_argument("--markdown", type=Path, default=None, metavar="PATH",
                        help="also write the figures as Markdown (for docs/performance.md)")
    parser.add_argument("--combine", type=lambda text: [Path(p) for p in text.split(",")],
                        default=None, metavar="JSON,JSON",
                        help="measure nothing: report the runs saved with --json together "
                             "(e.g. the small sizes and a long run of the largest)")
    return parser


def combine(paths: list[Path]) -> tuple[dict[str, Any], Report]:
    """Saved reports as one: results and comparisons of every run, growth across them."""
    report = Report()
    summary: dict[str, Any] = {}
    for path in paths:
        saved = json.loads(path.read_text())
        summary = {**saved, "load_before": min(summary.get("load_before", math.inf),
                                               saved["load_before"]),
                   "load_after": max(summary.get("load_after", 0), saved["load_after"]),
                   "seconds": summary.get("seconds", 0) + saved["seconds"]}
        for item in saved["results"]:
            item.update(time_ratio=None, cpu_ratio=None, size_ratio=None)
            report.results.append(Result(**item))
        report.comparisons += [Comparison(**item) for item in saved["comparisons"]]
        if saved.get("profile"):
            item = saved["profile"]
            report.profile = Profile(item["stage"], item["tenants"], item["seconds"],
                                     Path(item["text"]),
                                     [tuple(x) for x in item["top_inclusive"]],  # type: ignore
                                     [tuple(x) for x in item["top_self"]])  # type: ignore
    report.results.sort(key=lambda r: r.tenants)
    report.comparisons.sort(key=lambda c: c.tenants)
    add_growth(report.results)
    return summary, report


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    comparisons: list[Comparison] = field(default_factory=list)
    repos: dict[int, dict[str, Any]] = field(default_factory=dict)
    profile: Profile | None = None


def run_benchmark(args: argparse.Namespace, work: Path) -> Report:
    """Measure every stage on every size, then the comparisons and the profile."""
    report = Report()
    for tenants in sorted(args.sizes):
        repo, live, meta = prepared_repo(work, tenants)
        report.repos[tenants] = meta
        print(f"{tenants} tenants: {meta['manifests']:,} manifests in {meta['files']:,} files "
              f"(generated in {meta['generate_s']:.2f} s)", file=sys.stderr)
        scratch = work / "scratch" / str(tenants)
        scratch.mkdir(parents=True, exist_ok=True)
        nb = NbServer(Path(tempfile.mkdtemp(prefix="unet-nb-")))
        servers = {"standalone": nb}
        if any(stage in STAGES and STAGES[stage].backend == "cluster"
               for stage in args.stages):
            servers["cluster"] = ClusterServer(Path(tempfile.mkdtemp(prefix="unet-cl-")))
        fx = Fixture(tenants, repo, live, scratch, nb, meta, servers=servers)
        try:
            _measure_size(args, fx, work, report)
        finally:
            for server in servers.values():
                server.stop()
                shutil.rmtree(server.root, ignore_errors=True)
    add_growth(report.results)
    busy = [r for r in report.results if r.load > (os.cpu_count() or 1) / 2]
    if busy:
        print(f"note: the machine was busy (1-min load up to {max(r.load for r in busy):.1f} on "
              f"{os.cpu_count()} cores): wall times are inflated; compare cpu s",
              file=sys.stderr)
    return report


def _measure_size(args: argparse.Namespace, fx: Fixture, work: Path, report: Report) -> None:
    light, heavy = max(1, args.repeat), max(1, args.heavy_repeat)
    compare = list(args.compare)
    if fx.tenants > args.full_max:  # a large size: once per stage, the cheap comparison only
        light = heavy = 1
        compare = [c for c in compare if c in ("observe", "cluster")]
    here: dict[tuple[str, str], Result] = {}
    for stage in args.stages:
        if stage in DAEMON_STAGES:
            continue
        spec = STAGES[stage]
        sources = [s for s in args.sources if s in spec.sources] or [spec.sources[0]]
        repeat = args.stage_repeat.get(stage, heavy if spec.heavy else light)
        for source in sources:
            result = measure(stage, source, fx, repeat)
            report.results.append(result)
            here[(stage, source)] = result
        if stage == "validate" and "schema" in compare:
            report.comparisons.append(compare_schema(fx, here.get(("validate", "folder")),
                                                     heavy))
    _measure_daemon(args.stages, fx, report, here)
    if "observe" in compare:
        report.comparisons.append(compare_observe(fx, heavy))
    if args.profile_size == fx.tenants and here:
        stage = args.profile_stage or max((r for r in here.values() if r.stage in STAGES),
                                          key=lambda r: r.wall_s).stage
        report.profile = profile_stage(stage, fx, work)
    if "nbctl" in compare:
        smallest = fx.tenants == min(args.sizes)
        report.comparisons.append(compare_nbctl(fx, here.get(("apply", "folder")), heavy,
                                                check_equal=smallest))
    if "cluster" in compare:
        for clustered, standalone in CLUSTERED.items():
            pair = here.get((clustered, "folder")), here.get((standalone, "folder"))
            if pair[0] is not None and pair[1] is not None:
                report.comparisons.append(compare_cluster(fx, *pair))


def _measure_daemon(stages: Sequence[str], fx: Fixture, report: Report,
                    here: dict[tuple[str, str], Result]) -> None:
    from .daemon import measure_commit, measure_daemon

    wanted = [stage for stage in stages if stage in DAEMON_STAGES]
    if not wanted:
        return
    ensure_applied(fx)
    print(f"  {', '.join(wanted)} ...", end="", file=sys.stderr, flush=True)
    results = [r for r in measure_daemon(fx) if r.stage in wanted] \
        if {"daemon-repair", "daemon-idle"} & set(wanted) else []
    if "daemon-commit" in wanted:
        results.append(measure_commit(fx))
        fx.applied = False  # the commit changed the backend: apply again before other stages
    print(" " + " ".join(f"{r.stage} {r.wall_s:.2f}s" for r in results), file=sys.stderr)
    for result in results:
        report.results.append(result)
        here[(result.stage, "folder")] = result
        one_shot = here.get((DAEMON_STAGES[result.stage], "folder"))
        if one_shot is not None:
            report.comparisons.append(Comparison(
                f"{result.stage} vs {one_shot.stage}", fx.tenants, DAEMON_TITLES[result.stage],
                STAGES[one_shot.stage].title, result.wall_s, result.cpu_s, one_shot.wall_s,
                one_shot.cpu_s, ok=result.ok and one_shot.ok, note=result.note,
                load=result.load))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark; exit 1 when a run was not clean (an error, a crash)."""
    args = build_parser().parse_args(argv)
    if args.combine:
        summary, combined = combine(args.combine)
        _print_report(combined)
        if args.markdown is not None:
            args.markdown.write_text(render_markdown(summary, combined.results,
                                                     combined.comparisons,
                                                     combined.profile) + "\n")
        return 0
    # a SIGTERM unwinds like an interrupt: every server the benchmark started is stopped
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit(143))
    work: Path = args.work or Path(tempfile.mkdtemp(prefix="unet-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load_before = time.monotonic(), os.getloadavg()[0]
    report = run_benchmark(args, work)
    _print_report(report)
    summary = {"machine": machine(), "date": time.strftime("%Y-%m-%d %H:%M %Z"),
               "load_before": load_before, "load_after": os.getloadavg()[0],
               "seconds": time.monotonic() - started, "repeat": args.repeat,
               "heavy_repeat": args.heavy_repeat, "repos": report.repos,
               "results": [asdict(r) for r in report.results],
               "comparisons": [asdict(c) for c in report.comparisons],
               "profile": asdict(report.profile) if report.profile else None}
    if args.json is not None:
        args.json.write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if args.markdown is not None:
        args.markdown.write_text(render_markdown(summary, report.results, report.comparisons,
                                                 report.profile) + "\n")
    if args.work is None:
        shutil.rmtree(work, ignore_errors=True)
    clean = all(r.ok for r in report.results) and all(c.ok for c in report.comparisons)
    return 0 if clean else 1


def _print_report(report: Report) -> None:
    print(format_table(report.results))
    if report.comparisons:
        print()
        print(format_comparisons(report.comparisons))
    for verdict in verdicts(report.results):
        print(f"{'met   ' if verdict.met else 'MISSED'}  {verdict.bar}: {verdict.measured} "
              f"(bar {verdict.limit}; {verdict.by})")
    if report.profile is not None:
        print(f"\nprofile of {report.profile.stage} at {report.profile.tenants} tenants: "
              f"{report.profile.text}")
        for name, share in report.profile.top_inclusive[:12]:
            print(f"  {share:6.1%}  {name}")


if __name__ == "__main__":
    sys.exit(main())
