"""The machine the benchmark runs on, as the other modules of the benchmark ask about it.

- `process_cpu_s(pid)` and `process_peak_mib(pid)` read a running process's CPU time (user +
  system) and peak resident memory from /proc; both are 0 for a process that is gone;
- `tool(name)` finds a command, the virtual environment's own first;
- `machine()` says what the figures were measured on, `code_version()` which unet;
- `BenchError` is raised when the benchmark cannot set something up.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

from unet.reconciler.sources import SourceError

#: The checkout the benchmark measures: children import unet from it (through PYTHONPATH).
SOURCE = Path(__file__).resolve().parent.parent


class BenchError(SourceError):
    """The benchmark could not set something up (a tool missing, a server not starting)."""


def process_cpu_s(pid: int) -> float:
    """A process's CPU time so far (user + system), 0 when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def process_peak_mib(pid: int | None) -> float:
    """A process's peak resident memory (VmHWM), 0 when it is gone or None."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError):
        pass
    return 0.0


def tool(name: str) -> str | None:
    """The command `name`: the virtual environment's own first, then the PATH's."""
    beside = Path(sys.executable).parent / name
    return str(beside) if beside.is_file() else shutil.which(name)


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
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gib": memory,
            "python": platform.python_version(), "platform": platform.platform(),
            "ovn": _first_line(["ovn-nbctl", "--version"]),
            "ovsdb": _first_line(["ovsdb-server", "--version"]),
            "ovs_json_parser": _ovs_json_parser(), "code": code_version()}


def _ovs_json_parser() -> str:
    try:
        import ovs.json
    except ImportError:
        return "missing"
    return "C" if getattr(ovs.json, "PARSER", "") == "C" else "pure Python"


def _first_line(command: list[str]) -> str:
    try:
        return subprocess.run(command, capture_output=True, text=True,
                              check=False).stdout.splitlines()[0].strip()
    except (OSError, IndexError):
        return f"{command[0]} missing"


def code_version() -> dict[str, Any]:
    """Which unet was measured: the package folder (children import the same one, through
    PYTHONPATH) and its Git commit, when it is a checkout."""
    info: dict[str, Any] = {"path": str(SOURCE)}
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=SOURCE, capture_output=True,
                              text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "reconciler", "managers"],
                               cwd=SOURCE, capture_output=True, text=True, check=True).stdout
        info.update(commit=head, modified=bool(dirty.strip()))
    except (OSError, subprocess.CalledProcessError):
        pass
    return info
