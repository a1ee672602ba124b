"""Stage `plan`: a validated revision and what stands for the backends → one Plan.

The planner builds the whole plan at once (plan.py is its data, plan_io.py and
plan_render.py its readers and writers): the changes per resource with their reasons,
the diagnostics of the revision and of the plan (safety, conflicts, allocations), the
exposure summary, and in live mode the drift, the digests to record and the managers.
Nothing adds to a plan once it is made.

PR mode plans between two revisions without any backend: the base revision, rendered,
stands for the observed state. Live mode (apply, reconcile) plans against what the
managers' sessions observed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .allocate import ip_of_port, mac_of_port, port_key, segment_key
from .contract import Manager, Observation
from .desired import Describer, Desired, render_desired
from .diagnostics import Diagnostic, json_pointer
from .diff import Action, Change, diff
from .model import Model
from .models import WORKLOAD_KINDS, immutable_values
from .objects import BackendObject, Held, index_objects
from .order import order
from .plan import (
    PLAINLY,
    Plan,
    ResourcePlan,
    drift_of,
    exposure_of,
    group_by_owner,
    protected_destroys,
    replaced_fields,
    replaced_rows_reason,
    resource_action,
)
from .reach import Reachability
from .reach_diff import live_reach, reach_diff
from .schema import Manifest
from .validate import Validation


def plan_between(base: Validation | None, head: Validation, inputs: dict[str, Any]) -> Plan:
    """PR mode: what merging head would do, with base standing for the backends.

    Only the tenants the pull request touches are rendered when nothing shared
    changed: the others' objects are the same in base and head by construction.
    """
    if base is not None and not base.ok:
        base = None  # an invalid base stands for empty backends
    scope = changed_tenants(base, head) if base is not None else None
    plan = _plan_between(base, head, inputs, scope)
    if scope is not None and any(d.code == "EMPTY_DESIRED_STATE" for d in plan.diagnostics):
        plan = _plan_between(base, head, inputs, None)  # only the whole picture can tell
    return plan


def changed_tenants(base: Validation, head: Validation) -> frozenset[str] | None:
    """Tenants with a manifest added, removed or changed; None when a provider manifest
    other than a Tenant changed (it may touch every tenant), or when every tenant did.

    Unchanged files share their manifest objects (`ParsedFiles`), so identity tells.
    """
    before = {id(m): m for m in base.manifests}
    after = {id(m): m for m in head.manifests}
    moved = [m for key, m in before.items() if key not in after]
    moved += [m for key, m in after.items() if key not in before]
    tenants: set[str] = set()
    for manifest in moved:
        if manifest.kind in WORKLOAD_KINDS and any(
                a.provider_network for a in manifest.obj.spec.network_attachments):
            return None  # its addresses are drawn beside other tenants'
        if manifest.obj.scope == "tenant" and manifest.tenant is not None:
            tenants.add(manifest.tenant)
        elif manifest.kind == "Tenant":
            tenants.add(manifest.name)
        else:
            return None
    tenants |= peered_with(tenants, base, head)
    everyone = {m.tenant for m in (*before.values(), *after.values())
                if m.obj.scope == "tenant" and m.tenant is not None}
    return frozenset(tenants) if everyone - tenants else None


def peered_with(tenants: set[str], base: Validation, head: Validation) -> set[str]:
    """The tenants whose rows a change of `tenants` can touch through peerings: their peers
    (peers_of), and then every tenant linked to those by a chain of established peerings
    (in either revision). One hop is not enough: the /30 of a link is derived from its pair
    and, when a router already uses it, the next free one is taken in the order of the
    pairs (Model.peering_links), so a pair that comes or goes can move the link of a pair
    beside it on one of its routers (a peer's link with a third tenant), and that one the
    next. Only established pairs have links: a request never answered moves none, so a
    tenant that requests peerings with everyone does not put everyone in every plan."""
    links: dict[str, set[str]] = {}
    for validation in (base, head):
        peered = validation.context.peered if validation.context is not None else {}
        for (own, _vn), peers in peered.items():
            for other, _peer_vn in peers:
                if own is not None and other is not None:
                    links.setdefault(own, set()).add(other)
                    links.setdefault(other, set()).add(own)
    out = tenants | peers_of(tenants, base, head)
    todo = list(out)
    while todo:
        for other in links.get(todo.pop(), ()):
            if other not in out:
                out.add(other)
                todo.append(other)
    return out - tenants


def peers_of(tenants: set[str], base: Validation, head: Validation) -> set[str]:
    """The tenants whose networks are peered (in either revision, on either side) with a
    network of `tenants`: a change of one side's peering, CIDRs or groups changes the
    other side's rows (its link and routes, its rules naming the peer's groups) and who
    can reach its NICs. Peering is not transitive: one hop is all."""
    out: set[str] = set()
    for manifest in (*base.manifests, *head.manifests):
        if manifest.kind != "VirtualNetworkPeering" or manifest.tenant is None:
            continue
        peer = manifest.obj.spec.peer.tenant or manifest.tenant
        if manifest.tenant in tenants:
            out.add(peer)
        if peer in tenants:
            out.add(manifest.tenant)
    return out


def _plan_between(base: Validation | None, head: Validation, inputs: dict[str, Any],
                  scope: frozenset[str] | None) -> Plan:
    observed: list[BackendObject] = []
    allocated: dict[str, Held] = {}
    before: Desired | None = None
    if base is not None:
        before = render_desired(base, {}, tenants=scope)
        observed = before.objects
        allocated = {key: a.held() for key, a in before.allocations.values.items()}
    desired = render_desired(head, allocated, new_are_unknown=True, tenants=scope)
    describe = desired.describer()
    prune = bool(desired.model.config.prune)
    changes = diff(index_objects(desired.objects), index_objects(observed), prune)
    base_manifests = {m.ref: m for m in base.manifests} if base is not None else {}
    head_manifests = {m.ref: m for m in head.manifests}
    resources, diagnostics = _resources(changes, base_manifests, head_manifests, prune,
                                        describe)
    diagnostics += _safety(changes, desired, observed, base_manifests, head_manifests)
    diagnostics += _allocation_problems(desired)
    diagnostics += _warnings(head)
    exposure = exposure_of(changes, describe, before.describer() if before else describe)
    touched = reach_scope(base, head) if base is not None else None
    reachability = reach_diff(
        Reachability(before.model, before.allocations, touched) if before is not None
        else None, Reachability(desired.model, desired.allocations, touched))
    return Plan("pr", desired.model.installation, inputs, observed, resources, changes,
                order(changes), diagnostics, exposure, describe=describe,
                reachability=reachability)


def reach_scope(base: Validation, head: Validation) -> frozenset[str]:
    """The tenants whose reachability a change can touch: those with a manifest added,
    removed or changed, those of a changed ProviderNetwork (named in its `tenants`, or
    attached to it), and the peers of all of them. No other provider kind decides what a
    rule lets in."""
    before = {id(m): m for m in base.manifests}
    after = {id(m): m for m in head.manifests}
    moved = [m for key, m in before.items() if key not in after]
    moved += [m for key, m in after.items() if key not in before]
    tenants = {m.tenant for m in moved if m.obj.scope == "tenant" and m.tenant is not None}
    tenants |= {m.name for m in moved if m.kind == "Tenant"}
    networks = {m.name for m in moved if m.kind == "ProviderNetwork"}
    for manifest in moved:
        if manifest.kind == "ProviderNetwork":
            tenants |= set(manifest.obj.spec.tenants)
    for manifest in (*base.manifests, *head.manifests):
        if networks and manifest.kind in WORKLOAD_KINDS and manifest.tenant is not None and any(
                a.provider_network in networks
                for a in manifest.obj.spec.network_attachments):
            tenants.add(manifest.tenant)
    return frozenset(tenants | peers_of(tenants, base, head))


def plan_live(head: Validation, managers: dict[str, Manager],
              observations: Mapping[str, Observation], inputs: dict[str, Any],
              desired: Desired, owners: frozenset[str] | None = None,
              whole: frozenset[str] = frozenset()) -> Plan:
    """Against the backends: `observations` are what the managers' sessions found, and
    `desired` the revision rendered with the allocations they record (engine.run).

    When the desired state is the one a manager last applied (the digest it recorded),
    every difference is drift. `owners`: plan only the objects of these resources (the
    daemon's targeted plan, when only they changed in the backends); the observations
    then hold only theirs, but those of the managers in `whole`, planned whole (the
    daemon reads them on every run: what changed there is not known). A manager that
    could not read all of its backend is left out of the plan, which then has an error
    (BACKEND_UNOBSERVED): it cannot be applied.
    """
    blind = frozenset(name for name, seen in observations.items() if seen.unobserved)
    observed = [obj for name in sorted(observations) if name not in blind
                for obj in observations[name].objects]
    describe = desired.describer()
    prune = bool(desired.model.config.prune)
    wanted = desired.objects if owners is None else [
        o for o in desired.objects if o.owner in owners or o.manager in whole]
    if blind:
        wanted = [o for o in wanted if o.manager not in blind]
    changes = diff(index_objects(wanted), index_objects(observed), prune)
    everything = head.by_ref()
    if owners is not None and whole:
        owners = owners | {o.owner for o in (*wanted, *observed) if o.manager in whole}
    head_manifests = everything if owners is None else {
        ref: everything[ref] for ref in owners if ref in everything}
    resources = _live_resources(changes, head_manifests, describe)
    diagnostics = [_prune_disabled(head_manifests.get(r.address), r.address)
                   for r in resources if r.reason.startswith("kept")]
    diagnostics += [_immutable_changed(head_manifests[r.address], r.fields)
                    for r in resources if r.fields and r.address in head_manifests]
    diagnostics += _safety(changes, desired, observed, {}, head_manifests)
    diagnostics += _unobserved(observations, desired.model)
    diagnostics += _conflicts(observations, changes,
                              {name for name, found in managers.items() if found.adopts})
    diagnostics += _allocation_problems(desired)
    diagnostics += _unrecorded(desired.model, desired.held, managers)
    diagnostics += _live_warnings(head, desired)
    unchanged = all(desired.was_applied(name, observations[name].applied_digest)
                    for name in managers)
    drift = drift_of(changes, unchanged)
    exposure = exposure_of(changes, describe, describe)
    exposure["drift_opened"] = _drift_exposure([c for c in changes if c.uid in drift],
                                               describe)
    return Plan("live", desired.model.installation, inputs, observed, resources, changes,
                order(changes), diagnostics, exposure, drift,
                {name: desired.digest(name) for name in managers},
                {m.name: {"plugin": m.obj.spec.plugin, "config": m.obj.spec.config}
                 for m in desired.model.kind("NetworkManager") if m.name in managers},
                describe, reachability=_live_reachability(exposure, desired))


def _live_reachability(exposure: dict[str, list[dict[str, str]]], desired: Desired
                       ) -> list[dict[str, Any]]:
    """A live plan's reachability (reach_diff.live_reach), from the NICs of the tenants
    whose rules it writes, removes or takes back from drift only."""
    owners = [e["owner"].split("/") for k in ("rules_opened", "rules_closed", "drift_opened")
              for e in exposure[k]]
    tenants = frozenset(parts[1] for parts in owners if len(parts) == 3)  # rows' tags vary
    if not tenants:
        return []
    return live_reach(exposure, Reachability(desired.model, desired.allocations, tenants))


def invalid_plan(head: Validation, mode: str, inputs: dict[str, Any]) -> Plan:
    """What a revision with errors gives: no change, only its diagnostics."""
    installation = next((str(m.obj.spec.installation) for m in head.manifests
                         if m.kind == "RepositoryConfig"), "")
    return Plan(mode, installation, inputs, [], [], [], [], list(head.diagnostics),
                exposure_of([], PLAINLY, PLAINLY))


def _warnings(head: Validation) -> list[Diagnostic]:
    """The revision's own warnings, which every plan of it shows."""
    return [d for d in head.diagnostics if not d.is_error]


def _live_warnings(head: Validation, desired: Desired) -> list[Diagnostic]:
    """The revision's warnings, POOL_NEARLY_FULL counted from what the backends hold once
    the plan is applied (what it allocates, and with prune off the values removed
    resources keep) instead of from the revision alone."""
    from .usage import after_apply, nearly_full, recorded

    after = after_apply(desired.held, desired.allocations, bool(desired.model.config.prune))
    return [d for d in _warnings(head) if d.code != "POOL_NEARLY_FULL"] + nearly_full(
        recorded(desired.model.full, after))


def _unrecorded(model: Model, held: Mapping[str, Held],
                managers: Mapping[str, Manager]) -> list[Diagnostic]:
    """A k8s manager run without its class's fabric manager must not publish values the
    fabric allocates and has not recorded yet (a subnet's segment id, the addresses of a
    VM on a hosting cluster): nothing would hold them, and the fabric could later hand
    them to someone else."""
    out: list[Diagnostic] = []
    if not any(cls.obj.spec.k8s_manager in managers
               and cls.obj.spec.fabric_manager not in managers
               for cls in model.kind("NetworkClass")):
        return out  # the usual run: no k8s manager without its fabric
    for manifest in (*model.kind("Subnet"), *model.kind("ComputeInstance")):
        hosted = manifest.kind == "ComputeInstance"
        vn = model.network_of_workload(manifest) if hosted else \
            manifest.obj.spec.virtual_network
        cls = model.class_of(manifest.tenant, vn) if vn is not None else None
        if cls is None or cls.obj.spec.k8s_manager not in managers \
                or cls.obj.spec.fabric_manager in managers \
                or (hosted and not model.hosting_cluster(manifest)):
            continue
        keys = [segment_key(manifest.tenant, manifest.name)] if not hosted else [
            key for index, attachment in enumerate(manifest.obj.spec.network_attachments)
            for key in (mac_of_port(port_key(manifest, index)),
                        *(ip_of_port(port_key(manifest, index), version) for version in
                          sorted(model.subnet_spaces(manifest.tenant, attachment.subnet))))]
        new = [key for key in keys if key not in held]
        if new:
            fabric = cls.obj.spec.fabric_manager
            out.append(Diagnostic(
                "ALLOCATION_UNRECORDED",
                f"{manifest.ref} has values that no backend records yet ({', '.join(new)}); "
                f"the fabric manager '{fabric}' records them, and it is not part of this run",
                file=manifest.doc.file, line=manifest.doc.line, path="",
                hint=f"apply with --manager {fabric} too (or first)"))
    return out


def _drift_exposure(drift: list[Change], describe: Describer) -> list[dict[str, str]]:
    """What drift opens to the outside that the repo does not: the apply closes it."""
    out = []
    for change in drift:
        if change.before is None:
            continue
        now = describe.exposure(change.before)
        if now is not None and now.kind == "rule" and (
                change.after is None or now != describe.exposure(change.after)):
            out.append({**now.entry, "owner": change.obj.owner})
    return sorted(out, key=lambda e: sorted(e.items()))


#: The reason of a resource still in the repo all of whose rows go: it has nothing to
#: realise now (a peering whose other side is gone, an attachment whose target is)
PENDING_ROWS_GO = "in the repo, with nothing to realise now: its backend rows go"


def _live_resources(changes: list[Change], head: dict[str, Manifest],
                    describe: Describer) -> list[ResourcePlan]:
    rows = group_by_owner(changes)
    out = []
    for address in sorted(rows.keys() | head.keys()):
        owned = rows.get(address, [])
        if not owned:
            out.append(ResourcePlan(address, Action.NOOP, "no backend objects"))
            continue
        action, reason = resource_action(owned, describe)
        if action is Action.DELETE and address in head:
            # declared, but with nothing to realise now (a peering or an attachment
            # whose other end is gone): its rows go, the resource stays
            action, reason = Action.UPDATE, PENDING_ROWS_GO
        if all(c.after is None or c.after is c.before for c in owned) \
                and not any(c.action.deletes for c in owned):  # prune is off: kept
            kept = "kept: removed from the repo, but prune is off"
            reason = kept if not action.changes else f"{kept}; {reason}"
        out.append(ResourcePlan(address, action, reason, owned, replaced_fields(owned)))
    return out


def _allocation_problems(desired: Desired) -> list[Diagnostic]:
    """What could not be allocated: the plan cannot be applied."""
    out = []
    for problem in desired.allocations.problems:
        doc = problem.manifest.doc if problem.manifest is not None else None
        out.append(Diagnostic(problem.code, problem.message,
                              file=doc.file if doc else None,
                              line=doc.line_of(problem.path) if doc else None,
                              path=json_pointer(problem.path) if doc else "",
                              hint=problem.hint))
    return out


def _unobserved(observations: Mapping[str, Observation], model: Model) -> list[Diagnostic]:
    """A backend that could not be read fails the plan, as Terraform's refresh does: what
    exists there is unknown, and planning it as absent would show creates that fail."""
    out = []
    names = sorted(m.name for m in model.kind("NetworkManager"))
    for name in sorted(observations):
        parts = observations[name].unobserved
        if not parts:
            continue
        manifest = next(m for m in model.kind("NetworkManager") if m.name == name)
        others = [other for other in names if other != name]
        leave_out = "; or plan the others alone: " + " ".join(
            f"--manager {other}" for other in others) if others else ""
        out.append(Diagnostic(
            "BACKEND_UNOBSERVED",
            f"NetworkManager '{name}' could not read its backend, so this plan cannot tell "
            f"what exists there and leaves its changes out: {'; '.join(dict.fromkeys(parts))}",
            file=manifest.doc.file, line=manifest.doc.line,
            hint=f"make it reachable and plan again{leave_out}"))
    return out


def _conflicts(observations: Mapping[str, Observation], changes: list[Change],
               adopting: set[str]) -> list[Diagnostic]:
    """Objects to create whose names others hold; `adopting`: the managers whose rows
    `unet import` can adopt (between merging imported manifests and `--apply`, the plan
    meets the very rows to adopt: removing them is the wrong advice)."""
    creates = [c.after for c in changes if c.after is not None
               and Action.CREATE in c.action.steps]
    out = []
    for name in sorted(observations):
        adopt = " or adopt it (unet import --apply, docs/import.md)" \
            if name in adopting else ""
        for message in observations[name].conflicts(creates):
            out.append(Diagnostic("NAME_CONFLICT", message,
                                  hint=f"rename the manifest, or remove the other object{adopt};"
                                       " unet never overwrites what it does not own"))
    return out


def _resources(changes: list[Change], base: dict[str, Manifest], head: dict[str, Manifest],
               prune: bool, describe: Describer) -> tuple[list[ResourcePlan], list[Diagnostic]]:
    rows = group_by_owner(changes)
    diagnostics: list[Diagnostic] = []
    out = []
    for address in sorted(rows.keys() | base.keys() | head.keys()):
        resource = _resource(address, rows.get(address, []), base.get(address),
                             head.get(address), prune, describe)
        if resource.fields:
            diagnostics.append(_immutable_changed(head[address], resource.fields))
        if not prune and resource.reason.startswith("kept"):
            diagnostics.append(_prune_disabled(base.get(address), address))
        out.append(resource)
    return out, diagnostics


def _resource(address: str, rows: list[Change], before: Manifest | None,
              after: Manifest | None, prune: bool, describe: Describer) -> ResourcePlan:
    if before is None and after is not None:
        return ResourcePlan(address, Action.CREATE, _new_reason(after, rows), rows)
    if after is None:
        if not prune:  # its rows stay; a replaced parent makes them be recreated
            kept = "kept: removed from the repo, but prune is off"
            if any(c.is_replace for c in rows):
                return ResourcePlan(address, Action.REPLACE,
                                    f"{kept}; {replaced_rows_reason(rows, describe)}", rows)
            return ResourcePlan(address, Action.NOOP, kept, rows)
        return ResourcePlan(address, Action.DELETE, "removed from the repo", rows)
    unchanged_rows = not any(c.action.changes for c in rows)
    if before is None or (before is after and unchanged_rows):
        return ResourcePlan(address, Action.NOOP, "up to date", rows)
    changed = _changed_immutable(before, after)
    if changed:
        return ResourcePlan(address, Action.REPLACE,
                            "immutable fields changed: " + ", ".join(changed),
                            rows, changed)
    if any(c.is_replace for c in rows):
        return ResourcePlan(address, Action.REPLACE, replaced_rows_reason(rows, describe), rows)
    if not unchanged_rows and all(c.after is None for c in rows):
        return ResourcePlan(address, Action.UPDATE, PENDING_ROWS_GO, rows)
    if not unchanged_rows:
        row_changes = [c for c in rows if c.action.changes]
        tables = sorted({c.obj.table for c in row_changes})
        why = f"changed in the repo ({_changed_fields(before, after)})" \
            if before.obj != after.obj else "depends on a change"
        return ResourcePlan(address, Action.UPDATE, f"{why}: {', '.join(tables)} rows change",
                            rows)
    if before.obj != after.obj:
        return ResourcePlan(address, Action.UPDATE, f"changed in the repo "
                            f"({_changed_fields(before, after)}); no backend change", rows)
    return ResourcePlan(address, Action.NOOP, "up to date", rows)


_SHOWN_FIELDS = 5


def _changed_fields(before: Manifest, after: Manifest) -> str:
    """The manifest fields that differ, as the manifests spell them (`spec.ingress.2.portTo`)."""
    from deepdiff import DeepDiff

    delta = DeepDiff(before.obj.model_dump(by_alias=True, exclude_none=True),
                     after.obj.model_dump(by_alias=True, exclude_none=True), view="tree")
    paths = sorted({".".join(str(part) for part in item.path(output_format="list"))
                    for report in delta.values() for item in report})
    shown = ", ".join(paths[:_SHOWN_FIELDS])
    return shown + (f" and {len(paths) - _SHOWN_FIELDS} more" if len(paths) > _SHOWN_FIELDS
                    else "")


def _new_reason(manifest: Manifest, rows: list[Change]) -> str:
    if not rows and manifest.kind == "ExternalIPAttachment":
        return "new in the repo; pending until its target is declared"
    return "new in the repo"


def _changed_immutable(before: Manifest, after: Manifest) -> list[str]:
    old, new = immutable_values(before.obj), immutable_values(after.obj)
    return sorted(path for path in old.keys() | new.keys() if old.get(path) != new.get(path))


def _immutable_changed(manifest: Manifest, fields: list[str]) -> Diagnostic:
    path = tuple(int(p) if p.isdigit() else p for p in fields[0].split("."))
    return Diagnostic("IMMUTABLE_CHANGED",
                      f"{manifest.ref} will be replaced: {', '.join(fields)} cannot change in "
                      "place", file=manifest.doc.file, line=manifest.doc.line_of(path),
                      path=json_pointer(path),
                      hint="its backend objects are deleted and created again; traffic "
                           "through them is interrupted")


def _prune_disabled(manifest: Manifest | None, address: str) -> Diagnostic:
    return Diagnostic("PRUNE_DISABLED",
                      f"{address} was removed from the repo but stays in the backends",
                      file=manifest.doc.file if manifest else None,
                      line=manifest.doc.line if manifest else None,
                      hint="set spec.prune: true in unet.yaml to delete what leaves the repo")


def _safety(changes: list[Change], desired: Desired, observed: list[BackendObject],
            base: dict[str, Manifest], head: dict[str, Manifest]) -> list[Diagnostic]:
    out = []
    protected = protected_destroys(changes)
    config = desired.model.config
    for address, manifest in base.items():  # objects without backend rows count too
        if manifest.obj.prevent_destroy and address not in head and config.prune:
            protected.setdefault(address, Action.DELETE)
    for address, action in sorted(protected.items()):
        found = head.get(address) or base.get(address)
        out.append(Diagnostic(
            "PREVENT_DESTROY", f"the plan would {action} {address}, which is protected",
            file=found.doc.file if found else None,
            line=found.doc.line if found else None,
            hint="remove the annotation network.osac.io/prevent-destroy first, in its own "
                 "change, if this is intended"))
    out += _destroys_foreign(changes, base, head, desired.describer())
    if observed and not desired.objects and not config.allow_empty and config.prune:
        out.append(Diagnostic(
            "EMPTY_DESIRED_STATE",
            f"the plan deletes all {len(observed)} objects of installation "
            f"{config.installation}", file="unet.yaml", line=1,
            hint="set spec.allowEmpty: true in unet.yaml if that is really intended"))
    return out


def _destroys_foreign(changes: list[Change], base: dict[str, Manifest],
                      head: dict[str, Manifest], describe: Describer) -> list[Diagnostic]:
    """Deleting or replacing an object destroys what others keep inside it: refused."""
    out = []
    for change in changes:
        before = change.before
        if before is None or not before.holds or not change.action.deletes:
            continue
        manifest = head.get(before.owner) or base.get(before.owner)
        shown = ", ".join(before.holds[:10]) + (f" and {len(before.holds) - 10} more"
                                                if len(before.holds) > 10 else "")
        out.append(Diagnostic(
            "HOLDS_FOREIGN_OBJECTS",
            f"the plan would {change.action} {describe.label(before)} "
            f"({before.owner}), which holds what unet does not own: {shown}; they would be "
            "destroyed with it",
            file=manifest.doc.file if manifest else None,
            line=manifest.doc.line if manifest else None,
            hint="whoever added them moves or removes them first; unet never destroys "
                 "objects it does not own"))
    return out


