"""One size: its repos, its servers, and the children run on them.

A `Fixture` is everything the stages of one size work on: the repo and its live copy
(benchmarks/repos.py), a scratch folder, the Northbound servers, and the one the stage being
measured uses (`nb`, switched with `backend(name)`). `run_child` runs a command as a fresh
process in the fixture's environment and gives its `Run`: wall time, its own CPU time and
peak memory (os.wait4: this child's rusage, not the maximum over all children so far), the
server's CPU time meanwhile, and its output, which `Run` reads (`output_json`, `tail`,
`exited`). `warm_page_cache` reads a repo before a timed run.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .northbound import NbServer
from .repos import NB_ENV
from .system import SOURCE

CACHE_ENV = "UNET_CACHE_DIR"  # where unet keeps its caches: validation results, parsed files


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
        path = os.environ.get("PYTHONPATH")
        return {**os.environ, NB_ENV: self.nb.remote, CACHE_ENV: str(self.cache_dir),
                "PYTHONPATH": str(SOURCE) + (os.pathsep + path if path else "")}

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

    def output_json(self) -> dict[str, Any]:
        """The JSON object the child wrote to its standard output; {} for anything else."""
        try:
            data = json.loads(self.stdout())
        except (json.JSONDecodeError, OSError):
            return {}
        return data if isinstance(data, dict) else {}

    def tail(self) -> str:
        """The last lines of its standard error, short."""
        return " ".join(self.stderr().strip().splitlines()[-2:])[-300:]

    def exited(self) -> str:
        """How the child ended: `exit N`, or the signal that killed it (no output to show)."""
        if self.exit_code >= 0:
            return f"exit {self.exit_code}"
        name = signal.Signals(-self.exit_code).name
        why = " (the kernel's OOM killer sends it, as can a person: see dmesg)" \
            if name == "SIGKILL" else ""
        return f"killed by {name}{why}"


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
    return run_child([sys.executable, "-m", "unet.reconciler.cli", *argv], fx, name)


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
