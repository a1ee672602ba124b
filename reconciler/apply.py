"""Stage `apply`: carry out a live plan through the managers, under their locks.

The flow: connect, take every manager's lock, observe, plan, (confirm), apply
wave by wave, re-observe to confirm, record what was applied, unlock. A saved
plan is planned again under the locks and applied only when it is still the same
plan (commands.py): STALE_PLAN when the observed state changed.
"""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .diff import NOOP, Change, diff
from .errors import UnetError
from .heap import paused_collection
from .objects import BackendObject, index_objects
from .order import Step

ProgressFactory = Callable[[str, int, int, int], Callable[[int, int], None]]


class ApplyError(UnetError):
    """The apply could not be carried out; the message says what and how to go on."""


class StalePlan(ApplyError):
    pass


@dataclass
class ApplyResult:
    counts: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0,
                                                            "delete": 0})
    seconds: float = 0.0
    mismatches: list[str] = field(default_factory=list)  # objects not as planned afterwards
    # Steps that failed while the rest was applied (uid -> why), e.g. an unreachable cluster.
    failures: dict[str, str] = field(default_factory=dict)


@contextlib.contextmanager
def session(managers: dict[str, Any], workdir: Path, lock_timeout: float,
            readers: dict[str, Any] | None = None,
            waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Connected to every manager's backend and holding every manager's lock.

    `readers` are only connected: observed for their allocations, never changed.
    `waiting` hears, at once and every few seconds, which lock a run waits for and who
    holds it (by default: a line on standard error).
    """
    with contextlib.ExitStack() as stack:
        for name in sorted(readers or {}):
            stack.enter_context(readers[name].connect(workdir))  # type: ignore[index]
        for name in sorted(managers):
            stack.enter_context(managers[name].connect(workdir))
        for name in sorted(managers):
            stack.enter_context(managers[name].lock(lock_timeout, waiting or _say_waiting))
        yield


def _say_waiting(text: str) -> None:
    print(f"unet: {text}", file=sys.stderr, flush=True)


def observe_all(managers: dict[str, Any]) -> list[BackendObject]:
    objects: list[BackendObject] = []
    for name in sorted(managers):
        objects.extend(managers[name].observe())
    return objects


def execute(plan_changes: list[Change], waves: list[list[Step]], managers: dict[str, Any],
            progress: ProgressFactory) -> ApplyResult:
    """Apply the steps of every manager, wave by wave; then confirm by observing again."""
    started = time.monotonic()
    result = ApplyResult()
    changes = {c.uid: c for c in plan_changes}
    for name in sorted(managers):
        steps = [[step for step in wave if step.manager == name] for wave in waves]
        steps = [wave for wave in steps if wave]
        for index, wave in enumerate(steps):
            report = progress(name, index + 1, len(steps), len(wave))
            counts = managers[name].apply([wave], changes, report)
            for action, count in counts.items():
                result.counts[action] += count
        result.failures.update(managers[name].failed_steps())
    result.seconds = time.monotonic() - started
    result.mismatches = confirm([c for c in plan_changes if c.uid not in result.failures],
                                observe_all(managers))
    return result


def confirm(plan_changes: list[Change], observed: list[BackendObject]) -> list[str]:
    """What is not as the plan said after applying it."""
    now = index_objects(observed)
    out = []
    wanted: dict[str, BackendObject] = {}
    for change in plan_changes:
        if change.actions == (NOOP,):
            continue
        want, have = change.after, now.get(change.uid)
        if want is None and have is not None:
            out.append(f"{change.uid} still exists")
        elif want is not None and have is None:
            out.append(f"{change.uid} is missing")
        elif want is not None:
            wanted[change.uid] = want
    with paused_collection(transient=True):  # one diff of them all, not one per object
        deltas = diff(wanted, {uid: now[uid] for uid in wanted})
    out += [f"{delta.uid}: {delta.reason}" for delta in deltas if delta.actions != (NOOP,)]
    return out


def check_appliable(document: dict[str, Any]) -> None:
    if document.get("mode") != "live":
        raise ApplyError("a plan between two revisions shows what a merge would do; it cannot "
                         "be applied. Run `unet plan -o plan.json` against the backends")
    if not document.get("valid", False):
        raise ApplyError("the plan has errors (see its diagnostics); it cannot be applied")
