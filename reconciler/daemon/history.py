"""The record of one run, and the history of runs kept in the state dir
(`history.jsonl`, the last N runs; `unet reconcile history`)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ..state import STATE_DIR

DEFAULT_STATE_DIR = Path(STATE_DIR) / "reconcile"  # the clone, the history, the state
HISTORY_FILE = "history.jsonl"

# Results of a run, in the history, the JSON log, the metrics and $GITHUB_OUTPUT.
OK = "ok"            # nothing to change: the backends match the revision
APPLIED = "applied"  # changes applied: the repo's, and drift when `reconcile: repair`
DRIFT = "drift"      # drift found and left in place (`reconcile: report`)
INVALID = "invalid"  # the revision fails validation or its plan has errors: not applied
LOCKED = "locked"    # another run held a backend lock for longer than --lock-timeout
ERROR = "error"      # anything else: a backend or Git unreachable, a failed apply
STANDBY = "standby"  # another replica of the daemon is active: nothing planned or applied
RESULTS = (OK, APPLIED, DRIFT, INVALID, LOCKED, ERROR, STANDBY)




@dataclass
class Run:
    started: str = ""                 # UTC, ISO 8601
    source: str = ""                  # the repo URL or folder
    branch: str | None = None
    revision: str | None = None       # the commit found on the branch (or the folder's HEAD;
    #                                   None when the folder's files differ from it)
    reconciled: str | None = None     # the commit actually planned and applied (last good)
    result: str = ERROR
    message: str = ""
    mode: str | None = None           # the repo's spec.reconcile: report | repair
    counts: dict[str, int] = field(default_factory=dict)      # resources by plan action
    row_counts: dict[str, int] = field(default_factory=dict)  # backend objects by action
    drift: int = 0                    # backend objects changed outside unet
    repaired: int = 0                 # of those, repaired by this run
    applied: dict[str, int] = field(default_factory=dict)     # objects created/updated/deleted
    apply_seconds: float | None = None
    errors: int = 0                   # error diagnostics of the revision (invalid)
    diagnostics: list[dict[str, Any]] = field(default_factory=list)  # the first few
    resources: dict[str, int] = field(default_factory=dict)   # manifests by kind (reconciled)
    pending: list[str] = field(default_factory=list)  # manifests a failed apply left pending
    scope: str | None = None  # planned: "full", "N owners" (", M whole": polled); None: nothing
    locked_at: float | None = None    # epoch seconds: backend locks held from ...
    unlocked_at: float | None = None  # ... to (two runs never overlap here)
    duration: float = 0.0

    @property
    def changed(self) -> bool:
        return self.result in (APPLIED, DRIFT) or bool(self.drift)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def now() -> str:
    """UTC, to the second, as the history and the JSON log write it."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def short(commit: str | None) -> str:
    return commit[:12] if commit else "(files on disk)"


@contextlib.contextmanager
def flock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temp.write_text(text)
    os.replace(temp, path)


def append_history(state_dir: Path, run: Run, keep: int) -> None:
    """Add a run to the history, keeping the last `keep` runs."""
    path = state_dir / HISTORY_FILE
    with flock(state_dir / "history.lock"):
        lines = path.read_text().splitlines() if path.exists() else []
        lines.append(json.dumps(run.to_json(), sort_keys=True))
        write_atomic(path, "\n".join(lines[-max(keep, 1):]) + "\n")


def read_history(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / HISTORY_FILE
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            item = json.loads(line)
            if isinstance(item, dict):
                out.append(item)
    return out
