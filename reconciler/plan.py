"""The plan: one structure (its JSON is plan_io.py's, its text and Markdown plan_render.py's).

A plan lists every resource (no-ops included) with its action list and reason,
the backend changes under it, separate drift entries, the waves, counts, the
input revisions, the exposure summary and the observed-state fingerprint.
"""

from __future__ import annotations

import functools
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .diagnostics import Diagnostic
from .diff import Action, Change
from .objects import TAG_HASH, TAG_PROTECTED, BackendObject, list_hash
from .order import Step, order

if TYPE_CHECKING:
    from .contract import Exposure

FORMAT_VERSION = "1.3"
SUPPORTED_MAJOR = 1
#: The order in which plans count and list actions: what destroys first.
ACTION_ORDER = (Action.DELETE, Action.REPLACE, Action.CREATE, Action.UPDATE, Action.NOOP)


class Describe(Protocol):
    """How people read backend objects: the managers' own words (desired.Describer)."""

    def label(self, obj: BackendObject) -> str: ...

    def exposure(self, obj: BackendObject) -> Exposure | None: ...


class _Plainly:
    """For plans made without the managers at hand: table and key, no exposure."""

    def label(self, obj: BackendObject) -> str:
        return f"{obj.table} {obj.key}"

    def exposure(self, obj: BackendObject) -> Exposure | None:
        return None


PLAINLY: Describe = _Plainly()


@dataclass
class ResourcePlan:
    address: str  # Kind/tenant/name
    action: Action
    reason: str
    changes: list[Change] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)  # immutable fields that forced a replace


@dataclass(frozen=True)
class Plan:
    """One plan, made whole by the planner (planner.py); nothing is added to it after."""

    mode: str  # "pr" (between two revisions) or "live" (against the backends)
    installation: str
    inputs: dict[str, Any]
    observed: list[BackendObject]  # for the fingerprint, computed when asked for
    resources: list[ResourcePlan]
    changes: list[Change]
    waves: list[list[Step]]
    diagnostics: list[Diagnostic]
    exposure: dict[str, list[dict[str, str]]]
    drift_ids: set[str] = field(default_factory=set)
    desired_digests: dict[str, str] = field(default_factory=dict)  # per manager, live mode
    managers: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> plugin, config
    describe: Describe = PLAINLY
    #: What the change lets in, per workload NIC (reach_diff.py); PR mode
    reachability: list[dict[str, Any]] = field(default_factory=list)

    @functools.cached_property
    def fingerprint(self) -> str:
        """Only a saved plan needs it; a plan applied at once skips hashing every row."""
        return fingerprint(self.observed)

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(map(str, ACTION_ORDER), 0)
        for resource in self.resources:
            counts[resource.action] += 1
        return counts

    @property
    def row_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(map(str, ACTION_ORDER), 0)
        for change in self.changes:
            counts[change.action] += 1
        return counts

    @property
    def drift(self) -> list[Change]:
        return [c for c in self.changes if c.uid in self.drift_ids]

    @property
    def has_changes(self) -> bool:
        return any(c.action.changes for c in self.changes)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def fingerprint(observed: Iterable[BackendObject]) -> str:
    """Of the observed state: a saved plan is only applied while this still holds."""
    return _digest(observed)


#: The prefix of a desired state's digest made of its objects' content hashes. A digest
#: without it was recorded by unet before 2026-11-26, made of the objects' whole content.
DIGEST_FORMAT = "2:"


def desired_digest(desired: Iterable[BackendObject]) -> str:
    """Of a desired state: recorded after an apply, to tell drift from repo changes.

    Made of each object's content hash, which an object computes once: a daemon that
    renders one tenant again hashes that tenant's objects only, not every row.
    """
    return DIGEST_FORMAT + list_hash(sorted((o.uid, o.content_hash) for o in desired))


def legacy_desired_digest(desired: Iterable[BackendObject]) -> str:
    """The digest recorded before DIGEST_FORMAT: read, so that an installation last
    applied by such a version still tells drift from repo changes. Never recorded."""
    return _digest(desired)


def _digest(objects: Iterable[BackendObject]) -> str:
    """All the objects' content, in uid order, encoded a thousand objects at a time (not
    one by one, and never as one text of every row: `list_hash`)."""
    return list_hash(sorted((o.uid, o.fields, o.refs, o.parent, o.meta) for o in objects))


def drift_of(changes: list[Change], repo_unchanged: bool) -> set[str]:
    """Changes that undo what was done outside unet, rather than carry out the repo.

    A row edited by hand still carries the hash of what unet wrote. When the
    desired state is the one last applied, every change is drift: rows deleted
    or added by hand included.
    """
    if repo_unchanged:
        return {c.uid for c in changes if c.action.changes}
    return {c.uid for c in changes if _edited(c)}


def _edited(change: Change) -> bool:
    """Still tagged with the hash of the desired content, yet not that content."""
    before, after = change.before, change.after
    return (before is not None and after is not None and change.action.changes
            and before.meta.get(TAG_HASH) == after.content_hash
            and before.content_hash != after.content_hash)


def restrict_to(plan: Plan, keep: set[str]) -> Plan:
    """The plan with only the changes in `keep` (e.g. drift); the rest left as they are."""
    changes = []
    for change in plan.changes:
        if change.uid in keep or not change.action.changes:
            changes.append(change)
        elif change.before is not None:
            changes.append(Change(change.uid, change.before, change.before, Action.NOOP,
                                  "not drift: left for a normal apply"))
    owners = group_by_owner(changes)
    resources = [ResourcePlan(address, *resource_action(rows, plan.describe), rows,
                              replaced_fields(rows))
                 for address, rows in sorted(owners.items())]
    waves = order(changes)
    return Plan(plan.mode, plan.installation, {**plan.inputs, "refresh_only": True},
                plan.observed, resources, changes, waves, plan.diagnostics,
                exposure_of(changes, plan.describe, plan.describe),
                keep & {c.uid for c in changes}, plan.desired_digests, plan.managers,
                plan.describe)


def group_by_owner(changes: list[Change]) -> dict[str, list[Change]]:
    out: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        out[change.obj.owner].append(change)
    return out


def resource_action(rows: list[Change], describe: Describe) -> tuple[Action, str]:
    """A resource's action from its rows (live mode, or when the manifest is unchanged)."""
    kinds = {c.action for c in rows}
    if not rows or kinds == {Action.NOOP}:
        return Action.NOOP, "up to date"
    if kinds <= {Action.CREATE}:
        return Action.CREATE, "not in the backend yet"
    if kinds <= {Action.DELETE, Action.NOOP} and all(c.after is None for c in rows):
        return Action.DELETE, "no longer in the repo"
    if any(c.is_replace for c in rows):
        fields = replaced_fields(rows)
        if fields:
            return Action.REPLACE, "immutable fields changed: " + ", ".join(fields)
        return Action.REPLACE, replaced_rows_reason(rows, describe)
    changed = sorted({c.obj.table for c in rows if c.action.changes})
    return Action.UPDATE, "backend rows change: " + ", ".join(changed)


def replaced_fields(rows: list[Change]) -> list[str]:
    """The manifest fields of the rows' owner whose change replaces them, as far as the
    backend's rows record them (TAG_IMMUTABLE_FIELDS)."""
    return sorted({path for c in rows if c.is_replace for path in c.owner_fields})


def replaced_rows_reason(rows: list[Change], describe: Describe) -> str:
    """Why a resource is replaced when its backend objects are: the first one's reason."""
    replaced = sorted((c for c in rows if c.is_replace), key=lambda c: c.uid)
    first = replaced[0]
    more = f" (and {len(replaced) - 1} more)" if len(replaced) > 1 else ""
    return f"{describe.label(first.obj)} must be recreated: {first.reason}{more}"


def protected_destroys(changes: list[Change]) -> dict[str, Action]:
    """Owner → action, for protected resources the plan would delete or replace. A row
    deleted while its owner gets a new row of the same table (an ACL of a rule that
    changed: rows are keyed by content) is an update of the owner, which protection
    allows, as Terraform's prevent_destroy does; any other deleted row is not."""
    renewed = {(c.obj.owner, c.obj.table) for c in changes if c.action is Action.CREATE}
    out: dict[str, Action] = {}
    for change in changes:  # protected in the backend, or by the repo as it is now
        protected = any(obj is not None and obj.meta.get(TAG_PROTECTED) == "true"
                        for obj in (change.before, change.after))
        destroyed = change.is_replace or (
            change.action is Action.DELETE and (change.obj.owner, change.obj.table) not in renewed)
        if protected and destroyed:
            out.setdefault(change.obj.owner, change.action)
    return out


#: Where each kind of exposure goes: (what appears, what goes away).
_EXPOSURE = {"rule": ("rules_opened", "rules_closed"), "ip": ("ips_attached", "ips_detached"),
             "nat": ("nat_added", "nat_removed")}


def exposure_of(changes: list[Change], describe: Describe,
                describe_before: Describe) -> dict[str, list[dict[str, str]]]:
    """What the plan opens or closes to the outside, in the managers' words: for each
    object that changes, what it opened before and what it opens after, where they differ."""
    out: dict[str, list[dict[str, str]]] = {
        "rules_opened": [], "rules_closed": [], "ips_attached": [], "ips_detached": [],
        "nat_added": [], "nat_removed": [], "drift_opened": [],
    }
    for change in changes:
        if not change.action.changes:
            continue
        before = describe_before.exposure(change.before) if change.before else None
        after = describe.exposure(change.after) if change.after else None
        if before == after:
            continue
        for found, side, obj in ((after, 0, change.after), (before, 1, change.before)):
            if found is not None and obj is not None:
                out[_EXPOSURE[found.kind][side]].append({**found.entry, "owner": obj.owner})
    for entries in out.values():
        entries.sort(key=lambda e: sorted(e.items()))
    return out

