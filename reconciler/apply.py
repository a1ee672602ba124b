"""Stage `apply`: carry out a live plan through the managers, under their locks.

The flow: connect, take every manager's lock, observe, plan, (confirm), apply
wave by wave, re-observe to confirm, record what was applied, unlock. A saved
plan is applied only while the observed state still has the fingerprint it was
planned against (STALE_PLAN otherwise).
"""

from __future__ import annotations

import contextlib
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
from .plan import fingerprint
from .plugins import installed_plugins

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
            readers: dict[str, Any] | None = None) -> Iterator[None]:
    """Connected to every manager's backend and holding every manager's lock.

    `readers` are only connected: observed for their allocations, never changed.
    """
    with contextlib.ExitStack() as stack:
        for name in sorted(readers or {}):
            stack.enter_context(readers[name].connect(workdir))  # type: ignore[index]
        for name in sorted(managers):
            stack.enter_context(managers[name].connect(workdir))
        for name in sorted(managers):
            stack.enter_context(managers[name].lock(lock_timeout))
        yield


def observe_all(managers: dict[str, Any]) -> list[BackendObject]:
    objects: list[BackendObject] = []
    for name in sorted(managers):
        objects.extend(managers[name].observe())
    return objects


def execute(plan_changes: list[Change], waves: list[list[str]], managers: dict[str, Any],
            progress: ProgressFactory) -> ApplyResult:
    """Apply the steps of every manager, wave by wave; then confirm by observing again."""
    started = time.monotonic()
    result = ApplyResult()
    changes = {c.uid: c for c in plan_changes}
    for name in sorted(managers):
        steps = [[_step(s) for s in wave if s.split(" ", 1)[1].startswith(f"{name}:")]
                 for wave in waves]
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


def check_fresh(plan_fingerprint: str, observed: list[BackendObject]) -> None:
    now = fingerprint(observed)
    if now != plan_fingerprint:
        raise StalePlan("STALE_PLAN: the backends changed since the plan was made (its "
                        "observed-state fingerprint no longer matches); nothing was applied. "
                        "Make a new plan and apply that")


def _step(text: str) -> Step:
    action, uid = text.split(" ", 1)
    return Step(action, uid)


def managers_from_plan(document: dict[str, Any]) -> dict[str, Any]:
    """Plugin instances for the managers a saved plan was made with."""
    from .pipeline import resolve_config

    plugins = installed_plugins()
    out = {}
    for name, spec in document.get("managers", {}).items():
        plugin = plugins.get(spec["plugin"])
        if plugin is None:
            raise ApplyError(f"the plan needs the manager plugin '{spec['plugin']}', which is "
                             "not installed")
        config = resolve_config(spec.get("config", {}), f"NetworkManager {name}")
        out[name] = plugin(name, config, document["installation"])
    return out


def changes_from_json(document: dict[str, Any]) -> list[Change]:
    from .diff import FieldChange

    out = []
    for item in document["backend_changes"]:
        out.append(Change(item["id"], _object(item, "before"), _object(item, "after"),
                          tuple(item["actions"]), item["reason"],
                          [FieldChange(f["path"], f["before"], f["after"])
                           for f in item["changes"]]))
    return out


def _object(item: dict[str, Any], side: str) -> BackendObject | None:
    data = item[side]
    if data is None:
        return None
    return BackendObject(item["manager"], item["table"], item["key"], item["owner"],
                         data["fields"], {k: tuple(v) for k, v in data["refs"].items()},
                         tuple(data["parent"]) if data["parent"] else None,  # type: ignore
                         frozenset(data.get("unknown", ())), data["meta"],
                         tuple(data.get("holds", ())))


def check_appliable(document: dict[str, Any]) -> None:
    if document.get("mode") != "live":
        raise ApplyError("a plan between two revisions shows what a merge would do; it cannot "
                         "be applied. Run `unet plan -o plan.json` against the backends")
    if not document.get("valid", False):
        raise ApplyError("the plan has errors (see its diagnostics); it cannot be applied")
