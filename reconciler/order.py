"""Stage `order`: changes → a dependency graph of steps → waves.

Creates go parents (and referenced rows) first; deletes go children first; a
replace is a delete step and a create step. A wave holds steps whose
dependencies are all in earlier waves, so the steps of one wave could run in
parallel, and each wave can be one backend transaction.
"""

from __future__ import annotations

import graphlib
from collections import defaultdict
from dataclasses import dataclass

from .diff import Action, Change


@dataclass(frozen=True, slots=True)
class Step:
    action: Action  # create, update or delete
    uid: str

    @property
    def id(self) -> str:
        """As plans write it: `create ovn:Logical_Switch/acme/web`."""
        return f"{self.action} {self.uid}"

    @property
    def manager(self) -> str:
        return self.uid.split(":", 1)[0]


class CycleError(Exception):
    """The renderers produced objects that depend on each other in a circle (a bug)."""


def steps_of(changes: list[Change]) -> list[Step]:
    return [Step(action, change.uid) for change in changes for action in change.action.steps]


def order(changes: list[Change]) -> list[list[Step]]:
    """Waves of steps; deterministic for the same changes."""
    by_uid = {c.uid: c for c in changes}
    steps = steps_of(changes)
    ids = {s.id: s for s in steps}
    after: dict[str, set[str]] = defaultdict(set)  # step id -> ids it must follow
    for step in steps:
        change = by_uid[step.uid]
        manager = change.obj.manager
        if step.action in (Action.CREATE, Action.UPDATE):
            for dep in change.after.depends if change.after else ():
                before = f"{Action.CREATE} {manager}:{dep}"
                if before in ids:
                    after[step.id].add(before)
            if step.action is Action.CREATE and f"{Action.DELETE} {step.uid}" in ids:
                after[step.id].add(f"{Action.DELETE} {step.uid}")
        else:  # delete: after its children's deletes and after referrers stop pointing at it
            for dep in change.before.depends if change.before else ():
                dep_delete = f"{Action.DELETE} {manager}:{dep}"
                if dep_delete in ids:
                    after[dep_delete].add(step.id)
    return _waves(ids, after)


def _waves(ids: dict[str, Step], after: dict[str, set[str]]) -> list[list[Step]]:
    """The steps in layers (graphlib): a wave holds every step whose predecessors are all
    in earlier waves, in id order."""
    sorter = graphlib.TopologicalSorter({step: after[step] for step in ids})
    try:
        sorter.prepare()
    except graphlib.CycleError as exc:
        raise CycleError("objects depend on each other in a cycle: "
                         + ", ".join(sorted(set(exc.args[1]))[:5])) from exc
    waves: list[list[Step]] = []
    while sorter.is_active():
        ready = sorted(sorter.get_ready())
        waves.append([ids[s] for s in ready])
        sorter.done(*ready)
    return waves
