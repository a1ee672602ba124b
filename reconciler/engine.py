"""One run against the backends: connect → lock → observe → plan → gate → execute → confirm
→ record.

`unet plan`, `unet apply` (of the repo or of a saved plan) and `unet reconcile` differ only
in their gate: what they let through of the plan made under the locks (everything once a
person said yes, the repo's changes without the drift, nothing at all for a plan), and in
how they show it. The engine owns the rest, and the rules that hold for all of them:

- nothing is applied from a plan with errors, whatever the gate says;
- after applying, the backends are observed again and compared with the plan;
- a manager records the desired state as applied only when every change the repo asks
  of it was carried out (drift may be left, with `reconcile: report` or a plan of
  `--refresh-only`) and its objects are as planned: a later run then tells drift from
  repo changes.
"""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from .contract import ApplyOutcome, Manager, Observation, ProgressFactory, Session
from .desired import Desired, allocation_readers, render_desired
from .diff import Change, diff
from .errors import Stopped, UnetError
from .model import Model
from .objects import BackendObject, Held, index_objects, observed_allocations
from .plan import Plan, restrict_to
from .plan_io import DIGEST_FIELD, plan_to_json
from .planner import plan_live
from .plugins import managers_of
from .progress import say
from .validate import Validation

#: What a run shows of its progress: the manager → its progress callbacks.
Progress = Callable[[str], ProgressFactory]

#: Lines for people, per manager, about its backend (e.g. per-cluster readiness).
Reports = dict[str, list[str]]

#: Given the plan made under the locks and the managers' reports on it: what to apply of it
#: (the plan, a part of it), or None to apply nothing. It may raise to stop the run.
Gate = Callable[[Plan, Reports], Plan | None]


class ApplyError(UnetError):
    """The apply could not be carried out; the message says what and how to go on."""


class StalePlan(ApplyError):
    pass


def say_waiting(text: str) -> None:
    print(f"unet: {text}", file=sys.stderr, flush=True)


def _quiet(manager: str) -> ProgressFactory:
    return lambda index, waves, steps: lambda done, total: None


class Observe(Protocol):
    """How a run reads one manager's backend (its name, its session; only `owners`'
    objects, when given): by the session (one-shot runs), or from the reconcile daemon's
    replica of it."""

    def __call__(self, name: str, session: Session,
                 owners: frozenset[str] | None = None) -> Observation: ...

#: The desired state of a revision, given the allocations the backends hold and the
#: managers of the run: rendered afresh, or the daemon's (desired.RenderedCache).
DesiredSource = Callable[[Validation, Mapping[str, Held], Sequence[str]], Desired]


#: The allocations the backends record, given every observation of a run (its managers',
#: then those read for their allocations only, each by name in order): found in their
#: objects, or, for the reconcile daemon, in its replicas too (which know theirs without
#: reading every object).
Allocated = Callable[[Sequence[tuple[str, Observation]]], Mapping[str, Held]]


def by_session(name: str, session: Session,
               owners: frozenset[str] | None = None) -> Observation:
    return session.observe() if owners is None else session.observe_owners(owners)


def in_objects(observations: Sequence[tuple[str, Observation]]) -> Mapping[str, Held]:
    return observed_allocations([obj for _name, seen in observations for obj in seen.objects])


def render_fresh(head: Validation, held: Mapping[str, Held], only: Sequence[str]) -> Desired:
    return render_desired(head, held, only=list(only))


@dataclass(frozen=True)
class Reading:
    """Where a run reads what it plans from: the backends (`observe`, `allocated`), the
    desired state (`desired`), and which resources' objects it plans (`owners`; None: all)
    but of the managers planned whole all the same (`whole`)."""

    observe: Observe = by_session
    desired: DesiredSource = render_fresh
    owners: frozenset[str] | None = None
    whole: frozenset[str] = frozenset()
    allocated: Allocated = in_objects


@dataclass(frozen=True)
class RunOptions:
    workdir: Path  # where local state lives (`northbound: embedded`)
    lock_timeout: float = 60.0
    only: Sequence[str] | None = None  # NetworkManagers to use; None: all
    refresh_only: bool = False  # plan only drift
    waiting: Callable[[str], None] = say_waiting  # hears who holds a lock it waits for
    progress: Progress = _quiet


@dataclass
class Outcome:
    """What a run did; filled in as it goes, so that a run that fails (RunFailed) says how
    far it got."""

    plan: Plan | None = None
    desired: Desired | None = None  # what the plan was made for
    reports: Reports = field(default_factory=dict)  # after the plan, or after the apply
    unmanaged: dict[str, list[str]] = field(default_factory=dict)
    applied: Plan | None = None  # what the gate let through, when it was carried out
    counts: dict[str, int] = field(default_factory=lambda: {"create": 0, "update": 0,
                                                            "delete": 0})
    seconds: float = 0.0
    failures: dict[str, str] = field(default_factory=dict)  # uid → why its step failed
    mismatches: dict[str, str] = field(default_factory=dict)  # uid → how it differs
    locked_at: float | None = None  # epoch seconds: every lock held from ...
    unlocked_at: float | None = None  # ... to

    @property
    def complete(self) -> bool:
        return not self.failures and not self.mismatches

    def pending(self, stopped: bool = False) -> list[str]:
        """The manifests an apply left pending: those of its failed steps and of objects
        not as planned after it; when it `stopped` before its end, of every change it was
        to make (which of them were made is not known)."""
        if self.applied is None:
            return []
        left = set(self.failures) | set(self.mismatches)
        return sorted({c.obj.owner for c in self.applied.changes if c.action.changes
                       and (stopped or c.uid in left)})


class RunFailed(Stopped):
    """A run against the backends that stopped before its end: `cause` says why, `outcome`
    how far it got (its locks' times, the plan it made, what it applied)."""

    def __init__(self, cause: BaseException, outcome: Outcome) -> None:
        super().__init__(cause)
        self.outcome = outcome


def run(head: Validation, inputs: dict[str, Any], options: RunOptions,
        gate: Gate | None = None, reading: Reading = Reading()) -> Outcome:
    """Plan the validated `head` against the backends under their locks and, when a gate
    is given, apply what it lets through. Raises RunFailed when it cannot finish."""
    outcome = Outcome()
    try:
        _run(head, inputs, options, gate, reading, outcome)
    except Exception as exc:
        raise RunFailed(exc, outcome) from exc
    return outcome


def _run(head: Validation, inputs: dict[str, Any], options: RunOptions, gate: Gate | None,
         reading: Reading, outcome: Outcome) -> None:
    model = Model(head.context)  # type: ignore[arg-type]
    managers = run_managers(head, model, options.only)
    readers = allocation_readers(model, managers)
    with _sessions(managers, readers, options, outcome) as (sessions, allocating):
        def observe(name: str, owners: frozenset[str] | None = None) -> Observation:
            say(f"observing {name}")
            return _claimed(head, reading.observe(name, sessions[name], owners))

        observations = {name: observe(name) for name in sorted(sessions)}
        hints = [(name, reading.observe(name, allocating[name])) for name in sorted(allocating)]
        held = reading.allocated([*sorted(observations.items()), *hints])
        say("rendering the desired state")
        outcome.desired = reading.desired(head, held, sorted(managers))
        say("planning")
        full = plan_live(head, managers, observations, inputs, outcome.desired,
                         reading.owners, reading.whole)
        plan = restrict_to(full, full.drift_ids) if options.refresh_only else full
        outcome.plan = plan
        outcome.unmanaged = {name: observations[name].unmanaged() for name in sorted(sessions)}
        outcome.reports = _reports(sessions, plan.changes, None)
        todo = gate(plan, outcome.reports) if gate is not None else None
        if todo is None or not plan.ok:
            return
        if todo.has_changes:
            _check_owned(head, todo)
            done = _execute(todo, sessions, observations, observe, options.progress, outcome)
            outcome.reports = _reports(sessions, plan.changes, done)
        _record(sessions, full, todo, outcome)
        if todo.has_changes:
            _publish_status(head, sessions, full, todo, outcome, inputs)


def run_managers(head: Validation, model: Model, only: Sequence[str] | None
                 ) -> dict[str, Manager]:
    """The managers of a run (those of `only`); of a shard's run, those that serve one
    of its regions, each told whose objects are the shard's."""
    managers = managers_of(model, only, resolve=True)
    ownership = head.ownership
    if ownership is None:
        return managers
    serving = {m.name for m in model.kind("NetworkManager")
               if ownership.shard.regions & set(m.obj.spec.regions)}
    for manager in managers.values():
        manager.ownership = ownership
    return {name: manager for name, manager in managers.items() if name in serving}


def _claimed(head: Validation, observation: Observation) -> Observation:
    """What a run of a shard reads of a backend: the shard's objects only (shard.py)."""
    if head.ownership is not None:
        observation.objects = head.ownership.claim(observation.objects)
    return observation


def _check_owned(head: Validation, todo: Plan) -> None:
    """A shard never writes another shard's object: the plan was made from the shard's
    objects alone, and this says so again before anything is written."""
    ownership = head.ownership
    if ownership is None:
        return
    for change in todo.changes:
        if change.action.changes and ownership.owns(change.obj.owner) is False:
            raise ApplyError(f"internal error: the plan of shard {ownership.shard.name} "
                             f"changes {change.uid}, of {change.obj.owner}, which is another "
                             "shard's; nothing was applied")


def read_desired(head: Validation, options: RunOptions) -> Desired:
    """The desired state with the allocations the backends hold, read without their locks
    (nothing is changed); what is not allocated yet is unknown."""
    model = Model(head.context)  # type: ignore[arg-type]
    managers = managers_of(model, options.only, resolve=True)
    with contextlib.ExitStack() as stack:
        sessions = [stack.enter_context(managers[name].connect(options.workdir))
                    for name in sorted(managers)]
        observed = [obj for session in sessions for obj in session.observe().objects]
    return render_desired(head, observed_allocations(observed), new_are_unknown=True)


def read_allocations(head: Validation, options: RunOptions) -> dict[str, Held]:
    """The allocations the backends record, read without their locks (nothing is changed)
    and without rendering the desired state: of the managers of `options.only`, and of the
    fabric managers that record a selected k8s manager's allocations. A backend that could
    not be read is an error: figures without it would read as free what it holds."""
    model = Model(head.context)  # type: ignore[arg-type]
    managers = managers_of(model, options.only, resolve=True)
    managers |= allocation_readers(model, managers)
    with contextlib.ExitStack() as stack:
        observations = {name: stack.enter_context(managers[name].connect(options.workdir))
                        .observe() for name in sorted(managers)}
    unread = [f"NetworkManager '{name}' could not read its backend: "
              f"{'; '.join(dict.fromkeys(seen.unobserved))}"
              for name, seen in observations.items() if seen.unobserved]
    if unread:
        raise UnetError("; ".join(unread) + " (make it reachable, or leave it out with "
                        "--manager)")
    return observed_allocations(obj for name in sorted(observations)
                                for obj in observations[name].objects)


def read_plan(head: Validation, inputs: dict[str, Any], options: RunOptions
              ) -> tuple[Plan, Mapping[str, Held], dict[str, str]]:
    """A plan against the backends read without their locks (nothing is changed: a view,
    as `unet show status` gives), the allocations they record, and the resources with
    objects where a manager could not read its backend (owner → the manager): the plan
    leaves those objects out, so it cannot tell whether they are what the revision asks."""
    model = Model(head.context)  # type: ignore[arg-type]
    managers = run_managers(head, model, options.only)
    readers = allocation_readers(model, managers)
    with contextlib.ExitStack() as stack:
        reading = {name: stack.enter_context(readers[name].connect(options.workdir))
                   for name in sorted(readers)}
        sessions = {name: stack.enter_context(managers[name].connect(options.workdir))
                    for name in sorted(managers)}
        observations = {name: _claimed(head, sessions[name].observe())
                        for name in sorted(sessions)}
        hints = [(name, reading[name].observe()) for name in sorted(reading)]
    held = in_objects([*sorted(observations.items()), *hints])
    desired = render_fresh(head, held, sorted(managers))
    blind = {name for name, seen in observations.items() if seen.unobserved}
    unread = {o.owner: o.manager for o in desired.objects if o.manager in blind}
    return plan_live(head, managers, observations, inputs, desired), held, unread


@contextlib.contextmanager
def _sessions(managers: Mapping[str, Manager], readers: Mapping[str, Manager],
              options: RunOptions, outcome: Outcome
              ) -> Iterator[tuple[dict[str, Session], dict[str, Session]]]:
    """Connected to every manager's backend and holding every manager's lock; `readers`
    are only connected: observed for their allocations, never changed."""
    with contextlib.ExitStack() as stack:
        reading = {name: stack.enter_context(readers[name].connect(options.workdir))
                   for name in sorted(readers)}
        sessions = {name: stack.enter_context(managers[name].connect(options.workdir))
                    for name in sorted(managers)}
        for name in sorted(sessions):
            stack.enter_context(sessions[name].lock(options.lock_timeout, options.waiting))
        outcome.locked_at = time.time()
        try:
            yield sessions, reading
        finally:
            outcome.unlocked_at = time.time()


def _execute(todo: Plan, sessions: Mapping[str, Session],
             observations: Mapping[str, Observation],
             observe: Callable[[str, frozenset[str] | None], Observation],
             progress: Progress, outcome: Outcome) -> dict[str, ApplyOutcome]:
    """Every manager's steps, wave by wave; then the objects of what changed observed
    again to confirm."""
    started = time.monotonic()
    outcome.applied = todo
    changes = {c.uid: c for c in todo.changes}
    applied: dict[str, ApplyOutcome] = {}
    for name in sorted(sessions):
        waves = [[step for step in wave if step.manager == name] for wave in todo.waves]
        waves = [wave for wave in waves if wave]
        if not waves:
            continue
        say(f"applying {name}")
        done = applied[name] = sessions[name].apply(observations[name], waves, changes,
                                                    progress(name))
        for action, count in done.counts.items():
            outcome.counts[action] += count
        outcome.failures.update(done.failures)
    outcome.seconds = time.monotonic() - started
    changed = frozenset(c.obj.owner for c in todo.changes if c.action.changes)
    now = [obj for name in sorted(sessions) for obj in observe(name, changed).objects]
    outcome.mismatches = confirm([c for c in todo.changes if c.uid not in outcome.failures],
                                 now)
    return applied


def confirm(changes: Sequence[Change], observed: Sequence[BackendObject]) -> dict[str, str]:
    """What is not as the plan said after applying it: uid → how."""
    now = index_objects(observed)
    out: dict[str, str] = {}
    wanted: dict[str, BackendObject] = {}
    for change in changes:
        if not change.action.changes:
            continue
        want, have = change.after, now.get(change.uid)
        if want is None and have is not None:
            out[change.uid] = "still exists"
        elif want is not None and have is None:
            out[change.uid] = "is missing"
        elif want is not None:
            wanted[change.uid] = want
    for delta in diff(wanted, {uid: now[uid] for uid in wanted}):
        if delta.action.changes:
            out[delta.uid] = _mismatch(delta)
    return out


def _mismatch(delta: Change) -> str:
    """How an object differs from the plan after applying it: what it holds, what was
    planned (the first few values)."""
    if not delta.fields:
        return delta.reason
    shown = [f"{f.path.removeprefix('fields.')} is {f.before!r}, planned {f.after!r}"
             for f in delta.fields[:3]]
    more = len(delta.fields) - len(shown)
    return "; ".join(shown) + (f" (and {more} more)" if more else "")


def _reports(sessions: Mapping[str, Session], changes: Sequence[Change],
             applied: Mapping[str, ApplyOutcome] | None) -> Reports:
    """What the managers say of their backends after the plan (`applied` None) or after
    applying (what each manager's apply did; ApplyOutcome() when it had nothing to do)."""
    out = {name: sessions[name].report(
               changes, None if applied is None else applied.get(name, ApplyOutcome()))
           for name in sorted(sessions)}
    return {name: lines for name, lines in out.items() if lines}


def _record(sessions: Mapping[str, Session], full: Plan, todo: Plan,
            outcome: Outcome) -> None:
    """The desired state as applied, by each manager that carried out every change of the
    repo (drift may be left: it stays drift) and whose objects are all as planned."""
    applied = {c.uid for c in todo.changes if c.action.changes}
    left = {c.uid for c in full.changes if c.action.changes and c.uid not in applied
            and c.uid not in full.drift_ids}
    unfinished = {uid.split(":", 1)[0] for uid in (*left, *outcome.failures,
                                                   *outcome.mismatches)}
    for name, session in sessions.items():
        if name not in unfinished and name in full.desired_digests:
            session.record_applied(full.desired_digests[name])


def _publish_status(head: Validation, sessions: Mapping[str, Session], full: Plan,
                    todo: Plan, outcome: Outcome, inputs: dict[str, Any]) -> None:
    """Each manager's tenants whose objects the apply changed are told their status
    (Session.publish_status); what could not be published joins the manager's report."""
    from .status import after_apply, allocated_values, tenant_of

    desired = outcome.desired
    assert desired is not None
    if not any(session.publishes_status for session in sessions.values()):
        return
    touched = {tenant_of(c.obj.owner) for c in todo.changes if c.action.changes}
    owner_of = {c.uid: c.obj.owner for c in todo.changes}
    left = {owner_of[uid]: why for uid, why in (*outcome.failures.items(),
                                                 *outcome.mismatches.items())
            if uid in owner_of}
    values = allocated_values({key: a.held() for key, a in desired.allocations.values.items()
                               if a.known})
    by_tenant: dict[str | None, list[Any]] = {}
    for manifest in head.manifests:
        by_tenant.setdefault(manifest.tenant, []).append(manifest)
    revision = inputs.get("head", {}).get("commit")
    for name in sorted(n for n, session in sessions.items() if session.publishes_status):
        served = {tenant_of(o.owner) for o in desired.objects if o.manager == name}
        tenants = sorted(t for t in served & touched if t is not None)
        if not tenants:
            continue
        lines = sessions[name].publish_status(
            {t: after_apply(by_tenant.get(t, []), full, todo, left, values, revision, t)
             for t in tenants})
        if lines:
            outcome.reports.setdefault(name, []).extend(lines)


# --- saved plans ----------------------------------------------------------------------------


def check_appliable(document: dict[str, Any]) -> None:
    if document.get("mode") != "live":
        raise ApplyError("a plan between two revisions shows what a merge would do; it cannot "
                         "be applied. Run `unet plan -o plan.json` against the backends")
    if not document.get("valid", False):
        raise ApplyError("the plan has errors (see its diagnostics); it cannot be applied")


def check_same(saved: dict[str, Any], plan: Plan, where: str) -> dict[str, Any]:
    """The plan made now, as JSON, when it is the `saved` one; else STALE_PLAN (the backends
    changed) or ApplyError (the repo changed, or the file was edited)."""
    if plan.fingerprint != saved["observed_fingerprint"]:
        raise StalePlan("STALE_PLAN: the backends changed since the plan was made (its "
                        "observed-state fingerprint no longer matches); nothing was "
                        "applied. Make a new plan and apply that")
    fresh = plan_to_json(plan)
    if plan.ok:
        difference = _difference(saved, fresh)
        if difference:
            raise ApplyError(f"{where} ({difference}): the repo changed since the plan was "
                             "made, or the plan was edited; nothing was applied. Make a new "
                             "plan and apply that")
    return fresh


def _difference(saved: dict[str, Any], fresh: dict[str, Any]) -> str | None:
    """The first thing that differs between a saved plan and one made now, if any: every
    field counts (what a person reads is what is applied)."""
    def canonical(value: Any) -> str:
        return json.dumps(value, sort_keys=True, default=str)

    old = {c.get("id"): canonical(c) for c in saved["backend_changes"]}
    new = {c["id"]: canonical(c) for c in fresh["backend_changes"]}
    for uid in sorted(old.keys() | new.keys(), key=str):
        if old.get(uid) != new.get(uid):
            return f"first difference: backend change {uid}"
    for name in sorted(saved.keys() | fresh.keys()):
        if name != DIGEST_FIELD and canonical(saved.get(name)) != canonical(fresh.get(name)):
            return f"first difference: {name}"
    return None
