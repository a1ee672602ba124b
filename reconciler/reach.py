"""Reachability: who may open a connection to each workload NIC of a validated revision, and
what each NIC may open outwards (docs/api.md, "Reachability").

It follows the API's semantics, not a backend's rows, so that plans, guardrails and
`unet reach` answer alike on every backend; tests hold OVN to it with ovn-trace. It is
compact: an `Opening` is one way in to one NIC (a source class, a protocol and its ports, a
family, and the public address it comes through, if any), never one pair of addresses.

Sources, as a NIC's ingress rules admit them:
- a rule's CIDR: the part of it inside the NIC's network (routed there, or on the NIC's own
  segment when the families' gateways say so); and, through each public address that
  leads to the NIC (an ExternalIPAttachment to its primary NIC: every port, or the ports
  it forwards), the rest of it, `internet` when the CIDR is all of a family;
- a rule's group: the NICs that use it (`members`), wherever they can reach the NIC from;
- on a provider network: the part of a rule's CIDR on that network (its hosts and the
  tenants it names, `members`).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import netaddr

from .allocate import Allocations, external_key, ip_of_port, port_key, vip_key
from .check.netutil import network
from .model import Model
from .models import Family, segment_of
from .models import primary_index as primary_of
from .schema import Manifest

INTERNET = "internet"
#: Rules a hosting cluster's MultiNetworkPolicy cannot express are left out there
#: (POLICY_RULE_NOT_REALISED): they open nothing to a VM it runs.
_NOT_ON_CLUSTERS = ("icmp", "icmpv6")


@dataclass(frozen=True, order=True)
class Traffic:
    """What a rule admits: a protocol, and its ports (tcp, udp) or ICMP type and code."""

    protocol: str  # tcp, udp, icmp, icmpv6, all
    low: int | None = None  # tcp/udp: the port range; None: every port
    high: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None

    @classmethod
    def of(cls, rule: Any) -> Traffic:
        return cls(rule.protocol, rule.port_from, rule.port_to, rule.icmp_type, rule.icmp_code)

    def admits(self, protocol: str, port: int | None) -> bool:
        """Whether a new connection of `protocol` to `port` (tcp, udp) passes."""
        if self.protocol == "all":
            return True
        if self.protocol != protocol and not (self.protocol == "icmp" and protocol == "icmpv6"
                                               and self.icmp_type is None):
            return False
        return self.low is None or port is None or self.low <= port <= (self.high or self.low)

    def __str__(self) -> str:
        if self.protocol in ("tcp", "udp"):
            if self.low is None:
                return f"{self.protocol} (every port)"
            return f"{self.protocol}/{self.low}" + (f"-{self.high}" if self.high != self.low
                                                     else "")
        if self.protocol in ("icmp", "icmpv6"):
            return self.protocol + (f" type {self.icmp_type}" if self.icmp_type is not None
                                    else "") + (f" code {self.icmp_code}"
                                                if self.icmp_code is not None else "")
        return "all traffic"


@dataclass(frozen=True)
class Cause:
    """A manifest field that grants part of an opening: where a guardrail points."""

    ref: str  # Kind/tenant/name
    path: tuple[str | int, ...]
    what: str  # rule, membership, external IP, port forward, provider network tenants, peering

    def __str__(self) -> str:
        return f"{self.what} ({self.ref} {'.'.join(map(str, self.path))})"


@dataclass(frozen=True)
class Public:
    """An external address that leads to a NIC (DNAT, or port forwards)."""

    address: str | None  # None: known after apply
    family: int
    attachment: Manifest
    forwards: tuple[tuple[str, int, int], ...] | None  # (protocol, external, internal)

    @property
    def shown(self) -> str:
        return self.address or f"ExternalIP {self.attachment.obj.spec.external_ip} " \
                               "(address known after apply)"


@dataclass
class Nic:
    """One attachment of a workload: its port on a segment."""

    name: str  # tenant/workload/index
    workload: Manifest
    index: int
    vn: str
    segment: tuple[str | None, str]  # (tenant, subnet), or (None, provider network)
    groups: tuple[str, ...]
    addresses: dict[int, str | None]  # family → address (None: known after apply)
    hosted: str | None  # the hosting cluster a VM runs on
    public: list[Public] = field(default_factory=list)
    extra: dict[int, list[str]] = field(default_factory=dict)  # a Cluster's VIPs

    @property
    def tenant(self) -> str:
        return str(self.workload.tenant)

    def has(self, address: netaddr.IPAddress) -> bool:
        return any(a is not None and netaddr.IPAddress(a) == address
                   for a in (*self.addresses.values(), *(v for vs in self.extra.values()
                                                          for v in vs)))


@dataclass(frozen=True)
class Opening:
    """One way in to a NIC."""

    nic: str
    source: str  # internet, a CIDR, "group G", "provider network P"
    traffic: Traffic
    family: int
    via: str | None  # the public address (and forwarded port) it comes through
    because: tuple[Cause, ...]
    members: tuple[str, ...] = ()  # a group's NICs; a provider network's tenants
    #: The addresses the source may have: the rule's CIDR, as far as it reaches the NIC
    #: (inside its network: the smaller of the two); None for a group
    space: netaddr.IPNetwork | None = None

    @property
    def key(self) -> tuple[str, str, Traffic, int, str | None]:
        return (self.nic, self.source, self.traffic, self.family, self.via)

    @property
    def internet_facing(self) -> bool:
        return self.via is not None

    def __str__(self) -> str:
        via = f" via {self.via}" if self.via else ""
        family = " (IPv6)" if self.family == 6 and ":" not in self.source + via else ""
        return f"{self.traffic} from {self.source}{via}{family}"


class Reachability:
    """Every NIC of a revision, and every way in to each."""

    def __init__(self, model: Model, allocations: Allocations,
                 tenants: frozenset[str] | None = None) -> None:
        """With `tenants`, only their NICs (what a change of theirs can open)."""
        self.model = model
        self.allocations = allocations
        self.tenants = tenants
        self.nics: dict[str, Nic] = {n.name: n for n in self._nics()}
        self._attach_public()
        self.members = self._members()

    @cached_property
    def openings(self) -> list[Opening]:
        """Every way in to every NIC (built when first asked: a live plan needs the NICs
        and their groups only)."""
        return [o for nic in self.nics.values() for o in self._openings(nic)]

    # -- NICs -----------------------------------------------------------------------------------
    def _value(self, key: str) -> str | None:
        found = self.allocations.get(key)
        return found.value if found is not None and found.known else None

    def external_address(self, tenant: str, eip: str) -> str | None:
        return self._value(external_key(tenant, eip))

    def _nics(self) -> Iterator[Nic]:
        for workload in self.model.workloads:
            vn = self.model.network_of_workload(workload)
            if vn is None or (self.tenants is not None and workload.tenant not in self.tenants):
                continue
            for index, attachment in enumerate(workload.obj.spec.network_attachments):
                port = port_key(workload, index)
                families = self.model.port_spaces(workload, attachment)
                nic = Nic(f"{workload.tenant}/{workload.name}/{index}", workload, index, vn,
                          segment_of(workload.tenant, attachment),
                          tuple(attachment.security_groups),
                          {v: self._value(ip_of_port(port, v)) for v in sorted(families)},
                          self.model.hosting_cluster(workload))
                if workload.kind == "Cluster" and index == primary_index(workload):
                    for endpoint in ("api", "ingress"):
                        vip = self._value(vip_key(workload.tenant, workload.name, endpoint))
                        if vip is not None:
                            nic.extra.setdefault(6 if ":" in vip else 4, []).append(vip)
                yield nic

    def _attach_public(self) -> None:
        for attachments in self.model.active_attachments.values():
            for attachment in attachments:
                spec = attachment.obj.spec
                target = self.model.get(spec.target.kind, attachment.tenant, spec.target.name)
                family = self.model.external_ip_family(attachment.tenant, spec.external_ip)
                if target is None or family is None:
                    continue
                nic = self.nics.get(f"{attachment.tenant}/{target.name}/"
                                    f"{primary_index(target)}")
                if nic is None:
                    continue
                forwards = tuple((f.protocol, f.external_port, f.internal_port or f.external_port)
                                 for f in spec.ports) if spec.ports else None
                nic.public.append(Public(
                    self._value(external_key(attachment.tenant, spec.external_ip)), family,
                    attachment, forwards))

    def _members(self) -> dict[tuple[str, str, str], list[Nic]]:
        """(tenant, network, group) → the NICs that use the group."""
        out: dict[tuple[str, str, str], list[Nic]] = {}
        for nic in self.nics.values():
            for group in nic.groups:
                out.setdefault((nic.tenant, nic.vn, group), []).append(nic)
        return out

    # -- ways in ----------------------------------------------------------------------------------
    def rules(self, nic: Nic, direction: str) -> Iterator[tuple[Any, Cause, Cause]]:
        """A NIC's rules of one direction: (rule, where it is written, the membership)."""
        for position, name in enumerate(nic.groups):
            membership = Cause(nic.workload.ref, ("spec", "networkAttachments", nic.index,
                                                  "securityGroups", position), "membership")
            group = self.model.get("SecurityGroup", nic.tenant, name)
            if group is None or group.obj.spec.virtual_network != nic.vn:
                if name == "default":
                    yield from _implicit_default(nic, direction, membership)
                continue
            for index, rule in enumerate(getattr(group.obj.spec, direction)):
                if nic.hosted is not None and not _realised_on_clusters(rule):
                    continue
                yield rule, Cause(group.ref, ("spec", direction, index), "rule"), membership

    def _openings(self, nic: Nic) -> Iterator[Opening]:
        for rule, written, membership in self.rules(nic, "ingress"):
            traffic = Traffic.of(rule)
            for family in sorted(nic.addresses):
                if Family(family) not in rule.families:
                    continue
                because = (written, membership)
                if rule.security_group is not None:
                    where = self.remote_network(nic, rule)
                    if where is not None:
                        yield from self._from_group(nic, rule.security_group, traffic,
                                                    family, because, where)
                elif rule.cidr is not None and network(rule.cidr).version == family:
                    yield from self._from_cidr(nic, network(rule.cidr), traffic, family,
                                               because)

    def remote_network(self, nic: Nic, rule: Any) -> tuple[str, str] | None:
        """The network whose group a rule's `securityGroup` is: the NIC's own, or with
        `peering` its peer's while the peering is established (None: not)."""
        peering = getattr(rule, "peering", None)
        if peering is None:
            return nic.tenant, nic.vn
        return next(((str(t), vn) for (t, vn), p in self.model.peers(nic.tenant, nic.vn).items()
                     if p.name == peering), None)

    def _from_group(self, nic: Nic, group: str, traffic: Traffic, family: int,
                    because: tuple[Cause, ...], where: tuple[str, str]) -> Iterator[Opening]:
        members = tuple(sorted(m.name for m in self.members.get((*where, group), ())
                               if m.name != nic.name and self.path(m, nic, family)))
        shown = f"group {group}"
        if where != (nic.tenant, nic.vn):
            shown += f" of {where[0]}/{where[1]} (peered)"
            peering = self.model.peers(nic.tenant, nic.vn)[where]
            because = (*because, Cause(peering.ref, ("spec", "peer"), "peering"))
        if members:
            yield Opening(nic.name, shown, traffic, family, None, because, members)

    def _from_cidr(self, nic: Nic, cidr: netaddr.IPNetwork, traffic: Traffic, family: int,
                   because: tuple[Cause, ...]) -> Iterator[Opening]:
        tenant, segment = nic.segment
        if tenant is None:  # a provider network: its hosts and its tenants' ports
            space = self.model.subnet_spaces(None, segment).get(family)
            if space is not None and _overlap(cidr, space.net):
                provider = self.model.get("ProviderNetwork", None, segment)
                tenants = tuple(provider.obj.spec.tenants) if provider is not None else ()
                yield Opening(nic.name, f"provider network {segment}", traffic, family, None,
                              (*because, Cause(str(provider.ref if provider else segment),
                                               ("spec", "tenants"), "provider network tenants")),
                              tenants, _smaller(cidr, space.net))
            return
        inside = self.model.network_cidrs(nic.tenant, nic.vn).get(family)
        if inside is not None and _overlap(cidr, inside):
            shown = str(cidr) if cidr in inside else f"network {nic.vn}"
            yield Opening(nic.name, shown, traffic, family, None, because,
                          space=_smaller(cidr, inside))
        if inside is not None and cidr in inside:
            return  # nothing from outside the network has such an address
        yield from self._from_peers(nic, cidr, traffic, family, because)
        source = INTERNET if cidr.prefixlen == 0 else str(cidr)
        for public in nic.public:
            if public.family != family:
                continue
            reached = Cause(public.attachment.ref, ("spec", "target"), "external IP")
            if public.forwards is None:
                yield Opening(nic.name, source, traffic, family, public.shown,
                              (*because, reached), space=cidr)
                continue
            for index, (protocol, external, internal) in enumerate(public.forwards):
                if traffic.admits(protocol, internal):
                    yield Opening(nic.name, source, Traffic(protocol, internal, internal),
                                  family, f"{public.shown} {protocol}/{external}",
                                  (*because, reached, Cause(public.attachment.ref,
                                                            ("spec", "ports", index),
                                                            "port forward")),
                                  space=cidr)

    def _from_peers(self, nic: Nic, cidr: netaddr.IPNetwork, traffic: Traffic, family: int,
                    because: tuple[Cause, ...]) -> Iterator[Opening]:
        """The part of a rule's CIDR in each network peered with the NIC's, routed to it."""
        if not self.routed(nic, family):
            return
        for (tenant, vn), peering in sorted(self.model.peers(nic.tenant, nic.vn).items(),
                                            key=lambda item: (str(item[0][0]), item[0][1])):
            theirs = self.model.network_cidrs(tenant, vn).get(family)
            if theirs is None or not _overlap(cidr, theirs) or \
                    not self.peered((nic.tenant, nic.vn), (str(tenant), vn), family):
                continue
            shown = str(cidr) if cidr in theirs else f"network {tenant}/{vn} (peered)"
            yield Opening(nic.name, shown, traffic, family, None,
                          (*because, Cause(peering.ref, ("spec", "peer"), "peering")),
                          space=_smaller(cidr, theirs))

    # -- paths ----------------------------------------------------------------------------------
    def path(self, source: Nic, target: Nic, family: int) -> bool:
        """Whether a packet of `family` from one NIC gets to another without leaving their
        networks: on one segment, or routed between segments that both have a gateway in
        the family, in one network or two peered ones; never across other networks, nor
        from a provider network to a tenant subnet."""
        if family not in source.addresses or family not in target.addresses:
            return False
        if source.segment == target.segment:
            return True
        if source.segment[0] is None or target.segment[0] is None:
            return False
        if (source.tenant, source.vn) != (target.tenant, target.vn) and not self.peered(
                (source.tenant, source.vn), (target.tenant, target.vn), family):
            return False
        return self._routed(source.segment, family) and self._routed(target.segment, family)

    def peered(self, own: tuple[str, str], other: tuple[str, str], family: int) -> bool:
        """Whether two networks are routed to each other in `family`: peered, and both
        with a CIDR of it."""
        return other in self.model.peers(*own) and family in self.model.network_cidrs(
            *own) and family in self.model.network_cidrs(*other)

    def routed(self, nic: Nic, family: int) -> bool:
        """Whether the NIC's segment has a gateway of `family`: its only way out of its
        network (a subnet without one is isolated in that family; a provider network has
        no router of unet's)."""
        return nic.segment[0] is not None and self._routed(nic.segment, family)

    def _routed(self, segment: tuple[str | None, str], family: int) -> bool:
        space = self.model.subnet_spaces(*segment).get(family)
        return space is not None and space.gateway is not None

    def of(self, nic: str) -> list[Opening]:
        return [o for o in self.openings if o.nic == nic]


def primary_index(workload: Manifest) -> int:
    """The attachment DNAT and the default route go to: the one marked, or the only one."""
    return primary_of(workload.obj.spec.network_attachments)


def _smaller(a: netaddr.IPNetwork, b: netaddr.IPNetwork) -> netaddr.IPNetwork:
    """Of two overlapping networks, the one inside the other."""
    return a if a in b else b


def _overlap(a: netaddr.IPNetwork, b: netaddr.IPNetwork) -> bool:
    return bool(a.version == b.version and (a in b or b in a))


def _realised_on_clusters(rule: Any) -> bool:
    return rule.protocol not in _NOT_ON_CLUSTERS and (
        rule.port_from is None or rule.port_from == rule.port_to)


@dataclass(frozen=True)
class _ImplicitRule:
    protocol: str
    cidr: str | None = None
    security_group: str | None = None
    port_from: int | None = None
    port_to: int | None = None
    icmp_type: int | None = None
    icmp_code: int | None = None

    @property
    def families(self) -> frozenset[Family]:
        return frozenset(Family)


def _implicit_default(nic: Nic, direction: str, membership: Cause
                      ) -> Iterable[tuple[Any, Cause, Cause]]:
    """The group `default` a network has unless the tenant declares one: ingress from its
    members, all egress."""
    written = Cause(f"VirtualNetwork/{nic.tenant}/{nic.vn}", ("implicit default group",),
                    "rule")
    if direction == "ingress":
        return [(_ImplicitRule("all", security_group="default"), written, membership)]
    return [(_ImplicitRule("all", cidr="0.0.0.0/0"), written, membership),
            (_ImplicitRule("all", cidr="::/0"), written, membership)]
