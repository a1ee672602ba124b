"""Stage `render`, for a run: the desired state of a validated revision, per manager.

`render_desired` instantiates the revision's managers (plugins.managers_of), allocates
what the revision needs given what the backends hold (allocate.py) and has each manager
render its objects, stamped with their owner's immutable fields and protection. A
desired state also says how people read its objects (`Describer`), and the digest each
manager records after applying it. The reconcile daemon keeps one between runs
(`RenderedCache`), keyed by every input of rendering.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from .allocate import Allocations, ParsedHoldings, Shared, allocate
from .contract import ClusterManager, Exposure, Manager
from .model import Model
from .models import immutable_values
from .objects import (
    TAG_IMMUTABLE,
    TAG_IMMUTABLE_FIELDS,
    TAG_PROTECTED,
    TAG_REGIONS,
    BackendObject,
    Held,
    content_hash,
    immutable_fields_tag,
    immutable_tag,
    index_objects,
    share_strings,
)
from .plan import DIGEST_FORMAT, desired_digest, legacy_desired_digest
from .plugins import managers_of
from .schema import Manifest
from .shard import Ownership
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
                   tenants: frozenset[str] | None = None, shared: Shared | None = None
                   ) -> Desired:
    """The objects a validated revision wants, keeping the `allocated` values that still hold.

    With `tenants`, only those tenants' objects (and the provider's) are rendered; with
    `shared`, what tenants share is allocated as it says (allocate.allocate).
    """
    assert validation.context is not None
    model = Model(validation.context, tenants)
    everyone = managers_of(model)
    model.physical_networks = model.full.physical_networks = {
        name: network for name, manager in everyone.items()
        if isinstance(manager, ClusterManager)
        and (network := manager.physical_network()) is not None}
    allocations = allocate(model, allocated, new_are_unknown, shared)
    managers = {name: everyone[name] for name in (only if only is not None else everyone)}
    objects: list[BackendObject] = []
    for manager in managers.values():
        objects.extend(manager.render(model, allocations))
    return Desired(model, allocations,
                   _stamp(objects, validation.by_ref(), validation.ownership), managers,
                   allocated)


def rerender_tenants(before: Desired, base: Validation, head: Validation,
                     tenants: frozenset[str]) -> Desired | None:
    """The desired state of `head` made from `before`, the desired state of `base` rendered
    with the same allocations, by rendering only `tenants` again: when nothing but those
    tenants' manifests changed, no other tenant's objects can. None when the provider's own
    objects would change too (they may gather what every tenant has): render everything.

    Both revisions are rendered for `tenants` alone, so that the provider's objects, seen
    through those tenants only, can be compared like with like.
    """
    held = ParsedHoldings.of(before.held)
    rendered = _rerendered(before, (base, held, before.allocations.shared),
                           (head, held, None), tenants)
    return rendered[0] if rendered is not None else None


def rerender_held(before: Desired, head: Validation, held: Mapping[str, Held]
                  ) -> tuple[Desired, frozenset[str]] | None:
    """The desired state of `head` for the allocations `held` records, made from `before`
    (the same revision rendered with `before.held`) by rendering again only the tenants
    whose recorded allocations differ, with the owners whose objects that changes. None
    when rendering everything is needed: an allocation drawn from what every tenant shares
    changed (a segment id, an external or gateway address, an address on a provider
    network), or the provider's own objects would change.

    A tenant's port addresses, MACs and VIPs are drawn from its own subnets, given what is
    recorded there (allocate._Holdings): no other tenant's allocation can move with them,
    and what tenants share is allocated as it was.
    """
    old = ParsedHoldings.of(before.held)
    keys = _changed_keys(old.observed, held)
    tenants = _tenants_holding(old.observed, held, keys)
    if tenants is None:
        return None
    if not tenants:  # the same allocations
        return before, frozenset()
    shared = before.allocations.shared  # the same revision, the same shared holdings
    return _rerendered(before, (head, old, shared), (head, old.updated(held, keys), shared),
                       tenants, same=True)


def reparsed(before: Mapping[str, Held], after: Mapping[str, Held]) -> ParsedHoldings:
    """`after` parsed (allocate.ParsedHoldings): from `before`'s parse, when it has one and
    they differ in a few allocations."""
    if isinstance(before, ParsedHoldings):
        keys = _changed_keys(before.observed, after)
        if len(keys) < 1000:
            return before.updated(after, keys)
    return ParsedHoldings(after)


#: What to render: a revision, the allocations recorded, and what tenants share when known
#: (allocate.Shared).
Inputs = tuple[Validation, Mapping[str, Held], Shared | None]


def _rerendered(before: Desired, base: Inputs, head: Inputs, tenants: frozenset[str],
                same: bool = False) -> tuple[Desired, frozenset[str]] | None:
    """`before` with `tenants`' objects and allocations rendered again (`base`: what
    `before` was rendered from, `head`: what to render now), and the owners whose objects
    differ between the two renders of the tenants; None when the provider's objects
    differ. `same`: the same revision; when its tenants' objects and allocations come out
    the same (a deleted port given its addresses back), `before` itself, whose digests are
    known."""
    only = list(before.managers)
    old = render_desired(base[0], base[1], only=only, tenants=tenants, shared=base[2])
    new = render_desired(head[0], head[1], only=only, tenants=tenants, shared=head[2])
    if _provider_objects(old) != _provider_objects(new):
        return None
    theirs = _in_tenants(tenants)
    mine = [o for o in new.objects if theirs(o.owner)]
    changed = _changed_owners([o for o in old.objects if theirs(o.owner)], mine)
    if same and not changed and old.allocations.values == new.allocations.values \
            and old.allocations.problems == new.allocations.problems:
        return before, changed
    kept = [o for o in before.objects if not theirs(o.owner)]
    # The allocations of every tenant: the others' as `before` has them.
    values = {key: value for key, value in before.allocations.values.items()
              if key not in old.allocations.values}
    values.update(new.allocations.values)
    problems = [p for p in before.allocations.problems if p not in old.allocations.problems]
    allocations = Allocations(values, problems + new.allocations.problems,
                              new.allocations.shared,
                              before.allocations.adopted or new.allocations.adopted)
    return Desired(new.model.full, allocations, kept + mine, new.managers, head[1]), changed


def _in_tenants(tenants: frozenset[str]) -> Callable[[str], bool]:
    """Whether an owner is one of `tenants`' resources (answered once per owner: a
    thousand tenants have 150,000 objects of 50,000 owners)."""
    seen: dict[str, bool] = {}

    def theirs(owner: str) -> bool:
        found = seen.get(owner)
        if found is None:
            found = seen[owner] = _tenant_of(owner) in tenants
        return found

    return theirs


def _changed_keys(before: Mapping[str, Held], after: Mapping[str, Held]) -> list[str]:
    """The allocation keys whose recorded value differs, or the scope of one drawn from a
    tenant's subnets."""
    if before is after:
        return []
    out = list(before.keys() - after.keys())
    for key, new in after.items():
        old = before.get(key)
        if old is None or (old.value != new.value
                           or (old.scope != new.scope and not key.startswith(_UNSCOPED))):
            out.append(key)
    return out


#: Allocations whose recorded scope nothing reads (allocate._Holdings): a segment id is
#: recorded by the fabric's port in a subnet's switch and by a cluster's network alone.
_UNSCOPED = ("segment/", "eip/", "gateway/")


def _tenants_holding(before: Mapping[str, Held], after: Mapping[str, Held],
                     keys: Iterable[str]) -> frozenset[str] | None:
    """The tenants whose subnets the allocations recorded under `keys` (before and after)
    are drawn from; None when one is drawn from what tenants share."""
    tenants: set[str] = set()
    for key in keys:
        kind, _, rest = key.partition("/")
        tenant = rest.split("/", 1)[0]
        if kind not in _TENANT_KINDS or tenant in ("", "None"):
            return None
        tenants.add(tenant)
        for held in (before.get(key), after.get(key)):
            if held is not None and held.scope is not None:
                scope = _tenant_of(held.scope)
                if scope is None:  # an address on a provider network
                    return None
                tenants.add(scope)
    return frozenset(tenants)


#: Allocations drawn from one tenant's subnets (allocate._Holdings: by subnet or tenant).
_TENANT_KINDS = frozenset({"ipv4", "ipv6", "mac", "vip"})


def changed_owners(before: Desired, after: Desired) -> frozenset[str]:
    """The owners of the objects that differ between two desired states."""
    return _changed_owners(before.objects, after.objects)


def _changed_owners(before: Iterable[BackendObject], after: Iterable[BackendObject]
                    ) -> frozenset[str]:
    old, new = index_objects(before), index_objects(after)
    return frozenset(obj.owner for uid in old.keys() | new.keys()
                     if old.get(uid) != new.get(uid)
                     for obj in (old.get(uid), new.get(uid)) if obj is not None)


def _provider_objects(desired: Desired) -> dict[str, BackendObject]:
    return {o.uid: o for o in desired.objects if _tenant_of(o.owner) is None}


def _tenant_of(owner: str) -> str | None:
    """The tenant of a resource's reference (`Kind/tenant/name`; `Kind/name`: the provider)."""
    parts = owner.split("/")
    return parts[1] if len(parts) == 3 else None


def _stamp(objects: list[BackendObject], owners: Mapping[str, Manifest],
           ownership: Ownership | None = None) -> list[BackendObject]:
    """Tag every row with its owner's immutable fields and protection; of a shard's share
    (`ownership`), keep only the shard's rows, tagged with their regions (shard.py)."""
    tags: dict[str, dict[str, str]] = {}
    out = []
    for obj in objects:
        if ownership is not None and not ownership.owns(obj.owner):
            continue  # another shard's (a provider's row of another region)
        if obj.owner not in tags:
            owner = owners.get(obj.owner)
            values = immutable_values(owner.obj) if owner is not None else {}
            tags[obj.owner] = {} if owner is None else {
                TAG_IMMUTABLE: immutable_tag(values),
                **({TAG_IMMUTABLE_FIELDS: immutable_fields_tag(values)} if values else {}),
                **({TAG_PROTECTED: "true"} if owner.obj.prevent_destroy else {})}
            regions = ownership.tag(obj.owner) if ownership is not None else None
            if regions:
                tags[obj.owner][TAG_REGIONS] = regions
        meta = {**tags[obj.owner], **obj.meta}
        if obj.identity is not None:
            meta[TAG_IMMUTABLE] = immutable_tag(obj.identity)
        out.append(BackendObject(obj.manager, obj.table, sys.intern(obj.key),
                                 sys.intern(obj.owner), share_strings(obj.fields), obj.refs,
                                 obj.parent, obj.unknown, share_strings(meta),
                                 immutable_fields=obj.immutable_fields))
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
