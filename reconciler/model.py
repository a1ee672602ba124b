"""The validated model: what render and allocate read, with references resolved."""

from __future__ import annotations

from collections import defaultdict
from functools import cached_property
from typing import Any

import netaddr

from .check.context import AddressSpace, Context
from .check.netutil import address, family_of
from .models import NetworkAttachment, first_subnet, segment_of
from .objects import content_hash
from .schema import Manifest

#: Where the links between peered networks' routers are numbered: link-local, which no
#: tenant network may use (CIDR_RESERVED), one /30 per peering.
PEERING_NET = netaddr.IPNetwork("169.254.0.0/16")
PEERING_BLOCKS = PEERING_NET.size // 4


def _side_key(side: tuple[str | None, str]) -> tuple[str, str]:
    return (side[0] or "", side[1])


class Model:
    """A revision that passed validation, indexed for the renderers."""

    def __init__(self, ctx: Context, tenants: frozenset[str] | None = None) -> None:
        """With `tenants`, the model shows only those tenants' manifests (and every
        provider manifest): rendering it gives only their rows. `full` is always the
        whole revision, for what tenants share (segment ids, external pools)."""
        self.ctx = ctx
        self.tenants = tenants
        self._full = None if tenants is None else Model(ctx)
        self._by_kind: dict[str, list[Manifest]] = {}
        #: k8s manager → the physical network its hosting clusters bridge subnets onto
        #: (the managers' own word; the pipeline fills it in)
        self.physical_networks: dict[str, str] = {}

    @property
    def full(self) -> Model:
        """The whole revision (a property: a model holding itself would be a reference
        cycle, freed only by the cyclic collector)."""
        return self if self._full is None else self._full

    # plain look-ups ---------------------------------------------------------------------------
    def kind(self, kind: str) -> list[Manifest]:
        """Manifests of a kind in a fixed order (by reference); computed once."""
        found = self._by_kind.get(kind)
        if found is None:
            found = self.ctx.kind(kind)
            if self.tenants is not None:  # before sorting: a few of many
                found = [m for m in found
                         if m.obj.scope != "tenant" or m.tenant in self.tenants]
            found = self._by_kind[kind] = sorted(found, key=lambda m: m.ref)
        return found

    def get(self, kind: str, tenant: str | None, name: str | None) -> Manifest | None:
        return self.ctx.get(kind, tenant, name)

    @property
    def config(self) -> Any:
        return self.ctx.kind("RepositoryConfig")[0].obj.spec

    @property
    def installation(self) -> str:
        return str(self.config.installation)

    def subnet_spaces(self, tenant: str | None, subnet: str) -> dict[int, AddressSpace]:
        return self.ctx.subnets.get((tenant, subnet), {})

    def port_spaces(self, workload: Manifest, attachment: NetworkAttachment
                    ) -> dict[int, AddressSpace]:
        """The address spaces of an attachment's port: its subnet's; on a provider network,
        only the families the workload's own network has, since its groups (that
        network's) can filter no other."""
        tenant, name = segment_of(workload.tenant, attachment)
        spaces = self.subnet_spaces(tenant, name)
        if tenant is not None:
            return spaces
        own = self.network_cidrs(workload.tenant, self.network_of_workload(workload) or "")
        return {version: space for version, space in spaces.items() if version in own}

    def pool_space(self, pool: str) -> AddressSpace | None:
        return self.ctx.pools.get(pool)

    def network_cidrs(self, tenant: str | None, vn: str) -> dict[int, netaddr.IPNetwork]:
        return self.ctx.networks.get((tenant, vn), {})

    def class_of(self, tenant: str | None, vn: str) -> Manifest | None:
        return self.get("NetworkClass", None, self.ctx.vn_class.get((tenant, vn)))

    def provider_network_class(self, name: str) -> Manifest | None:
        return self.get("NetworkClass", None, self.ctx.provider_network_class.get(name))

    def manager(self, name: str | None) -> Manifest | None:
        return self.get("NetworkManager", None, name)

    # derived views ----------------------------------------------------------------------------
    @cached_property
    def workloads(self) -> list[Manifest]:
        return [w for kind in ("BaremetalInstance", "Cluster", "ComputeInstance")
                for w in self.kind(kind)]

    @cached_property
    def workloads_by_subnet(self) -> dict[tuple[str | None, str], list[Manifest]]:
        out: dict[tuple[str | None, str], list[Manifest]] = defaultdict(list)
        for workload in self.workloads:
            for segment in {segment_of(workload.tenant, a)
                            for a in workload.obj.spec.network_attachments}:
                out[segment].append(workload)
        return out

    @staticmethod
    def hosting_cluster(workload: Manifest) -> str | None:
        """The hosting cluster a VM runs on (KubeVirt), or None: its ports are the fabric's."""
        return getattr(workload.obj.spec, "hosting_cluster", None)

    def network_of_workload(self, workload: Manifest) -> str | None:
        subnet = self.get("Subnet", workload.tenant,
                          first_subnet(workload.obj.spec.network_attachments))
        return subnet.obj.spec.virtual_network if subnet is not None else None

    @cached_property
    def nat_gateways(self) -> dict[tuple[str | None, str], Manifest]:
        return {(g.tenant, g.obj.spec.virtual_network): g for g in self.kind("NATGateway")}

    def peers(self, tenant: str | None, vn: str) -> dict[tuple[str | None, str], Manifest]:
        """The networks a network is peered with (both sides declared), each with the
        network's own VirtualNetworkPeering."""
        return self.ctx.peered.get((tenant, vn), {})

    def peer_prefixes(self, peer: tuple[str | None, str], version: int
                      ) -> list[tuple[str, str]]:
        """(subnet, CIDR) of each subnet of a peered network in a family: what a peering
        routes to it. Not the network's whole CIDR: an address there that no subnet holds
        would reach the peer's router and leave by its way out."""
        tenant = peer[0]
        return sorted((s.name, str(space.net)) for s in self.full.subnets_of.get(peer, ())
                      if (space := self.subnet_spaces(tenant, s.name).get(version)))

    @cached_property
    def subnets_of(self) -> dict[tuple[str | None, str], list[Manifest]]:
        """(tenant, VirtualNetwork) → its subnets (of the model's tenants)."""
        out: dict[tuple[str | None, str], list[Manifest]] = defaultdict(list)
        for subnet in self.kind("Subnet"):
            out[(subnet.tenant, subnet.obj.spec.virtual_network)].append(subnet)
        return out

    @cached_property
    def established_peerings(self) -> frozenset[str]:
        """The references of the VirtualNetworkPeerings both sides declare."""
        return frozenset(p.ref for peers in self.ctx.peered.values() for p in peers.values())

    @cached_property
    def peering_links(self) -> dict[tuple[tuple[str | None, str], tuple[str | None, str]], int]:
        """(network, peer) → the /30 of 169.254.0.0/16 that links their routers (the
        network's address is the first host of it when it sorts first, else the second).
        Derived from the pair, so both sides and every run agree; a pair whose block one of
        its routers already uses takes the next free one, in the order of the pairs."""
        used: dict[tuple[str | None, str], set[int]] = defaultdict(set)
        out: dict[tuple[tuple[str | None, str], tuple[str | None, str]], int] = {}
        pairs = sorted({tuple(sorted((own, peer), key=_side_key))
                        for own, peers in self.ctx.peered.items() for peer in peers
                        if own in self.ctx.peered.get(peer, {})}, key=lambda p: (
                            _side_key(p[0]), _side_key(p[1])))
        for first, second in pairs:
            block = int(content_hash([first, second])[:8], 16) % PEERING_BLOCKS
            while block in used[first] or block in used[second]:
                block = (block + 1) % PEERING_BLOCKS
            used[first].add(block)
            used[second].add(block)
            out[(first, second)] = out[(second, first)] = block
        return out

    def peering_address(self, own: tuple[str | None, str], peer: tuple[str | None, str]
                        ) -> str:
        """A network's router's IPv4 address on its link to a peer's (a /30)."""
        block = self.peering_links[(own, peer)]
        first = min(own, peer, key=_side_key) == own
        return str(PEERING_NET[block * 4 + (1 if first else 2)])

    @cached_property
    def active_attachments(self) -> dict[tuple[str | None, str], list[Manifest]]:
        """ExternalIPAttachments whose target is declared, by (tenant, VirtualNetwork)."""
        out: dict[tuple[str | None, str], list[Manifest]] = defaultdict(list)
        for attachment in self.kind("ExternalIPAttachment"):
            target = attachment.obj.spec.target
            workload = self.get(target.kind, attachment.tenant, target.name)
            vn = self.network_of_workload(workload) if workload is not None else None
            if vn is not None:
                out[(attachment.tenant, vn)].append(attachment)
        return out

    def external_ip_family(self, tenant: str | None, name: str) -> int | None:
        """The address family of an ExternalIP: its pool's (None: not known)."""
        eip = self.get("ExternalIP", tenant, name)
        space = self.pool_space(eip.obj.spec.pool) if eip is not None else None
        return space.net.version if space is not None else None

    def router_pools(self, tenant: str | None, vn: str) -> dict[int, tuple[str, str | None]]:
        """The network router's external address in each family it needs one: family →
        (its pool, the NATGateway's ExternalIP, or None for an address of the router's
        own). A NATGateway's ExternalIP serves its family; every other family of the
        network's ExternalIPAttachments gets an address of the router's own, from the
        pool of its first attachment of that family."""
        out: dict[int, tuple[str, str | None]] = {}
        nat = self.nat_gateways.get((tenant, vn))
        consumers = [(True, nat.obj.spec.external_ip)] if nat is not None else []
        consumers += [(False, a.obj.spec.external_ip)
                      for a in self.active_attachments.get((tenant, vn), ())]
        for is_nat, name in consumers:
            eip = self.get("ExternalIP", tenant, name)
            version = self.external_ip_family(tenant, name)
            if eip is not None and version is not None and version not in out:
                out[version] = (eip.obj.spec.pool, name if is_nat else None)
        return out

    def egress_closed(self, tenant: str | None, vn: str) -> list[int]:
        """OSAC: attachments are inbound only. The families in which the network's router
        has a way out (for the replies of its attachments) but no NATGateway: in those it
        lets no new connection out."""
        nat = self.nat_gateways.get((tenant, vn))
        translated = self.external_ip_family(tenant, nat.obj.spec.external_ip) \
            if nat is not None else None
        return sorted(v for v in self.router_pools(tenant, vn) if v != translated)

    def routed_inside(self, tenant: str | None, vn: str, version: int) -> list[str]:
        """Destinations of a family reached without the network's way out: those its
        subnets route through a next hop inside it (an appliance), the provider
        networks its workloads attach to, and the networks it is peered with. Reaching
        them never leaves through its NATGateway."""
        cidr = self.network_cidrs(tenant, vn).get(version)
        routed = {r.destination for s in self.kind("Subnet")
                  if s.tenant == tenant and s.obj.spec.virtual_network == vn
                  for r in s.obj.spec.routes
                  if cidr is not None and family_of(r.nexthop) == version
                  and address(r.nexthop) in cidr}
        peered = {prefix for peer in self.peers(tenant, vn)
                  for _, prefix in self.peer_prefixes(peer, version)
                  if version in self.network_cidrs(*peer)
                  and cidr is not None}  # routed only in a family both networks have
        return sorted(routed | peered | self.provider_cidrs.get((tenant, vn, version), set()))

    @cached_property
    def provider_cidrs(self) -> dict[tuple[str | None, str, int], set[str]]:
        """(tenant, VirtualNetwork, family) → what the provider networks its workloads
        attach to reach without its router in that family: their CIDRs and the
        destinations of their routes."""
        out: dict[tuple[str | None, str, int], set[str]] = defaultdict(set)
        for workload in self.workloads:
            vn = self.network_of_workload(workload)
            for attachment in workload.obj.spec.network_attachments:
                name = attachment.provider_network
                network = self.get("ProviderNetwork", None, name) if name else None
                if network is None or vn is None:
                    continue
                for version, space in self.port_spaces(workload, attachment).items():
                    out[(workload.tenant, vn, version)] |= {str(space.net), *(
                        r.destination for r in network.obj.spec.routes
                        if family_of(r.nexthop) == version
                        and address(r.nexthop) in space.net)}
        return out

    def gateway_pools(self) -> list[tuple[str | None, str, int, str]]:
        """(tenant, vn, family, pool) of the external addresses routers need of their own
        (router_pools)."""
        return [(tenant, vn, version, pool)
                for tenant, vn in sorted(self.active_attachments,
                                         key=lambda tv: (tv[0] or "", tv[1]))
                for version, (pool, eip) in sorted(self.router_pools(tenant, vn).items())
                if eip is None]
