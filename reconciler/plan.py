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
from typing import Any

from .diagnostics import Diagnostic
from .diff import CREATE, DELETE, NOOP, REPLACE, UPDATE, Change
from .objects import TAG_EXPOSURE, TAG_HASH, TAG_PROTECTED, BackendObject, content_hash
from .order import Step, order

FORMAT_VERSION = "1.1"
SUPPORTED_MAJOR = 1
ACTION_ORDER = ("delete", "replace", "create", "update", "no-op")


def action_name(actions: Iterable[str]) -> str:
    actions = tuple(actions)
    return "replace" if actions == REPLACE else actions[0]


def object_label(obj: BackendObject) -> str:
    """How people know a backend object: its table and name (its key when it has none)."""
    name = obj.fields.get("name")
    if not isinstance(name, str):
        metadata = obj.fields.get("metadata")
        name = metadata.get("name") if isinstance(metadata, dict) else None
    return f"{obj.table} {name if isinstance(name, str) else obj.key.removeprefix(obj.table + '/')}"


@dataclass
class ResourcePlan:
    address: str  # Kind/tenant/name
    actions: tuple[str, ...]
    reason: str
    changes: list[Change] = field(default_factory=list)
    fields: list[str] = field(default_factory=list)  # immutable fields that forced a replace

    @property
    def action(self) -> str:
        return action_name(self.actions)


@dataclass
class Plan:
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

    @functools.cached_property
    def fingerprint(self) -> str:
        """Only a saved plan needs it; a plan applied at once skips hashing every row."""
        return fingerprint(self.observed)

    @property
    def counts(self) -> dict[str, int]:
        counts = dict.fromkeys(ACTION_ORDER, 0)
        for resource in self.resources:
            counts[resource.action] += 1
        return counts

    @property
    def row_counts(self) -> dict[str, int]:
        counts = dict.fromkeys(ACTION_ORDER, 0)
        for change in self.changes:
            counts[action_name(change.actions)] += 1
        return counts

    @property
    def drift(self) -> list[Change]:
        return [c for c in self.changes if c.uid in self.drift_ids]

    @property
    def has_changes(self) -> bool:
        return any(c.actions != (NOOP,) for c in self.changes)

    @property
    def ok(self) -> bool:
        return not any(d.is_error for d in self.diagnostics)


def fingerprint(observed: Iterable[BackendObject]) -> str:
    """Of the observed state: a saved plan is only applied while this still holds."""
    return _digest(observed)


def desired_digest(desired: Iterable[BackendObject]) -> str:
    """Of a desired state: recorded after an apply, to tell drift from repo changes."""
    return _digest(desired)


def _digest(objects: Iterable[BackendObject]) -> str:
    """All the objects' content, in uid order, encoded at once (not object by object)."""
    return content_hash(sorted((o.uid, o.fields, o.refs, o.parent, o.meta) for o in objects))


def drift_of(changes: list[Change], repo_unchanged: bool) -> set[str]:
    """Changes that undo what was done outside unet, rather than carry out the repo.

    A row edited by hand still carries the hash of what unet wrote. When the
    desired state is the one last applied, every change is drift: rows deleted
    or added by hand included.
    """
    if repo_unchanged:
        return {c.uid for c in changes if c.actions != (NOOP,)}
    return {c.uid for c in changes if _edited(c)}


def _edited(change: Change) -> bool:
    """Still tagged with the hash of the desired content, yet not that content."""
    before, after = change.before, change.after
    return (before is not None and after is not None and change.actions != (NOOP,)
            and before.meta.get(TAG_HASH) == after.content_hash
            and before.content_hash != after.content_hash)


def build_plan(mode: str, installation: str, inputs: dict[str, Any], changes: list[Change],
               observed: list[BackendObject], resources: list[ResourcePlan],
               diagnostics: list[Diagnostic], repo_unchanged: bool = False) -> Plan:
    waves = order(changes)
    drift = drift_of(changes, repo_unchanged) if mode == "live" else set()
    return Plan(mode, installation, inputs, observed, resources, changes, waves,
                diagnostics, exposure_of(changes), drift)


def restrict_to(plan: Plan, keep: set[str]) -> Plan:
    """The plan with only the changes in `keep` (e.g. drift); the rest left as they are."""
    changes = []
    for change in plan.changes:
        if change.uid in keep or change.actions == (NOOP,):
            changes.append(change)
        elif change.before is not None:
            changes.append(Change(change.uid, change.before, change.before, (NOOP,),
                                  "not drift: left for a normal apply"))
    owners = group_by_owner(changes)
    resources = [ResourcePlan(address, *resource_actions(rows), rows)
                 for address, rows in sorted(owners.items())]
    waves = order(changes)
    return Plan(plan.mode, plan.installation, {**plan.inputs, "refresh_only": True},
                plan.observed, resources, changes, waves, plan.diagnostics,
                exposure_of(changes), keep & {c.uid for c in changes}, plan.desired_digests,
                plan.managers)


def group_by_owner(changes: list[Change]) -> dict[str, list[Change]]:
    out: dict[str, list[Change]] = defaultdict(list)
    for change in changes:
        out[change.obj.owner].append(change)
    return out


def resource_actions(rows: list[Change]) -> tuple[tuple[str, ...], str]:
    """A resource's action from its rows (live mode, or when the manifest is unchanged)."""
    kinds = {c.actions for c in rows}
    if not rows or kinds == {(NOOP,)}:
        return (NOOP,), "up to date"
    if kinds <= {(CREATE,)}:
        return (CREATE,), "not in the backend yet"
    if kinds <= {(DELETE,), (NOOP,)} and all(c.after is None for c in rows):
        return (DELETE,), "no longer in the repo"
    if any(c.is_replace for c in rows):
        return REPLACE, replaced_rows_reason(rows)
    changed = sorted({c.obj.table for c in rows if c.actions != (NOOP,)})
    return (UPDATE,), "backend rows change: " + ", ".join(changed)


def replaced_rows_reason(rows: list[Change]) -> str:
    """Why a resource is replaced when its backend objects are: the first one's reason."""
    replaced = sorted((c for c in rows if c.is_replace), key=lambda c: c.uid)
    first = replaced[0]
    more = f" (and {len(replaced) - 1} more)" if len(replaced) > 1 else ""
    return f"{object_label(first.obj)}{_where(first.obj)} must be recreated: " \
           f"{first.reason}{more}"


def _where(obj: BackendObject) -> str:
    """The cluster of a Kubernetes object, whose key starts with it."""
    return f" on cluster {obj.key.split('/', 1)[0]}" if "metadata" in obj.fields else ""


def protected_destroys(changes: list[Change]) -> dict[str, str]:
    """Owner → action, for protected resources the plan would delete or replace."""
    out: dict[str, str] = {}
    for change in changes:  # protected in the backend, or by the repo as it is now
        protected = any(obj is not None and obj.meta.get(TAG_PROTECTED) == "true"
                        for obj in (change.before, change.after))
        if protected and change.actions in ((DELETE,), REPLACE):
            out.setdefault(change.obj.owner, action_name(change.actions))
    return out


def exposure_of(changes: list[Change]) -> dict[str, list[dict[str, str]]]:
    """What the plan opens or closes to the outside, without reading ACLs."""
    out: dict[str, list[dict[str, str]]] = {
        "rules_opened": [], "rules_closed": [], "ips_attached": [], "ips_detached": [],
        "nat_added": [], "nat_removed": [], "drift_opened": [],
    }
    for change in changes:
        if change.actions == (NOOP,):
            continue
        before, after = change.before, change.after
        added = after if after is not None and (before is None or change.is_replace) else None
        removed = before if before is not None and (after is None or change.is_replace) else None
        for obj, key in ((added, "opened"), (removed, "closed")):
            if obj is not None and obj.meta.get(TAG_EXPOSURE):
                out[f"rules_{key}"].append({"rule": obj.meta[TAG_EXPOSURE], "owner": obj.owner})
        if change.obj.table == "NAT":
            _nat_exposure(out, change, before, after)
    for entries in out.values():
        entries.sort(key=lambda e: sorted(e.items()))
    return out


def _nat_exposure(out: dict[str, list[dict[str, str]]], change: Change,
                  before: BackendObject | None, after: BackendObject | None) -> None:
    def entry(obj: BackendObject) -> dict[str, str]:
        return {"address": str(obj.fields.get("external_ip")),
                "target": str(obj.fields.get("logical_ip")), "owner": obj.owner}

    kind = change.obj.fields.get("type")
    added, removed = ("ips_attached", "ips_detached") if kind == "dnat_and_snat" \
        else ("nat_added", "nat_removed")
    changed = before is None or after is None or before.fields != after.fields
    if changed and after is not None:
        out[added].append(entry(after))
    if changed and before is not None:
        out[removed].append(entry(before))
