"""Tenants, ExternalIPPools, VirtualNetworks and Subnets: where addresses live."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

import netaddr

from ..models import AddressRange, Capability, Family, ProviderNetworkSpec, Route
from ..schema import Manifest
from .classes import class_of_network, require
from .context import AddressSpace, Context, Path_
from .netutil import address as parse_address
from .netutil import (
    first_host,
    is_address,
    overlaps,
    parse_cidr,
    parse_ip,
    reserved_ends,
)


def check_tenants(ctx: Context) -> dict[str, list[netaddr.IPNetwork]]:
    """Validate Tenants; return each tenant's parsed allowedCidrs."""
    allowed: dict[str, list[netaddr.IPNetwork]] = {}
    for tenant in ctx.kind("Tenant"):
        for index, name in enumerate(tenant.obj.spec.network_classes or ()):
            ctx.lookup(tenant, ("spec", "networkClasses", index), "NetworkClass", name)
        nets = []
        for index, text in enumerate(tenant.obj.spec.allowed_cidrs):
            net = parse_cidr(ctx, tenant, ("spec", "allowedCidrs", index), text,
                             network_range=False)
            if net is not None:
                nets.append(net)
        allowed[tenant.name] = nets
    return allowed


def check_pools(ctx: Context) -> None:
    for pool in ctx.kind("ExternalIPPool"):
        spec = pool.obj.spec
        for index, tenant in enumerate(spec.tenants or ()):
            ctx.lookup(pool, ("spec", "tenants", index), "Tenant", tenant)
        net = parse_cidr(ctx, pool, ("spec", "cidr"), spec.cidr)
        if net is None:
            continue
        space = _address_space(ctx, pool, net, spec.gateway, ("spec", "gateway"),
                               spec.ranges, ("spec", "ranges"), spec.exclude, ("spec", "exclude"))
        if space is not None:
            space.owner = pool.ref
            ctx.pools[pool.name] = space
    _check_pool_overlaps(ctx)


def _check_pool_overlaps(ctx: Context) -> None:
    by_region: dict[tuple[str, int], list[tuple[int, int, Manifest]]] = defaultdict(list)
    for pool in ctx.kind("ExternalIPPool"):
        space = ctx.pools.get(pool.name)
        if space is not None:
            by_region[(pool.obj.spec.region, space.net.version)].append(
                (space.net.first, space.net.last, pool))
    for pools in by_region.values():
        for earlier, later in overlaps(pools):
            ctx.report("POOL_OVERLAP", later, ("spec", "cidr"),
                       f"{later.obj.spec.cidr} overlaps ExternalIPPool '{earlier.name}' "
                       f"({earlier.obj.spec.cidr})")


def check_pools_against_networks(ctx: Context) -> None:
    """A pool and a tenant network of one region must not overlap (CIDRs nest or are apart)."""
    events: dict[tuple[str, int], list[tuple[int, int, bool, Any]]] = defaultdict(list)
    for pool in ctx.kind("ExternalIPPool"):
        space = ctx.pools.get(pool.name)
        if space is not None:
            events[(pool.obj.spec.region, space.net.version)].append(
                (space.net.first, space.net.last, True, pool))
    if not events:
        return
    for vn in ctx.kind("VirtualNetwork"):
        for version, net in ctx.networks.get((vn.tenant, vn.name), {}).items():
            key = (vn.obj.spec.region, version)
            if key in events:
                events[key].append((net.first, net.last, False, (vn, version)))
    for items in events.values():
        # CIDRs either nest or are disjoint: whatever started earlier and reaches
        # this start contains it, so the furthest-reaching pool (or network) suffices.
        pool_reach: tuple[int, Manifest] | None = None
        net_reach: tuple[int, Any] | None = None
        for first, last, is_pool, item in sorted(items, key=lambda e: (e[0], -e[1])):
            if is_pool:
                if net_reach is not None and net_reach[0] >= first:
                    _report_pool_overlap(ctx, item, net_reach[1])
                if pool_reach is None or last > pool_reach[0]:
                    pool_reach = (last, item)
            else:
                if pool_reach is not None and pool_reach[0] >= first:
                    _report_pool_overlap(ctx, pool_reach[1], item)
                if net_reach is None or last > net_reach[0]:
                    net_reach = (last, item)


def _report_pool_overlap(ctx: Context, pool: Manifest, vn_family: tuple[Manifest, int]) -> None:
    vn, version = vn_family
    ctx.report("POOL_OVERLAP", vn, ("spec", Family(version).cidr_field),
               f"{ctx.networks[(vn.tenant, vn.name)][version]} overlaps ExternalIPPool "
               f"'{pool.name}' ({pool.obj.spec.cidr}) of region {vn.obj.spec.region}",
               "choose a CIDR outside the region's external pools")


def check_networks(ctx: Context, allowed: dict[str, list[netaddr.IPNetwork]]) -> None:
    for vn in ctx.kind("VirtualNetwork"):
        spec = vn.obj.spec
        tenant = ctx.get("Tenant", None, vn.tenant)
        if tenant is not None and spec.region not in tenant.obj.spec.regions:
            ctx.report("REGION_NOT_ALLOWED", vn, ("spec", "region"),
                       f"tenant {vn.tenant} may not use region {spec.region}",
                       "allowed: " + ", ".join(tenant.obj.spec.regions))
        class_name = class_of_network(ctx, vn)
        if class_name is not None:
            ctx.vn_class[(vn.tenant, vn.name)] = class_name
            _check_class_allowed(ctx, vn, tenant, class_name)
        nets: dict[int, netaddr.IPNetwork] = {}
        if spec.ipv4_cidr is None and spec.ipv6_cidr is None:
            ctx.report("SCHEMA_REQUIRED", vn, ("spec",),
                       "a VirtualNetwork needs ipv4Cidr, ipv6Cidr or both")
        for family in Family:
            text, field = family.cidr_of(spec), family.cidr_field
            if text is None:
                continue
            net = parse_cidr(ctx, vn, ("spec", field), text, family)
            if net is None:
                continue
            nets[family] = net
            require(ctx, vn, ("spec", field), class_name, family.capability,
                    f"an {family.label} VirtualNetwork")
            permitted = allowed.get(vn.tenant or "", [])
            if tenant is not None and not any(
                net.version == ok.version and net in ok for ok in permitted
            ) and not ctx.rejected(tenant, ("spec", "allowedCidrs")):
                ctx.report("CIDR_NOT_ALLOWED", vn, ("spec", field),
                           f"{net} is outside the tenant's allowedCidrs",
                           "allowed: " + ", ".join(str(n) for n in permitted))
        ctx.networks[(vn.tenant, vn.name)] = nets


def _check_class_allowed(ctx: Context, vn: Manifest, tenant: Manifest | None,
                         class_name: str) -> None:
    """The provider may pin a tenant to some classes (OSAC keeps classes out of the tenant
    API; this is the pinning its reviewers suggested)."""
    allowed = tenant.obj.spec.network_classes if tenant is not None else None
    if tenant is None or allowed is None or class_name in allowed \
            or ctx.rejected(tenant, ("spec", "networkClasses")):  # a typo there is reported
        return
    chosen = "spec.networkClass" if vn.obj.spec.network_class else "the region's default class"
    ctx.report("NETWORK_CLASS_NOT_ALLOWED", vn,
               ("spec", "networkClass") if vn.obj.spec.network_class else ("spec", "region"),
               f"tenant {vn.tenant} may not use NetworkClass '{class_name}' ({chosen})",
               "allowed: " + (", ".join(allowed) or "none") + "; name one as networkClass")


def check_subnets(ctx: Context) -> None:
    by_network: dict[tuple[str | None, str, int], list[tuple[int, int, Manifest]]] = \
        defaultdict(list)
    for subnet in ctx.kind("Subnet"):
        spec = subnet.obj.spec
        vn = ctx.lookup(subnet, ("spec", "virtualNetwork"), "VirtualNetwork",
                        spec.virtual_network, subnet.tenant)
        if vn is None:
            continue
        class_name = ctx.vn_class.get((vn.tenant, vn.name))
        spaces = _subnet_spaces(ctx, subnet, vn, class_name)
        ctx.subnets[(subnet.tenant, subnet.name)] = spaces
        for version, space in spaces.items():
            by_network[(subnet.tenant, vn.name, version)].append(
                (space.net.first, space.net.last, subnet))
        if spec.dhcp:
            require(ctx, subnet, ("spec", "dhcp"), class_name, Capability.DHCP,
                    "a subnet with dhcp: true")
        _check_segment_options(ctx, subnet, spaces)
    for (_tenant, _vn, version), members in by_network.items():
        field = Family(version).cidr_field
        for earlier, later in overlaps(members):
            mine, theirs = (ctx.subnets[(m.tenant, m.name)][version].net for m in (later, earlier))
            ctx.report("SUBNET_OVERLAP", later, ("spec", field),
                       f"{mine} overlaps subnet '{earlier.name}' ({theirs}) of the same "
                       "VirtualNetwork")


def _subnet_spaces(ctx: Context, subnet: Manifest, vn: Manifest,
                   class_name: str | None) -> dict[int, AddressSpace]:
    vn_nets = ctx.networks.get((vn.tenant, vn.name), {})
    cls = ctx.get("NetworkClass", None, class_name) if class_name else None

    def inside_network(version: int, field: str, net: netaddr.IPNetwork) -> bool:
        parent = vn_nets.get(version)
        if parent is not None and net in parent:
            return True
        if parent is None and ctx.rejected(vn, ("spec", field)):
            ctx.reject_quietly(subnet, ("spec", field))  # the network's CIDR is reported
            return False
        where = f"inside {parent}" if parent is not None else \
            f"an {Family(version).label} CIDR on VirtualNetwork '{vn.name}' first"
        ctx.report("SUBNET_OUTSIDE_NETWORK", subnet, ("spec", field),
                   f"{net} is not inside VirtualNetwork '{vn.name}'",
                   f"choose a CIDR {where}" if parent is not None else f"declare {where}")
        return False

    return _segment_spaces(ctx, subnet, "a Subnet", inside_network,
                           cls.obj.spec.vip_prefix_length if cls is not None else None)


def _segment_spaces(ctx: Context, segment: Manifest, what: str,
                    accept: Callable[[int, str, netaddr.IPNetwork], bool],
                    vip_prefix: int | None) -> dict[int, AddressSpace]:
    """The address spaces of a Subnet or a ProviderNetwork (which has no gateway)."""
    spec = segment.obj.spec
    if spec.ipv4_cidr is None and spec.ipv6_cidr is None:
        ctx.report("SCHEMA_REQUIRED", segment, ("spec",),
                   f"{what} needs ipv4Cidr, ipv6Cidr or both")
        return {}
    spaces: dict[int, AddressSpace] = {}
    for version in Family:
        text, field = version.cidr_of(spec), version.cidr_field
        if text is None:
            continue
        net = parse_cidr(ctx, segment, ("spec", field), text, version)
        if net is None or not accept(version, field, net):
            continue
        gateway_field, gateway_attr = version.gateway_field, version.gateway_attr
        gateway_text = getattr(spec, gateway_attr, None)
        # `gateway: null`, as opposed to leaving it out: no gateway at all
        no_gateway = gateway_text is None and (
            gateway_attr in spec.model_fields_set or gateway_attr not in type(spec).model_fields)
        # Ranges are per family; a family with none draws from its whole subnet.
        ranges = [r for r in spec.allocation_ranges or () if _version_of(r.start) == version]
        space = _address_space(ctx, segment, net, gateway_text, ("spec", gateway_field),
                               ranges or None, ("spec", "allocationRanges"),
                               spec.exclude_addresses,
                               ("spec", "excludeAddresses"), range_index=_index_map(
                                   spec.allocation_ranges, version), no_gateway=no_gateway)
        if space is None:
            continue
        space.owner = segment.ref
        if no_gateway and version == 4 and net.size > 2 and segment.kind == "Subnet":
            _reserve_dhcp_server(space, spec.dhcp)  # a ProviderNetwork's: the provider's
        if version == 4 and vip_prefix is not None:
            _apply_vip_block(space, vip_prefix)
        if space.ranges_known and _available(space) <= 0:
            ctx.report("SUBNET_TOO_SMALL", segment, ("spec", field),
                       f"{net} leaves no address for ports after the reserved ones",
                       "use a larger subnet" + (f" (the class reserves the last /{vip_prefix} "
                                                "for VIPs)" if version == 4 and vip_prefix else ""))
            continue
        spaces[version] = space
    declared = {family for family in Family if family.cidr_of(spec)}
    for index, item in enumerate(spec.allocation_ranges or ()):
        if _version_of(item.start) not in declared:
            ctx.report("RANGE_INVALID", segment, ("spec", "allocationRanges", index),
                       f"{item.start}-{item.end} is of a family this subnet does not have")
    return spaces


def _reserve_dhcp_server(space: AddressSpace, dhcp: bool) -> None:
    """Without an IPv4 gateway, DHCPv4 answers from the first host: reserved with DHCP on
    or off, since `dhcp` is mutable and turning it on must never find a workload there
    (docs/decisions.md). A port that got it while DHCP was off, before it was reserved,
    keeps it (an allocation in use never moves) until DHCP is turned on."""
    first = int(first_host(space.net))
    space.reserved.add(first)
    if not dhcp:
        space.kept_if_held.add(first)


def _check_segment_options(ctx: Context, segment: Manifest,
                           spaces: dict[int, AddressSpace]) -> None:
    """MTU, DNS and NTP servers and DHCP routes of a Subnet or a ProviderNetwork."""
    spec = segment.obj.spec
    _check_mtu(ctx, segment, 6 in spaces or spec.ipv6_cidr is not None)
    for index, server in enumerate(spec.dns_servers):
        parse_ip(ctx, segment, ("spec", "dnsServers", index), server)
    for index, server in enumerate(spec.ntp_servers):  # OVN's DHCPv6 has no NTP option
        parse_ip(ctx, segment, ("spec", "ntpServers", index), server, version=4)
    for index, route in enumerate(spec.routes):
        _check_route(ctx, segment, index, route, spaces)


def check_provider_networks(ctx: Context) -> None:
    """ProviderNetworks: class, fixed segment id, addresses; who may use them."""
    by_segment: dict[tuple[str, int], Manifest] = {}
    for network in ctx.kind("ProviderNetwork"):
        spec = network.obj.spec
        for index, tenant in enumerate(spec.tenants):
            ctx.lookup(network, ("spec", "tenants", index), "Tenant", tenant)
        class_name = class_of_network(ctx, network)
        cls = ctx.get("NetworkClass", None, class_name)
        if cls is not None:
            ctx.provider_network_class[network.name] = cls.name
            _check_provider_segment(ctx, network, cls)
            if cls.obj.spec.fabric_manager is None:
                ctx.report("NETWORK_CLASS_INVALID", network, ("spec", "networkClass"),
                           f"NetworkClass '{cls.name}' has no fabricManager, which realises a "
                           "ProviderNetwork", "name a class with a fabricManager")
        earlier = by_segment.setdefault((spec.physical_network, spec.segment_id), network)
        if earlier is not network:
            ctx.report("SEGMENT_ID_CONFLICT", network, ("spec", "segmentId"),
                       f"segment {spec.segment_id} of physical network {spec.physical_network} "
                       f"is ProviderNetwork '{earlier.name}''s already",
                       "one VLAN is one ProviderNetwork: give each its own segmentId")
        spaces = _segment_spaces(ctx, network, "a ProviderNetwork",
                                 lambda _version, _field, _net: True, None)
        ctx.subnets[(None, network.name)] = spaces
        _check_segment_options(ctx, network, spaces)
        _reserve_provider_hosts(spec, spaces)
        _check_against_pools(ctx, network, spaces)


def _check_against_pools(ctx: Context, network: Manifest,
                         spaces: dict[int, AddressSpace]) -> None:
    """A provider network is a network of the region: apart from its external pools."""
    for version, space in spaces.items():
        for pool in ctx.kind("ExternalIPPool"):
            other = ctx.pools.get(pool.name)
            if pool.obj.spec.region == network.obj.spec.region and other is not None \
                    and other.net.version == version \
                    and (space.net in other.net or other.net in space.net):
                ctx.report("POOL_OVERLAP", network, ("spec", Family(version).cidr_field),
                           f"{space.net} overlaps ExternalIPPool '{pool.name}' ({other.net}) of "
                           f"region {network.obj.spec.region}",
                           "choose a CIDR outside the region's external pools")


def _reserve_provider_hosts(spec: ProviderNetworkSpec, spaces: dict[int, AddressSpace]
                            ) -> None:
    """Addresses the provider's own hosts hold on its VLAN, as far as unet can know them:
    the first host of each family (by convention the VLAN's router; DHCPv4 answers from
    it), its DNS and NTP servers and its routes' next hops. None goes to a tenant."""
    hosts = [*spec.dns_servers, *spec.ntp_servers, *(r.nexthop for r in spec.routes)]
    for version, space in spaces.items():
        if space.net.size > 2:
            space.reserved.add(int(first_host(space.net)))
        for text in hosts:
            if is_address(text):
                address = parse_address(text)
                if address.version == version and address in space.net:
                    space.reserved.add(int(address))


def _check_provider_segment(ctx: Context, network: Manifest, cls: Manifest) -> None:
    segment, span = network.obj.spec.segment_id, cls.obj.spec.segment_range
    if not span.start <= segment <= span.end and \
            not ctx.rejected(cls, ("spec", "segmentRange")):
        ctx.report("SEGMENT_OUT_OF_RANGE", network, ("spec", "segmentId"),
                   f"segment {segment} is outside NetworkClass '{cls.name}''s segmentRange "
                   f"{span.start}-{span.end}",
                   "widen the class's segmentRange to include it (its ids are unet's to hand "
                   "out), or use a class whose range has it")


def _version_of(text: str) -> int:
    return 6 if ":" in text else 4


def _index_map(ranges: list[AddressRange] | None, version: int) -> list[int]:
    return [i for i, r in enumerate(ranges or ()) if _version_of(r.start) == version]


def _apply_vip_block(space: AddressSpace, vip_prefix: int) -> None:
    if vip_prefix <= space.net.prefixlen:
        space.vip_block = (space.net.first, space.net.last)
    else:
        space.vip_block = (space.net.last - (1 << (32 - vip_prefix)) + 1, space.net.last)


def _available(space: AddressSpace) -> int:
    """How many addresses allocation can hand to ports."""
    total = 0
    for first, last in space.ranges:
        if space.vip_block is not None:
            v_first, v_last = space.vip_block
            overlap = max(0, min(last, v_last) - max(first, v_first) + 1)
        else:
            overlap = 0
        blocked = sum(1 for a in space.reserved if first <= a <= last and not (
            space.vip_block and space.vip_block[0] <= a <= space.vip_block[1]))
        total += last - first + 1 - overlap - blocked
    return total


def _address_space(
    ctx: Context, manifest: Manifest, net: netaddr.IPNetwork,
    gateway_text: str | None, gateway_path: Path_,
    ranges: list[AddressRange] | None, ranges_path: Path_,
    exclude: list[str], exclude_path: Path_,
    range_index: list[int] | None = None, no_gateway: bool = False,
) -> AddressSpace | None:
    """Gateway, reserved addresses and allocation ranges of a subnet family or a pool
    (`no_gateway`: the subnet has none, an isolated segment)."""
    ends = reserved_ends(net)
    if no_gateway:
        gateway = None
    elif gateway_text is None:
        gateway = int(first_host(net)) if net.size > 2 else None
    else:
        ip = parse_ip(ctx, manifest, gateway_path, gateway_text, "GATEWAY_INVALID", net.version)
        if ip is None:
            return None
        if ip not in net or int(ip) in ends:
            what = "outside" if ip not in net else "the network or broadcast address of"
            ctx.report("GATEWAY_INVALID", manifest, gateway_path, f"{ip} is {what} {net}",
                       f"use an address inside {net}, such as {first_host(net)}")
            return None
        gateway = int(ip)
    reserved = set(ends) | ({gateway} if gateway is not None else set())
    for index, text in enumerate(exclude):
        ip = parse_ip(ctx, manifest, (*exclude_path, index), text)
        if ip is None:
            continue
        if ip.version == net.version:
            if ip not in net:
                ctx.report("ADDRESS_INVALID", manifest, (*exclude_path, index),
                           f"excluded address {ip} is outside {net}")
            reserved.add(int(ip))
    if ranges is None:
        parsed = [(net.first, net.last)]
    else:
        parsed = _check_ranges(ctx, manifest, net, gateway, ranges, ranges_path,
                               range_index or list(range(len(ranges))))
    return AddressSpace(net=net, gateway=gateway, reserved=reserved, ranges=parsed,
                        ranges_known=ranges is None or len(parsed) == len(ranges))


def _check_ranges(
    ctx: Context, manifest: Manifest, net: netaddr.IPNetwork, gateway: int | None,
    ranges: list[AddressRange], ranges_path: Path_, indexes: list[int],
) -> list[tuple[int, int]]:
    parsed: list[tuple[int, int, int]] = []
    for index, item in zip(indexes, ranges, strict=True):
        path = (*ranges_path, index)
        start = parse_ip(ctx, manifest, (*path, "start"), item.start, "RANGE_INVALID")
        end = parse_ip(ctx, manifest, (*path, "end"), item.end, "RANGE_INVALID")
        if start is None or end is None:
            continue
        if start.version != end.version:
            ctx.report("RANGE_INVALID", manifest, path, f"{start} and {end} are of different "
                       "address families")
        elif start > end:
            ctx.report("RANGE_INVALID", manifest, path, f"the range starts at {start}, after "
                       f"its end {end}", "swap start and end")
        elif start not in net or end not in net:
            ctx.report("RANGE_INVALID", manifest, path, f"{start}-{end} is not inside {net}")
        elif gateway is not None and int(start) <= gateway <= int(end):
            ctx.report("RANGE_CONTAINS_GATEWAY", manifest, path,
                       f"{start}-{end} holds the gateway {netaddr.IPAddress(gateway, net.version)}",
                       "start the range after the gateway")
        else:
            parsed.append((int(start), int(end), index))
    for earlier, later in overlaps((a, b, (a, b, i)) for a, b, i in parsed):
        ctx.report("RANGE_OVERLAP", manifest, (*ranges_path, later[2]),
                   f"this range overlaps range {earlier[2] + 1}")
    return [(a, b) for a, b, _ in parsed]


def _check_mtu(ctx: Context, subnet: Manifest, has_ipv6: bool) -> None:
    mtu = subnet.obj.spec.mtu
    low = 1280 if has_ipv6 else 68
    if not low <= mtu <= 9000:
        ctx.report("MTU_INVALID", subnet, ("spec", "mtu"),
                   f"mtu {mtu} is outside {low}..9000"
                   + (" (IPv6 needs at least 1280)" if has_ipv6 and mtu < 1280 else ""))


def _check_route(ctx: Context, subnet: Manifest, index: int, route: Route,
                 spaces: dict[int, AddressSpace]) -> None:
    path = ("spec", "routes", index)
    dest = parse_cidr(ctx, subnet, (*path, "destination"), route.destination,
                      network_range=False)
    hop = parse_ip(ctx, subnet, (*path, "nexthop"), route.nexthop)
    if dest is None or hop is None:
        return
    space = spaces.get(hop.version)
    if dest.version != hop.version:
        ctx.report("ADDRESS_INVALID", subnet, (*path, "nexthop"),
                   f"nexthop {hop} is not of the destination's family")
    elif space is not None and hop not in space.net:
        ctx.report("ADDRESS_INVALID", subnet, (*path, "nexthop"),
                   f"nexthop {hop} is not inside the subnet {space.net}",
                   "a DHCP route's next hop must be on the subnet")
