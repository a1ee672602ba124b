"""What a watching reconcile daemon carries from one run to the next, so that a run plans
only what changed (docs/gitops.md, "Watching the backends").

- The revision's validation, by the digest of its files and of unet (cache.inputs_digest):
  a revision whose files did not change is not validated again.
- The desired state, in a `RenderedCache` keyed by every input of rendering.
- What the last run left (`Since`), when it ended well: a run after it plans only the
  owners whose backend objects changed (the replicas say which), those the last run
  left drifted, and, for a new revision that changes only some tenants, those tenants'.
  When the recorded allocations changed, only the tenants they are drawn from are
  rendered again (desired.rerender_held).
- The allocations each polled manager (one without a replica: watching.py) recorded when
  last read: a polled manager is read and planned whole on every run, and the run is
  scoped for those allocations; it checks them (`Rescope`).

A run reads through `reading` (engine.Reading): the replicas instead of the backends they
watch, the polled backends themselves, and the desired state of its scope or the cached
one.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..allocate import ParsedHoldings
from ..cache import inputs_digest
from ..contract import Manager, Observation, Session, Watch
from ..desired import (
    Desired,
    RenderedCache,
    allocation_readers,
    changed_owners,
    render_desired,
    rendered_key,
    reparsed,
    rerender_held,
    rerender_tenants,
)
from ..engine import DesiredSource, Outcome, Reading, render_fresh, run_managers
from ..model import Model
from ..objects import Held, observed_allocations
from ..planner import changed_tenants
from ..plugins import managers_of
from ..shard import Shard
from ..validate import ParsedFiles, Validation, revision_files, validate_files
from .watching import Watches


@dataclass(frozen=True)
class Scope:
    """What a run plans: the replicas it reads instead of the backends, the owners whose
    objects it plans (None: everything), and the desired state it plans them against
    (None: rendered by the run) with the allocations that desired state is for.

    The managers and readers without a replica (`polled`) are read on every run, and the
    managers among them planned whole; `order` names the managers, then the readers."""

    watches: Mapping[str, Watch]
    owners: frozenset[str] | None = None
    desired: Desired | None = None
    held: Mapping[str, Held] | None = None
    polled: frozenset[str] = frozenset()
    readers: frozenset[str] = frozenset()
    order: tuple[str, ...] = ()

    @property
    def whole(self) -> frozenset[str]:
        """The managers planned whole, whatever `owners` says."""
        return self.polled - self.readers

    def everything(self) -> Scope:
        """The same run, planning everything."""
        return dataclasses.replace(self, owners=None, desired=None, held=None)


class Rescope(Exception):
    """A polled backend records other allocations than it did when the run was scoped: the
    desired state the run was scoped with is not the one for them."""


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
        self.names = HeldNames()
        # The allocations each polled manager recorded when last read: those the next run
        # is scoped for.
        self.polled_held: dict[str, Mapping[str, Held]] = {}

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

        A run plans only the owners whose watched objects changed (and those it left
        drifted) when the desired state for the revision and for the allocations the
        backends record is in the cache (`RenderedCache`, keyed by every input), or can be
        made from the last one by rendering a few tenants again, and a full plan is not
        due; else everything. The polled managers are planned whole on every run, for
        the allocations they recorded at the last run (checked by the run: `Rescope`)."""
        if self.watches is None:
            return Scope({})
        model = _model(head)
        managers = run_managers(head, model, self.only)
        readers = allocation_readers(model, managers)
        watches = self.watches.follow(managers, readers)
        if not watches:
            return Scope({})
        order = (*sorted(managers), *sorted(readers))
        base = Scope(watches, polled=frozenset(order) - frozenset(watches),
                     readers=frozenset(readers), order=order)
        changes = self.watches.changes()
        since = self.since
        if changes is None or since is None or time.monotonic() >= since.resync_due \
                or not base.polled <= self.polled_held.keys():
            return base
        if since.files == files and not changes and not since.outstanding \
                and not base.polled:
            return None  # nothing changed anywhere (allocations change only with rows)
        held = self.watches.held(self.polled_held, order)
        targeted = functools.partial(dataclasses.replace, base, held=held)
        if since.files == files:
            key = self._rendered_key(files, managers, held)
            desired = self.rendered.get(key)
            owners = changes | since.outstanding
            if desired is None:  # recorded allocations changed: rendered again, from them
                desired, changed = _rendered_again(since.desired, head, held, managers)
                self._cache(key, desired)
                owners |= changed
            return targeted(owners=owners, desired=desired) if owners or base.polled \
                else None
        if self.rendered.get(self._rendered_key(since.files, managers, held)) \
                is not since.desired:
            return base
        found = self._changed_tenants(since, head)
        if found is None:
            return base
        desired, owners = found
        self.rendered.put(self._rendered_key(files, managers, held), desired)
        return targeted(owners=owners | changes | since.outstanding, desired=desired)

    def reading(self, files: str, scope: Scope) -> Reading:
        """Where a run of `scope` reads from: the replicas instead of the backends they
        watch (the polled backends' allocations noted as they are read); the scope's
        desired state, else the cached one when its inputs are the same."""
        if not scope.watches:
            return Reading(desired=self._render(files) if files else render_fresh)

        def observe(name: str, session: Session,
                    owners: frozenset[str] | None = None) -> Observation:
            watch = scope.watches.get(name)
            if watch is not None:  # a reader's allocations: its replica's own (`held`)
                return watch.observe(frozenset() if name in scope.readers else
                                     owners if owners is not None else scope.owners)
            seen = session.observe()  # whole, also to confirm an apply: what it records
            found = observed_allocations(seen.objects)
            if self.polled_held.get(name) != found:  # else the same object, as a replica's
                self.polled_held[name] = found
            return seen

        def allocated(observations: Sequence[tuple[str, Observation]]
                      ) -> Mapping[str, Held]:
            assert self.watches is not None
            return self.watches.held(self.polled_held, [name for name, _ in observations])

        expected, rendered = scope.held, scope.desired
        if expected is None or rendered is None:
            return Reading(observe, self._render(files), None, scope.whole, allocated)

        def desired(head: Validation, held: Mapping[str, Held], only: Sequence[str]
                    ) -> Desired:
            if held is expected or self.names.of(held) == self.names.of(expected):
                return rendered
            # A polled backend records other allocations than when it was read last.
            managers = managers_of(_model(head), only, resolve=True)
            again, changed = _rendered_again(rendered, head, held, managers)
            self._cache(self._rendered_key(files, managers, held), again)
            if not changed <= (scope.owners or frozenset()):  # the replicas' objects read
                raise Rescope(f"the allocations recorded change {len(changed)} owners")
            return again

        return Reading(observe, desired, scope.owners, scope.whole, allocated)

    def _render(self, files: str) -> DesiredSource:
        """The desired state for a run, from the cache when its inputs are the same."""
        def render(head: Validation, held: Mapping[str, Held], only: Sequence[str]
                   ) -> Desired:
            managers = managers_of(_model(head), only, resolve=True)
            key = self._rendered_key(files, managers, held)
            return self.rendered.get(key) or self.rendered.put(
                key, render_desired(head, ParsedHoldings.of(held), only=list(only)))

        return render

    def _cache(self, key: str, desired: Desired) -> None:
        """`desired` cached under `key` too (another key of the one cached: an alias)."""
        if self.rendered.desired is desired:
            self.rendered.alias(key)
        else:
            self.rendered.put(key, desired)

    def _rendered_key(self, files: str, managers: Mapping[str, Manager],
                      held: Mapping[str, Held]) -> str:
        """desired.rendered_key, with a name for the allocations' content (HeldNames) in
        place of their digest."""
        return rendered_key(files, managers, held, self.names.of(held))

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
        # The polled managers are planned whole on every run anyway.
        outstanding = frozenset(c.obj.owner for c in plan.changes if c.action.changes
                                and c.uid not in done and c.obj.manager not in scope.polled)
        if applied is not None and applied.has_changes:
            self._recorded(files, scope, sorted(plan.managers), desired)
        previous = self.since
        due = previous.resync_due if previous is not None and scope.owners is not None \
            else time.monotonic() + self.resync_interval
        self.since = Since(files, desired, outstanding, due)

    def _recorded(self, files: str, scope: Scope, managers: list[str], desired: Desired
                  ) -> None:
        """After an apply, the backends record the values the desired state allocated (when
        nobody changed one meanwhile): rendering with them gives it again, so it is cached
        under their key too. (The polled backends' as read again to confirm the apply.)"""
        assert self.watches is not None
        held = self.watches.held(self.polled_held, scope.order)
        key = self._rendered_key(files, managers_of(_model(self.validated[files]), managers,
                                                    resolve=True), held)
        if self.rendered.get(key) is not None or self.rendered.desired is not desired:
            return
        if self.names.of(held) == self.names.of(desired.held):  # what it was rendered from
            self.rendered.alias(key)
        elif {k: h.value for k, h in held.items()} == {
                k: a.held().value for k, a in desired.allocations.values.items()}:
            self.rendered.alias(key)
            # What a later change of the allocations is told apart from (rerender_held).
            desired.held = reparsed(desired.held, held)


class HeldNames:
    """Names for the contents of recorded allocations, in the render cache's keys: one name
    for equal contents, within this process. Comparing allocations with the few seen last
    costs a fraction of hashing them (100,000 at a thousand tenants: half a second), and
    the replicas give the same object while they stay the same."""

    KEEP = 3  # the replicas' allocations now, and before the last changes

    def __init__(self) -> None:
        self.seen: list[tuple[Mapping[str, Held], str]] = []
        self.count = 0

    def of(self, held: Mapping[str, Held]) -> str:
        plain = held.observed if isinstance(held, ParsedHoldings) else held
        for known, name in self.seen:
            if known is plain or known == plain:
                return name
        self.count += 1
        name = f"allocations {self.count}"
        self.seen = [(plain, name), *self.seen[:self.KEEP - 1]]
        return name


def _rendered_again(before: Desired, head: Validation, held: Mapping[str, Held],
                    managers: Mapping[str, Manager]) -> tuple[Desired, frozenset[str]]:
    """The desired state of the revision `before` was rendered from, for the allocations
    `held` records, and the owners whose objects that changes: only the tenants whose
    allocations changed rendered again (desired.rerender_held), else everything."""
    found = rerender_held(before, head, held)
    if found is not None:
        return found
    desired = render_desired(head, ParsedHoldings.of(held), only=sorted(managers))
    return desired, changed_owners(before, desired)


def _model(head: Validation) -> Model:
    assert head.context is not None, "a valid revision has a context"
    return Model(head.context)
