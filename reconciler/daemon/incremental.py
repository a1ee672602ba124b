"""What a watching reconcile daemon carries from one run to the next, so that a run plans
only what changed (docs/gitops.md, "Watching the backends").

- The revision's validation, by the digest of its files and of unet (cache.inputs_digest):
  a revision whose files did not change is not validated again.
- The desired state, in a `RenderedCache` keyed by every input of rendering.
- What the last run left (`Since`), when it ended well: a run after it plans only the
  owners whose backend objects changed (the replicas say which), those the last run
  left drifted, and, for a new revision that changes only some tenants, those tenants'.

A run reads through `reading` (engine.Reading): the replicas instead of the backends they
watch, and the desired state of its scope or the cached one.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..cache import inputs_digest
from ..contract import Manager, Observation, Session, Watch
from ..desired import (
    Desired,
    RenderedCache,
    allocation_readers,
    allocations_digest,
    changed_owners,
    render_desired,
    rendered_key,
    rerender_tenants,
)
from ..engine import DesiredSource, Outcome, Reading, render_fresh, run_managers
from ..model import Model
from ..objects import Held
from ..planner import changed_tenants
from ..plugins import managers_of
from ..shard import Shard
from ..validate import ParsedFiles, Validation, revision_files, validate_files
from .watching import Watches


@dataclass(frozen=True)
class Scope:
    """What a run plans: the replicas it reads instead of the backends, the owners whose
    objects it plans (None: everything), and the desired state it plans them against
    (None: rendered by the run)."""

    watches: Mapping[str, Watch]
    owners: frozenset[str] | None = None
    desired: Desired | None = None


@dataclass(frozen=True)
class Since:
    """What the last run of a watching daemon left, when it ended well."""

    files: str  # the digest of the revision's files it planned
    desired: Desired  # the desired state it planned against
    outstanding: frozenset[str]  # owners with changes it left (drift, with `report`)
    resync_due: float  # monotonic time of the next full plan


class Incremental:
    def __init__(self, watches: Watches | None, only: list[str] | None,
                 resync_interval: float, shard: Shard | None = None) -> None:
        self.watches = watches  # None: the daemon does not watch (or one run, --once)
        self.only = only  # the run's managers (None: all)
        self.shard = shard  # the daemon's shard (its share of the repo), if any
        self.resync_interval = resync_interval
        self.rendered = RenderedCache()
        self.validated: dict[str, Validation] = {}  # files digest → validation, the last two
        self.since: Since | None = None  # what the last run left, for the next to build on
        self.held_digest: tuple[Mapping[str, Held], str] | None = None  # with its digest

    def validate(self, folder: Path, rev: str | None, max_file_size: int,
                 parsed: ParsedFiles) -> tuple[str, Validation]:
        """The digest of the revision's files (and of unet), and its validation: done again
        only when that digest changes."""
        items = revision_files(folder, rev, max_file_size, parsed, self.shard)
        if self.watches is None:  # validated (and rendered) each run: no digest needed
            return "", validate_files(iter(items), max_file_size, parsed, self.shard)
        files = inputs_digest(items, max_file_size)
        if files not in self.validated:
            self.validated = {key: value for key, value in self.validated.items()
                              if key == (self.since.files if self.since else None)}
            self.validated[files] = validate_files(iter(items), max_file_size, parsed,
                                                   self.shard)
        return files, self.validated[files]

    def scope(self, head: Validation, files: str) -> Scope | None:
        """What this run plans; None: nothing changed since the last run, which ended well,
        so there is nothing to plan.

        A run plans only the owners whose backend objects changed (and those it left
        drifted) when the desired state for the revision and for the allocations the
        replicas record is in the cache (`RenderedCache`, keyed by every input), and a full
        plan is not due; else everything."""
        if self.watches is None:
            return Scope({})
        model = _model(head)
        managers = run_managers(head, model, self.only)
        watches = self.watches.follow(managers, allocation_readers(model, managers))
        if not watches:
            return Scope({})
        changes = self.watches.changes()
        since = self.since
        if changes is None or since is None or time.monotonic() >= since.resync_due:
            return Scope(watches)
        if since.files == files and not changes and not since.outstanding:
            return None  # nothing changed anywhere (allocations change only with rows)
        held = self.watches.held()
        if since.files == files:
            key = self._rendered_key(files, managers, held)
            desired = self.rendered.get(key)
            owners = changes | since.outstanding
            if desired is None:  # recorded allocations changed: rendered again, from them
                desired = self.rendered.put(key, render_desired(head, held,
                                                                only=sorted(managers)))
                owners |= changed_owners(since.desired, desired)
            return Scope(watches, owners, desired) if owners else None
        if self.rendered.get(self._rendered_key(since.files, managers, held)) \
                is not since.desired:
            return Scope(watches)
        found = self._changed_tenants(since, head)
        if found is None:
            return Scope(watches)
        desired, owners = found
        self.rendered.put(self._rendered_key(files, managers, held), desired)
        return Scope(watches, owners | changes | since.outstanding, desired)

    def reading(self, files: str, scope: Scope) -> Reading:
        """Where a run of `scope` reads from: the replicas instead of the backends they
        watch; the scope's desired state, else the cached one when its inputs are the same."""
        def observe(name: str, session: Session) -> Observation:
            watch = scope.watches.get(name)
            return watch.observe(scope.owners) if watch is not None else session.observe()

        rendered = scope.desired
        if rendered is not None:
            return Reading(observe, lambda _head, _held, _only: rendered, scope.owners)
        return Reading(observe, self._render(files) if files else render_fresh, scope.owners)

    def _render(self, files: str) -> DesiredSource:
        """The desired state for a run, from the cache when its inputs are the same."""
        def render(head: Validation, held: Mapping[str, Held], only: Sequence[str]
                   ) -> Desired:
            managers = managers_of(_model(head), only, resolve=True)
            key = rendered_key(files, managers, held)
            return self.rendered.get(key) or self.rendered.put(
                key, render_desired(head, held, only=list(only)))

        return render

    def _rendered_key(self, files: str, managers: Mapping[str, Manager],
                      held: Mapping[str, Held]) -> str:
        """desired.rendered_key, the allocations' digest computed again only for another
        `held` object (the replicas give the same one while the allocations stay the same;
        hashing 100,000 of them takes half a second)."""
        if self.held_digest is None or self.held_digest[0] is not held:
            self.held_digest = (held, allocations_digest(held))
        return rendered_key(files, managers, held, self.held_digest[1])

    def _changed_tenants(self, since: Since, head: Validation
                         ) -> tuple[Desired, frozenset[str]] | None:
        """For a new revision that changes only some tenants' manifests: its desired state,
        those tenants rendered again (desired.rerender_tenants), and the owners to plan
        (every resource of those tenants, before and after); None: plan everything."""
        base = self.validated.get(since.files)
        tenants = changed_tenants(base, head) if base is not None and base.ok else None
        desired = rerender_tenants(since.desired, base, head, tenants) \
            if base is not None and tenants else None
        if base is None or tenants is None or desired is None:
            return None
        return desired, frozenset(m.ref for m in (*base.manifests, *head.manifests)
                                  if m.obj.scope == "tenant" and m.tenant in tenants)

    def remember(self, files: str, scope: Scope, outcome: Outcome) -> None:
        """What the next run may build on: after a plan without errors whose apply (if any)
        completed, the owners it left drifted (`reconcile: report`) and the desired state."""
        plan, desired = outcome.plan, outcome.desired
        if not scope.watches or self.watches is None or plan is None or not plan.ok \
                or desired is None or not outcome.complete:
            return
        applied = outcome.applied
        done = {c.uid for c in applied.changes} if applied is not None else set()
        outstanding = frozenset(c.obj.owner for c in plan.changes
                                if c.action.changes and c.uid not in done)
        if applied is not None and applied.has_changes:
            # The backends now record the values the desired state allocated (when nobody
            # changed one meanwhile): rendering with them gives it again, so it is cached
            # under that key too.
            held = self.watches.held()
            managers = managers_of(_model(self.validated[files]), sorted(plan.managers),
                                   resolve=True)
            key = self._rendered_key(files, managers, held)
            if self.rendered.get(key) is None and {k: h.value for k, h in held.items()} == {
                    k: a.held().value for k, a in desired.allocations.values.items()}:
                self.rendered.alias(key)
        previous = self.since
        due = previous.resync_due if previous is not None and scope.owners is not None \
            else time.monotonic() + self.resync_interval
        self.since = Since(files, desired, outstanding, due)


def _model(head: Validation) -> Model:
    assert head.context is not None, "a valid revision has a context"
    return Model(head.context)
