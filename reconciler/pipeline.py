"""The stages joined: a validated revision and an observed state → a plan.

PR mode plans between two revisions without any backend: the base revision,
rendered, stands for the observed state. Live mode (apply, reconcile) observes
the backends instead. Both share everything after the observed objects.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pydantic

from managers.base import Exposure, Manager, Observation

from .allocate import (
    Allocations,
    ParsedHoldings,
    allocate,
    ip_of_port,
    mac_of_port,
    port_key,
    segment_key,
)
from .diagnostics import Diagnostic, json_pointer
from .diff import Action, Change, diff
from .errors import UnetError
from .model import Model
from .models import WORKLOAD_KINDS, immutable_values
from .objects import (
    TAG_IMMUTABLE,
    TAG_IMMUTABLE_FIELDS,
    TAG_PROTECTED,
    BackendObject,
    Held,
    content_hash,
    immutable_fields_tag,
    immutable_tag,
    index_objects,
)
from .plan import (
    DIGEST_FORMAT,
    Plan,
    ResourcePlan,
    build_plan,
    desired_digest,
    group_by_owner,
    legacy_desired_digest,
    protected_destroys,
    replaced_fields,
    replaced_rows_reason,
    resource_action,
)
from .plugins import installed_plugins
from .schema import Manifest
from .validate import Validation


@dataclass
class Desired:
    model: Model
    allocations: Allocations
    objects: list[BackendObject]
    managers: dict[str, Manager]  # those that rendered the objects
    held: Mapping[str, Held] = field(default_factory=dict)  # what it was rendered with
    _digests: dict[tuple[str, bool], str] = field(default_factory=dict)

    def describer(self) -> Describer:
        return Describer(self.managers, self.model)

    def digest(self, manager: str, legacy: bool = False) -> str:
        """Of one manager's objects (recorded after an apply; computed once). `legacy`: in
        the format recorded before DIGEST_FORMAT."""
        if (manager, legacy) not in self._digests:
            objects = [o for o in self.objects if o.manager == manager]
            self._digests[manager, legacy] = (legacy_desired_digest(objects) if legacy
                                              else desired_digest(objects))
        return self._digests[manager, legacy]

    def was_applied(self, manager: str, recorded: str | None) -> bool:
        """Whether `recorded`, the digest `manager` recorded at its last apply, is of this
        desired state (compared in its own format)."""
        legacy = recorded is not None and not recorded.startswith(DIGEST_FORMAT)
        return recorded == self.digest(manager, legacy)


class Describer:
    """How people read backend objects, in the words of the managers that render them."""

    def __init__(self, managers: Mapping[str, Manager], model: Model) -> None:
        self.managers = managers
        self.model = model

    def label(self, obj: BackendObject) -> str:
        manager = self.managers.get(obj.manager)
        return manager.describe(obj) if manager is not None else f"{obj.table} {obj.key}"

    def exposure(self, obj: BackendObject) -> Exposure | None:
        manager = self.managers.get(obj.manager)
        return manager.exposure(obj, self.model) if manager is not None else None


class ConfigError(UnetError):
    """A manager's config names an environment variable that is not set."""


_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_config(value: Any, where: str) -> Any:
    """Replace `${NAME}` with the environment's value; secrets never live in the repo."""
    if isinstance(value, str):
        def lookup(match: re.Match[str]) -> str:
            name = match.group(1)
            if name not in os.environ:
                raise ConfigError(f"{where} uses ${{{name}}}, but {name} is not set")
            return os.environ[name]

        return _ENV_REFERENCE.sub(lookup, value)
    if isinstance(value, list):
        return [resolve_config(v, where) for v in value]
    if isinstance(value, dict):
        return {k: resolve_config(v, where) for k, v in value.items()}
    return value


def managers_of(model: Model, only: Iterable[str] | None = None,
                resolve: bool = False) -> dict[str, Manager]:
    """One plugin instance per NetworkManager of the model (or of those named in `only`),
    each with its typed config (`${ENV}` values resolved with `resolve`)."""
    plugins = installed_plugins()
    wanted = set(only) if only is not None else None
    known = {m.name for m in model.kind("NetworkManager")}
    if wanted is not None and wanted - known:
        raise ConfigError(f"no NetworkManager named {', '.join(sorted(wanted - known))}; the "
                          f"repo has {', '.join(sorted(known)) or 'none'}")
    out: dict[str, Manager] = {}
    for manager in model.kind("NetworkManager"):
        if wanted is not None and manager.name not in wanted:
            continue
        where = f"NetworkManager {manager.name}"
        config = dict(manager.obj.spec.config)
        if resolve:
            config = resolve_config(config, where)
        plugin = plugins[manager.obj.spec.plugin]
        try:  # resolved: for a run against the backend, whose files must then be there
            typed = plugin.Config.model_validate(config, context={"resolved": resolve})
        except pydantic.ValidationError as exc:  # an ${ENV} value of the wrong type, say
            problem = exc.errors()[0]
            path = "".join(f".{part}" for part in problem["loc"])
            raise ConfigError(f"{where}: config{path}: {problem['msg']}") from exc
        out[manager.name] = plugin(manager.name, typed, model.installation)
    return out


def allocation_readers(model: Model, managers: dict[str, Manager]) -> dict[str, Manager]:
    """Fabric managers not selected whose allocations selected k8s managers use.

    A k8s manager's segment ids are the ones its classes' fabric manager allocated:
    that manager is observed too (never locked or changed), so that both agree.
    """
    names = {cls.obj.spec.fabric_manager for cls in model.kind("NetworkClass")
             if cls.obj.spec.k8s_manager in managers and cls.obj.spec.fabric_manager}
    names -= set(managers)
    return managers_of(model, names, resolve=True) if names else {}


def render_desired(validation: Validation, allocated: Mapping[str, Held],
                   new_are_unknown: bool = False, only: Iterable[str] | None = None,
                   tenants: frozenset[str] | None = None) -> Desired:
    """The objects a validated revision wants, keeping the `allocated` values that still hold.

    With `tenants`, only those tenants' objects (and the provider's) are rendered.
    """
    assert validation.context is not None
    model = Model(validation.context, tenants)
    everyone = managers_of(model)
    model.physical_networks = model.full.physical_networks = {
        name: network for name, manager in everyone.items()
        if (network := manager.physical_network()) is not None}
    allocations = allocate(model, allocated, new_are_unknown)
    managers = {name: everyone[name] for name in (only if only is not None else everyone)}
    objects: list[BackendObject] = []
    for manager in managers.values():
        objects.extend(manager.render(model, allocations))
    return Desired(model, allocations, _stamp(objects, model), managers, allocated)


def rerender_tenants(before: Desired, base: Validation, head: Validation,
                     tenants: frozenset[str]) -> Desired | None:
    """The desired state of `head` made from `before`, the desired state of `base` rendered
    with the same allocations, by rendering only `tenants` again: when nothing but those
    tenants' manifests changed, no other tenant's objects can. None when the provider's own
    objects would change too (they may gather what every tenant has): render everything.

    Both revisions are rendered for `tenants` alone, so that the provider's objects, seen
    through those tenants only, can be compared like with like.
    """
    only = list(before.managers)
    held = ParsedHoldings.of(before.held)
    old = render_desired(base, held, only=only, tenants=tenants)
    new = render_desired(head, held, only=only, tenants=tenants)
    if _provider_objects(old) != _provider_objects(new):
        return None
    kept = [o for o in before.objects if _tenant_of(o.owner) not in tenants]
    mine = [o for o in new.objects if _tenant_of(o.owner) in tenants]
    return Desired(new.model.full, new.allocations, kept + mine, new.managers, held)


def changed_owners(before: Desired, after: Desired) -> frozenset[str]:
    """The owners of the objects that differ between two desired states."""
    old, new = index_objects(before.objects), index_objects(after.objects)
    return frozenset(obj.owner for uid in old.keys() | new.keys()
                     if old.get(uid) != new.get(uid)
                     for obj in (old.get(uid), new.get(uid)) if obj is not None)


def _provider_objects(desired: Desired) -> dict[str, BackendObject]:
    return {o.uid: o for o in desired.objects if _tenant_of(o.owner) is None}


def _tenant_of(owner: str) -> str | None:
    """The tenant of a resource's reference (`Kind/tenant/name`; `Kind/name`: the provider)."""
    parts = owner.split("/")
    return parts[1] if len(parts) == 3 else None


def _stamp(objects: list[BackendObject], model: Model) -> list[BackendObject]:
    """Tag every row with its owner's immutable fields and protection."""
    owners = {m.ref: m for m in model.ctx.manifests}
    tags: dict[str, dict[str, str]] = {}
    out = []
    for obj in objects:
        if obj.owner not in tags:
            owner = owners.get(obj.owner)
            values = immutable_values(owner.obj) if owner is not None else {}
            tags[obj.owner] = {} if owner is None else {
                TAG_IMMUTABLE: immutable_tag(values),
                **({TAG_IMMUTABLE_FIELDS: immutable_fields_tag(values)} if values else {}),
                **({TAG_PROTECTED: "true"} if owner.obj.prevent_destroy else {})}
        meta = {**tags[obj.owner], **obj.meta}
        out.append(BackendObject(obj.manager, obj.table, obj.key, obj.owner, obj.fields,
                                 obj.refs, obj.parent, obj.unknown, meta,
                                 immutable_fields=obj.immutable_fields))
    return out


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
    everyone = {m.tenant for m in (*before.values(), *after.values())
                if m.obj.scope == "tenant" and m.tenant is not None}
    return frozenset(tenants) if everyone - tenants else None


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
    return build_plan("pr", desired.model.installation, inputs, changes, observed, resources,
                      diagnostics, describe, before.describer() if before else None)


def plan_live(head: Validation, managers: dict[str, Manager],
              observations: Mapping[str, Observation], inputs: dict[str, Any],
              desired: Desired, owners: frozenset[str] | None = None) -> Plan:
    """Against the backends: `observations` are what the managers' sessions found, and
    `desired` the revision rendered with the allocations they record (engine.run).

    When the desired state is the one a manager last applied (the digest it recorded),
    every difference is drift. `owners`: plan only the objects of these resources (the
    daemon's targeted plan, when only they changed in the backends); the observations
    then hold only theirs. A manager that could not read all of its backend is left out
    of the plan, which then has an error (BACKEND_UNOBSERVED): it cannot be applied.
    """
    blind = frozenset(name for name, seen in observations.items() if seen.unobserved)
    observed = [obj for name in sorted(observations) if name not in blind
                for obj in observations[name].objects]
    describe = desired.describer()
    prune = bool(desired.model.config.prune)
    wanted = desired.objects if owners is None else [o for o in desired.objects
                                                     if o.owner in owners]
    if blind:
        wanted = [o for o in wanted if o.manager not in blind]
    changes = diff(index_objects(wanted), index_objects(observed), prune)
    everything = head.by_ref()
    head_manifests = everything if owners is None else {
        ref: everything[ref] for ref in owners if ref in everything}
    resources = _live_resources(changes, head_manifests, describe)
    diagnostics = [_prune_disabled(head_manifests.get(r.address), r.address)
                   for r in resources if r.reason.startswith("kept")]
    diagnostics += [_immutable_changed(head_manifests[r.address], r.fields)
                    for r in resources if r.fields and r.address in head_manifests]
    diagnostics += _safety(changes, desired, observed, {}, head_manifests)
    diagnostics += _unobserved(observations, desired.model)
    diagnostics += _conflicts(observations, changes)
    diagnostics += _allocation_problems(desired)
    diagnostics += _unrecorded(desired.model, desired.held, managers)
    digests = {name: desired.digest(name) for name in managers}
    unchanged = all(desired.was_applied(name, observations[name].applied_digest)
                    for name in managers)
    plan = build_plan("live", desired.model.installation, inputs, changes, observed, resources,
                      diagnostics, describe, repo_unchanged=unchanged)
    plan.exposure["drift_opened"] = _drift_exposure(plan, describe)
    plan.desired_digests = digests
    plan.managers = {m.name: {"plugin": m.obj.spec.plugin, "config": m.obj.spec.config}
                     for m in desired.model.kind("NetworkManager") if m.name in managers}
    return plan


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


def _drift_exposure(plan: Plan, describe: Describer) -> list[dict[str, str]]:
    """What drift opens to the outside that the repo does not: the apply closes it."""
    out = []
    for change in plan.drift:
        if change.before is None:
            continue
        now = describe.exposure(change.before)
        if now is not None and now.kind == "rule" and (
                change.after is None or now != describe.exposure(change.after)):
            out.append({**now.entry, "owner": change.obj.owner})
    return sorted(out, key=lambda e: sorted(e.items()))


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


def _conflicts(observations: Mapping[str, Observation],
               changes: list[Change]) -> list[Diagnostic]:
    creates = [c.after for c in changes if c.after is not None
               and Action.CREATE in c.action.steps]
    out = []
    for name in sorted(observations):
        for message in observations[name].conflicts(creates):
            out.append(Diagnostic("NAME_CONFLICT", message,
                                  hint="rename or remove the other object; unet never "
                                       "overwrites what it does not own"))
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
            protected.setdefault(address, "delete")
    for address, action in sorted(protected.items()):
        manifest = head.get(address) or base.get(address)
        out.append(Diagnostic(
            "PREVENT_DESTROY", f"the plan would {action} {address}, which is protected",
            file=manifest.doc.file if manifest else None,
            line=manifest.doc.line if manifest else None,
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


class RenderedCache:
    """The desired state last rendered, reused while every input it was rendered from is
    the same (the reconcile daemon renders a thousand tenants once, not on every run).

    The key (`rendered_key`) holds every input of `render_desired`: the revision's files
    (paths and contents) with unet's code, schemas and installed plugins and the file
    size bound (cache.inputs_digest), the managers of the run with their resolved configs
    (`${ENV}` values included), and the allocations the backends hold. Anything else
    rendering reads is derived from these.
    """

    def __init__(self) -> None:
        self.keys: set[str] = set()  # each names the inputs it was (or would be) rendered from
        self.desired: Desired | None = None
        self.renders = 0

    def get(self, key: str) -> Desired | None:
        return self.desired if key in self.keys else None

    def put(self, key: str, desired: Desired) -> Desired:
        self.keys, self.desired = {key}, desired
        self.renders += 1
        return desired

    def alias(self, key: str) -> None:
        """Other inputs known to render the same desired state (after an apply, the
        allocations the backends now record are the ones it holds)."""
        if self.desired is not None:
            self.keys.add(key)


def rendered_key(files: str, managers: Mapping[str, Manager],
                 held: Mapping[str, Held], allocations: str | None = None) -> str:
    """The key of a rendered desired state (RenderedCache): `files` is the digest of the
    revision's files and of unet itself (cache.inputs_digest); `allocations`, that of
    `held` when the caller has it already."""
    configs = {name: m.config.model_dump(mode="json") for name, m in sorted(managers.items())}
    return content_hash([files, configs, allocations or allocations_digest(held)])


def allocations_digest(held: Mapping[str, Held]) -> str:
    """Of every recorded allocation, value and scope (a part of `rendered_key`)."""
    return content_hash(sorted((key, h.value, h.scope or "") for key, h in held.items()))
