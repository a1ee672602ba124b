"""How full the shared spaces are: every ExternalIPPool, every subnet (and ProviderNetwork)
per address family, and every NetworkClass's segment range, with its size, what is used and
what is free (`unet show usage`, the daemon's gauges, and POOL_NEARLY_FULL).

What is used is counted one of two ways, from the same sizes:

- `recorded`: the values the backends record (`unet:alloc:*` tags, as
  `objects.observed_allocations` reads them, or an allocation's values) that lie in each
  space: what is taken now, removed resources' values that prune kept included;
- `demanded`: what the revision's own allocation takes from empty backends, counted from
  the manifests without allocating (one value per consumer: a port's address per family,
  a Cluster's VIPs, an ExternalIP, a router's own external address, a bridged subnet's
  segment id). It costs what reading the manifests does, so `validate` can afford it.

Nothing here does I/O.
"""

from __future__ import annotations

import math
import socket
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import netaddr

from .allocate import Allocations
from .check.context import AddressSpace
from .diagnostics import Diagnostic, json_pointer
from .model import Model
from .models import Family, segment_of
from .objects import Held
from .schema import Manifest

#: POOL_NEARLY_FULL from this share used, in per cent.
NEARLY_FULL_PERCENT = 90
FORMAT_VERSION = "1.0"

#: (kind, tenant, name, family): one space. Kind: ExternalIPPool, Subnet or ProviderNetwork
#: (the addresses ports get), VIPBlock (a Subnet's block of Cluster VIPs, which ports never
#: get), or NetworkClass (its segment range; family None).
SpaceId = tuple[str, str | None, str, int | None]


@dataclass(frozen=True)
class Space:
    """One space values are allocated from, and what declares it."""

    id: SpaceId
    size: int
    manifest: Manifest

    @property
    def label(self) -> str:
        kind, tenant, name, family = self.id
        owner = f"{tenant}/{name}" if tenant else name
        if kind == "NetworkClass":
            return f"NetworkClass {owner} segment range"
        if kind == "VIPBlock":
            return f"Subnet {owner} IPv{family} VIP block"
        return f"{kind} {owner}" + (f" IPv{family}" if kind != "ExternalIPPool" else "")


@dataclass(frozen=True)
class Usage:
    space: Space
    used: int

    @property
    def free(self) -> int:
        return max(self.space.size - self.used, 0)

    @property
    def percent(self) -> float:
        return 100.0 * self.used / self.space.size if self.space.size else 100.0

    @property
    def shown_percent(self) -> str:
        """The percentage for people: 100 only when nothing is free (99.6 % with one
        address free is not full)."""
        return f"{self.percent if not self.free else min(self.percent, 99.0):.0f}"

    @property
    def nearly_full(self) -> bool:
        return self.used * 100 >= self.space.size * NEARLY_FULL_PERCENT

    def to_json(self) -> dict[str, Any]:
        kind, tenant, name, family = self.space.id
        return {"kind": kind, "tenant": tenant, "name": name, "family": family,
                "size": self.space.size, "used": self.used, "free": self.free,
                "percent": round(self.percent, 1)}


# --- the spaces -----------------------------------------------------------------------------


def spaces(model: Model, tenant: str | None = None) -> list[Space]:
    """Every space of the revision, in a fixed order; with `tenant`, those it draws from:
    its subnets, the provider networks shared with it, the pools it may use and the
    segment ranges of its networks' classes."""
    # A pool of a region the tenant lacks is none of its (REGION_NOT_ALLOWED), open or not.
    regions = {region for found in model.kind("Tenant") if found.name == tenant
               for region in found.obj.spec.regions}
    pools = [Space(("ExternalIPPool", None, pool.name, None), _capacity(space), pool)
             for pool in model.kind("ExternalIPPool")
             if (space := model.pool_space(pool.name)) is not None
             and (tenant is None or ((not pool.obj.spec.tenants
                                      or tenant in pool.obj.spec.tenants)
                                     and pool.obj.spec.region in regions))]
    segments = [*model.kind("Subnet"), *model.kind("ProviderNetwork")]
    subnets = [part for segment in segments if tenant is None or segment.tenant == tenant
               or (segment.kind == "ProviderNetwork" and tenant in segment.obj.spec.tenants)
               for version, space in sorted(model.subnet_spaces(segment.tenant,
                                                                segment.name).items())
               for part in _subnet_parts(segment, version, space)]
    used_classes = {model.ctx.vn_class.get((s.tenant, s.obj.spec.virtual_network))
                    for s in model.kind("Subnet") if s.tenant == tenant}
    classes = [Space(("NetworkClass", None, cls.name, None),
                     cls.obj.spec.segment_range.end - cls.obj.spec.segment_range.start + 1, cls)
               for cls in model.kind("NetworkClass") if cls.obj.spec.k8s_manager is not None
               and (tenant is None or cls.name in used_classes)]
    return [*pools, *subnets, *classes]


def _subnet_parts(segment: Manifest, version: int, space: AddressSpace) -> list[Space]:
    """The addresses of a subnet's ports, and its VIP block when it has one: two spaces,
    as a port never gets an address of the block."""
    ports = Space((segment.kind, segment.tenant, segment.name, version),
                  _capacity(space, space.vip_block), segment)
    if space.vip_block is None:
        return [ports]
    first, last = space.vip_block
    vips = AddressSpace(space.net, space.gateway, space.reserved, [(first, last)])
    return [ports, Space(("VIPBlock", segment.tenant, segment.name, version),
                         _capacity(vips, None), segment)]


def _capacity(space: AddressSpace, skip: tuple[int, int] | None = None) -> int:
    """Addresses allocation may hand out: its ranges (but `skip`), less what they
    reserve."""
    size = 0
    for first, last in space.ranges:
        size += last - first + 1
        if skip is not None:
            size -= max(0, min(last, skip[1]) - max(first, skip[0]) + 1)
    return size - sum(1 for value in space.reserved
                      if any(first <= value <= last for first, last in space.ranges)
                      and not (skip is not None and skip[0] <= value <= skip[1]))


# --- used: recorded in the backends ---------------------------------------------------------


def recorded(model: Model, held: Mapping[str, Held], tenant: str | None = None) -> list[Usage]:
    """What each space holds of the recorded allocations `held`."""
    index = _Recorded(model, held)
    return [Usage(space, index.used(space)) for space in spaces(model, tenant)]


def allocated(allocations: Allocations) -> dict[str, Held]:
    """An allocation's values as recorded allocations (unknown ones left out)."""
    return {key: value.held() for key, value in allocations.values.items() if value.known}


def after_apply(held: Mapping[str, Held], allocations: Allocations, prune: bool
                ) -> dict[str, Held]:
    """What the backends record once a plan made with `held` and `allocations` is applied:
    its allocation, and with prune off what removed resources keep (with it on, their
    rows and values go)."""
    return allocated(allocations) if prune else {**held, **allocated(allocations)}


class _Recorded:
    """The recorded allocations, parsed once and grouped by where they can lie."""

    def __init__(self, model: Model, held: Mapping[str, Held]) -> None:
        self.model = model
        self.scoped: dict[str, set[tuple[int, int]]] = defaultdict(set)  # subnet ref
        self.unscoped: dict[str, set[tuple[int, int]]] = defaultdict(set)  # tenant
        self.external: set[tuple[int, int]] = set()
        self.segments: dict[str, int] = {}
        for key, found in held.items():
            self._put(key, found)

    def _put(self, key: str, found: Held) -> None:
        kind, _, rest = key.partition("/")
        if kind == "segment":
            if found.value.isdigit():
                self.segments[rest] = int(found.value)
            return
        if kind not in ("ipv4", "ipv6", "vip", "eip", "gateway"):
            return
        value = _parsed(found.value)
        if value is None:
            return
        scope = found.scope or (self._provider_network(rest) if kind in ("ipv4", "ipv6")
                                else None)
        if kind in ("eip", "gateway"):
            self.external.add(value)
        elif scope is not None:
            self.scoped[scope].add(value)
        else:
            self.unscoped[rest.split("/", 1)[0]].add(value)

    def _provider_network(self, port: str) -> str | None:
        """The ProviderNetwork a workload's attachment (`tenant/Kind/name/index`) is on,
        when it is: a VM on a hosting cluster records its address there on no port, so
        the record names no scope."""
        tenant, _, rest = port.partition("/")
        kind, _, rest = rest.partition("/")
        name, _, index = rest.rpartition("/")
        if not index.isdigit():  # not a workload's port (a NAT gateway's address, ...)
            return None
        workload = self.model.get(kind, tenant, name)
        attachments = workload.obj.spec.network_attachments if workload is not None else []
        network = attachments[int(index)].provider_network \
            if int(index) < len(attachments) else None
        found = self.model.get("ProviderNetwork", None, network) if network else None
        return found.ref if found is not None else None

    def used(self, space: Space) -> int:
        kind, tenant, name, family = space.id
        if kind == "NetworkClass":
            return self._segments(space)
        if kind == "ExternalIPPool":
            found = self.model.pool_space(name)
            candidates: Iterable[tuple[int, int]] = self.external
        else:
            found = self.model.subnet_spaces(tenant, name).get(family or 4)
            candidates = self.scoped.get(space.manifest.ref, set()) | (
                self.unscoped.get(str(tenant), set()) if tenant is not None else set())
        assert found is not None
        net = found.net
        block = found.vip_block if kind in ("Subnet", "VIPBlock") else None
        return sum(1 for version, value in candidates
                   if version == net.version and net.first <= value <= net.last
                   and _in_part(kind, value, block))

    def _segments(self, space: Space) -> int:
        """Segment ids in the class's range held by its subnets and provider networks, and
        by subnets the revision no longer has (their class is unknown)."""
        cls = space.manifest
        seg_range = cls.obj.spec.segment_range
        ids = set()
        for rest, value in self.segments.items():
            tenant, _, name = rest.partition("/")
            if not seg_range.start <= value <= seg_range.end:
                continue
            owner = self._class_of_segment(None if tenant == "None" else tenant, name)
            if owner is None or owner == cls.name:
                ids.add(value)
        return len(ids)

    def _class_of_segment(self, tenant: str | None, name: str) -> str | None:
        if tenant is None:
            found = self.model.provider_network_class(name)
            return found.name if found is not None else None
        subnet = self.model.get("Subnet", tenant, name)
        if subnet is None:
            return None
        found = self.model.class_of(tenant, subnet.obj.spec.virtual_network)
        return found.name if found is not None else None


def _in_part(kind: str, value: int, block: tuple[int, int] | None) -> bool:
    """Whether an address of a subnet counts in this part of it: the VIP block, or the
    rest (the ports')."""
    inside = block is not None and block[0] <= value <= block[1]
    return inside if kind == "VIPBlock" else not inside


def _parsed(text: str) -> tuple[int, int] | None:
    """(family, value) of an address (inet_pton: ten times netaddr's speed, and a plan at
    1,000 tenants counts 100,000 of them)."""
    family, version = (socket.AF_INET6, 6) if ":" in text else (socket.AF_INET, 4)
    try:
        return version, int.from_bytes(socket.inet_pton(family, text), "big")
    except (OSError, ValueError):
        return None


# --- used: demanded by the revision ---------------------------------------------------------


def demanded(model: Model, tenant: str | None = None) -> list[Usage]:
    """What each space gives the revision's consumers, allocated into empty backends."""
    counts = _demand(model)
    return [Usage(space, counts.get(space.id, 0)) for space in spaces(model, tenant)]


def _demand(model: Model) -> dict[SpaceId, int]:
    counts: dict[SpaceId, int] = defaultdict(int)
    for eip in model.kind("ExternalIP"):
        counts["ExternalIPPool", None, eip.obj.spec.pool, None] += 1
    for _tenant, _vn, _version, pool in model.gateway_pools():
        counts["ExternalIPPool", None, pool, None] += 1
    for workload in model.workloads:
        for attachment in workload.obj.spec.network_attachments:
            tenant, name = segment_of(workload.tenant, attachment)
            kind = "Subnet" if tenant is not None else "ProviderNetwork"
            for version, space in model.port_spaces(workload, attachment).items():
                fixed = getattr(attachment, Family(version).address_attr)
                counts[_part_of(kind, space, fixed, False), tenant, name, version] += 1
        if workload.kind == "Cluster":
            _count_vips(model, workload, counts)
    for subnet in model.kind("Subnet"):
        cls = model.class_of(subnet.tenant, subnet.obj.spec.virtual_network)
        if cls is not None and cls.obj.spec.k8s_manager is not None:
            counts["NetworkClass", None, cls.name, None] += 1
    for network in model.kind("ProviderNetwork"):
        cls = model.provider_network_class(network.name)
        if cls is not None and cls.obj.spec.k8s_manager is not None:
            counts["NetworkClass", None, cls.name, None] += 1
    return counts


def _count_vips(model: Model, cluster: Manifest, counts: dict[SpaceId, int]) -> None:
    """A Cluster's API and ingress VIPs, on its first subnet: allocated ones are IPv4, from
    the VIP block when it has one."""
    spec = cluster.obj.spec
    subnet = spec.network_attachments[0].subnet
    for fixed in (spec.api_vip, spec.ingress_vip):
        version = netaddr.IPAddress(fixed).version if fixed is not None else 4
        space = model.subnet_spaces(cluster.tenant, subnet).get(version)
        if space is not None:
            counts[_part_of("Subnet", space, fixed, True), cluster.tenant, subnet, version] += 1


def _part_of(kind: str, space: AddressSpace, fixed: str | None, vip: bool) -> str:
    """Where a value is drawn from: a fixed one where it lies, an allocated VIP from the
    VIP block (when there is one), an allocated port address from the rest."""
    block = space.vip_block
    if fixed is None:
        return "VIPBlock" if vip and block is not None else kind
    return "VIPBlock" if _in_part("VIPBlock", int(netaddr.IPAddress(fixed)), block) else kind


# --- what is said of it ---------------------------------------------------------------------


def nearly_full(usages: Iterable[Usage]) -> list[Diagnostic]:
    """POOL_NEARLY_FULL for every space used to NEARLY_FULL_PERCENT or more (one that is
    over-full is an error of its own: POOL_EXHAUSTED, SUBNET_TOO_SMALL...)."""
    out = []
    for usage in usages:
        if not usage.nearly_full or usage.used > usage.space.size or not usage.used:
            continue
        doc = usage.space.manifest.doc
        path = _field_of(usage.space)
        unit = "segment ids" if usage.space.id[0] == "NetworkClass" else "addresses"
        out.append(Diagnostic(
            "POOL_NEARLY_FULL",
            f"{usage.space.label} is {usage.shown_percent} % full: {usage.used} of "
            f"{usage.space.size} {unit} used, {usage.free} free",
            file=doc.file, line=doc.line_of(path), path=json_pointer(path),
            hint="make room before it runs out (a larger range, another pool or subnet, "
                 "fewer consumers); `unet show usage` lists every pool"))
    return out


def _field_of(space: Space) -> tuple[str, ...]:
    """The field that sizes a space: where a diagnostic about it points."""
    kind, _tenant, _name, family = space.id
    if kind == "NetworkClass":
        return ("spec", "segmentRange")
    if kind == "ExternalIPPool":
        return ("spec", "cidr")
    return ("spec", f"ipv{family}Cidr")


def to_json(usages: Iterable[Usage], installation: str, source: str) -> dict[str, Any]:
    """`source`: "backends" (recorded) or "offline" (demanded)."""
    return {"format_version": FORMAT_VERSION, "installation": installation, "source": source,
            "spaces": [usage.to_json() for usage in usages]}


def _count(value: int) -> str:
    """A count for people: an IPv6 subnet's 2^64 addresses (less a few) as `~2^64`, not
    twenty digits that push every other column aside (the JSON keeps them exact)."""
    return f"~2^{round(math.log2(value))}" if value >= 2**32 else str(value)


def render_text(usages: list[Usage]) -> str:
    rows = [("SPACE", "SIZE", "USED", "FREE", "USE%")]
    for usage in usages:
        rows.append((usage.space.label, _count(usage.space.size), _count(usage.used),
                     _count(usage.free), f"{usage.shown_percent}%" + (
                         "  nearly full" if usage.nearly_full and usage.used else "")))
    widths = [max(len(row[column]) for row in rows) for column in range(4)]
    return "".join(f"{row[0]:{widths[0]}}  {row[1]:>{widths[1]}}  {row[2]:>{widths[2]}}  "
                   f"{row[3]:>{widths[3]}}  {row[4]}".rstrip() + "\n" for row in rows)
